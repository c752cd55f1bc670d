"""CRC-32C, the checksum of frames, segments, snapshots and archives: the ``crc32c`` package's
compiled function, loaded without running the package's ``__init__``.

That ``__init__`` asks ``importlib.metadata`` for its own version, which costs more start-up time
than the rest of the checksum; the extension module alone is all we call. Should its file not be
where the package keeps it (another layout, another release), the package is imported as usual.

Ensures: ``crc32c(data, value=0)`` is the ``crc32c`` package's function (same results, same
accepted buffers); this module never fails where ``import crc32c`` would succeed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["crc32c"]


def _load() -> Callable[..., int]:
    import importlib.machinery
    import importlib.util
    import os

    try:
        spec = importlib.util.find_spec("crc32c")  # finds the package, does not run it
        for where in (spec.submodule_search_locations or []) if spec is not None else []:
            for suffix in importlib.machinery.EXTENSION_SUFFIXES:
                path = os.path.join(where, "_crc32c" + suffix)
                if os.path.isfile(path):
                    loader = importlib.machinery.ExtensionFileLoader("crc32c._crc32c", path)
                    ext = importlib.util.spec_from_file_location("crc32c._crc32c", path, loader=loader)
                    if ext is None:
                        continue
                    module = importlib.util.module_from_spec(ext)
                    loader.exec_module(module)
                    fn: Any = module.crc32c
                    return fn  # type: ignore[no-any-return]
    except (ImportError, OSError, AttributeError):
        pass
    from crc32c import crc32c as fn_pkg

    return fn_pkg


crc32c: Callable[..., int] = _load()
