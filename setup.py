"""Build the compiled hot path: the modules of ``stalkd.extensions.CYTHON_MODULES`` compiled
from their own ``.py`` files by Cython (pure-Python mode), and the parser's leaf accelerator
written in C (stalkd.protocol._speedups); everything else is in pyproject.toml.

Both are optional in the way aiohttp's and SQLAlchemy's are: without a compiler, the Python
headers or Cython the build warns and the ``.py`` files run as they are.
``STALKD_NO_EXTENSIONS=1`` at build time skips them; at run time it makes stalkd ignore built
ones (``stalkd.extensions``; ``stalkd serve --version`` says which run).
"""

from __future__ import annotations

import glob
import importlib.util
import os
import sys
from collections.abc import Callable

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class OptionalBuildExt(build_ext):
    """A failed compile is a warning, never a failed install."""

    def finalize_options(self) -> None:
        exts = self.distribution.ext_modules or []
        in_python = [e for e in exts if e.sources[0].endswith(".py")]
        self.distribution.ext_modules = [e for e in exts if e not in in_python] + _cythonized(in_python, self._skip)
        super().finalize_options()

    def run(self) -> None:
        try:
            super().run()
        except Exception as e:  # no compiler at all (DistutilsPlatformError and friends)
            self._skip(e)

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as e:  # a compiler or header error
            self._skip(e)

    @staticmethod
    def _skip(e: BaseException) -> None:
        print(f"WARNING: a compiled stalkd module was not built ({e}); its pure-Python "
              "module (the .py file itself, for those Cython compiles) is used", file=sys.stderr)


def _cython_modules() -> list[Extension]:
    """stalkd.extensions.CYTHON_MODULES, read from the source (stalkd is not importable here),
    each an extension of its own ``.py`` file."""
    spec = importlib.util.spec_from_file_location("_stalkd_extensions", "src/stalkd/extensions.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return [Extension(name, [mod.source_path(name)], extra_compile_args=["-O2"]) for name in mod.CYTHON_MODULES]


def _cythonized(exts: list[Extension], skip: Callable[[BaseException], None]) -> list[Extension]:
    """The C extensions Cython makes of ``exts``' ``.py`` files; none (with a warning) without
    Cython or when it fails."""
    if not exts:
        return []
    try:
        from Cython.Build import cythonize
    except ImportError as e:
        skip(e)
        return []
    try:
        # annotation_typing off: a compiled module accepts what its .py file accepts (an ``int``
        # annotation would refuse a numpy integer, a ``float`` one would coerce); C types are
        # asked for explicitly (cython.locals, cython.declare) where a profile says they pay
        directives = {"language_level": 3, "annotation_typing": False}
        # include_path: a module's .pxd cimports another's (app.pxd: Connection, Barriers) by
        # its package name, found under src/
        return list(cythonize(exts, quiet=True, build_dir="build/cython", include_path=["src"],
                              compiler_directives=directives))
    except Exception as e:  # a Cython error: the .py files still run
        skip(e)
        return []


_NO_EXT = os.environ.get("STALKD_NO_EXTENSIONS", "") not in ("", "0")
ext_modules = [] if _NO_EXT else [
    *_cython_modules(),
    Extension("stalkd.protocol._speedups", ["src/stalkd/protocol/_speedups.c"],
              depends=sorted(glob.glob("src/stalkd/protocol/_cext/*.h")),
              extra_compile_args=["-O2", "-Wall", "-Wno-unused-variable"]),
]

setup(ext_modules=ext_modules, cmdclass={"build_ext": OptionalBuildExt})
