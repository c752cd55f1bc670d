"""Build the compiled hot path: the modules of ``stalkd.extensions.CYTHON_MODULES`` compiled
from their own ``.py`` files by Cython (pure-Python mode), and the parser's leaf accelerator
written in C (stalkd.protocol._speedups); everything else is in pyproject.toml.

Both are optional in the way aiohttp's and SQLAlchemy's are: without a compiler, the Python
headers or Cython the build warns and the ``.py`` files run as they are; a module Cython or the
compiler refuses is left out alone (the others are built), and an earlier in-place build of it is
removed, so that its ``.py`` file is what runs.
``STALKD_NO_EXTENSIONS=1`` at build time skips them; at run time it makes stalkd ignore built
ones (``stalkd.extensions``; ``stalkd serve --version`` says which run).
"""

from __future__ import annotations

import glob
import importlib.util
import os
import sys
from importlib.machinery import EXTENSION_SUFFIXES

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class OptionalBuildExt(build_ext):
    """A failed compile is a warning, never a failed install; and the module that failed runs
    from its ``.py`` file, not from a compiled copy an earlier in-place build left beside it."""

    def finalize_options(self) -> None:
        exts = self.distribution.ext_modules or []
        in_python = [e for e in exts if e.sources[0].endswith(".py")]
        self.distribution.ext_modules = [e for e in exts if e not in in_python] + _cythonized(in_python)
        super().finalize_options()

    def run(self) -> None:
        try:
            super().run()
        except Exception as e:  # no compiler at all (DistutilsPlatformError and friends)
            _not_built([ext.name for ext in self.extensions], e)

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as e:  # a compiler or header error
            _not_built([ext.name], e)
            self._failed = [*getattr(self, "_failed", []), ext.name]

    def copy_extensions_to_source(self) -> None:
        # an editable install copies each built module into src/: not the ones that failed, or
        # the copy of one missing file would stop every other module's
        every, failed = self.extensions, getattr(self, "_failed", [])
        self.extensions = [ext for ext in every if ext.name not in failed]
        try:
            super().copy_extensions_to_source()
        finally:
            self.extensions = every


def _not_built(names: list[str], e: BaseException) -> None:
    """Warn that modules ``names`` run from their source, and remove the compiled copies of them
    an earlier editable (in-place) build left under src/: Python would import those first, and a
    change to a ``.py`` file would silently not run."""
    for stale in _in_place_builds(names):
        os.remove(stale)
    print(f"WARNING: not compiled: {', '.join(names)} ({e}); their pure-Python code runs instead",
          file=sys.stderr)


def _in_place_builds(names: list[str]) -> list[str]:
    """The compiled files of modules ``names`` beside their sources in src/, where an editable
    install puts them."""
    paths = [os.path.join("src", *n.split(".")) + suffix for n in names for suffix in EXTENSION_SUFFIXES]
    return [path for path in paths if os.path.isfile(path)]


def _cython_modules() -> list[Extension]:
    """stalkd.extensions.CYTHON_MODULES, read from the source (stalkd is not importable here),
    each an extension of its own ``.py`` file."""
    spec = importlib.util.spec_from_file_location("_stalkd_extensions", "src/stalkd/extensions.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return [Extension(name, [mod.source_path(name)], extra_compile_args=["-O2"]) for name in mod.CYTHON_MODULES]


def _cythonized(exts: list[Extension]) -> list[Extension]:
    """The C extensions Cython makes of ``exts``' ``.py`` files, one module at a time: a module
    Cython refuses is left out with a warning (its ``.py`` file runs), the others are still built;
    without Cython, none is."""
    if not exts:
        return []
    try:
        from Cython.Build import cythonize
    except ImportError as e:
        _not_built([ext.name for ext in exts], e)
        return []
    # annotation_typing off: a compiled module accepts what its .py file accepts (an ``int``
    # annotation would refuse a numpy integer, a ``float`` one would coerce); C types are
    # asked for explicitly (cython.locals, cython.declare) where a profile says they pay
    directives = {"language_level": 3, "annotation_typing": False}
    built = []
    for ext in exts:
        try:
            # include_path: a module's .pxd cimports another's (app.pxd: Connection, Barriers) by
            # its package name, found under src/
            built += cythonize([ext], quiet=True, build_dir="build/cython", include_path=["src"],
                               compiler_directives=directives)
        except Exception as e:  # a Cython error in this module: its .py file still runs
            _not_built([ext.name], e)
    return built


_NO_EXT = os.environ.get("STALKD_NO_EXTENSIONS", "") not in ("", "0")
ext_modules = [] if _NO_EXT else [
    *_cython_modules(),
    Extension("stalkd.protocol._speedups", ["src/stalkd/protocol/_speedups.c"],
              depends=sorted(glob.glob("src/stalkd/protocol/_cext/*.h")),
              extra_compile_args=["-O2", "-Wall", "-Wno-unused-variable"]),
]

setup(ext_modules=ext_modules, cmdclass={"build_ext": OptionalBuildExt})
