"""Build the optional C accelerators (stalkd.protocol._speedups, stalkd.server._conn,
stalkd.engine._heap, stalkd.engine._engine, the WAL's encoders stalkd.engine._records and
stalkd.log._frames, its write chain stalkd.engine._wal and stalkd.log._write, and the group
commit's gate stalkd.log._gate); everything else is in pyproject.toml.

The extensions are optional in the way aiohttp's are: without a compiler or the Python headers
the build warns and the pure-Python modules are used. ``STALKD_NO_EXTENSIONS=1`` at build time
skips them; at run time it makes stalkd ignore built ones (``stalkd.protocol.accel``,
``stalkd.server.fastconn``, ``stalkd.engine.fastheap``, ``stalkd.engine.fastengine``,
``stalkd.engine.fastrecords``, ``stalkd.engine.fastwal``, ``stalkd.log.fastframe``,
``stalkd.log.fastwrite``, ``stalkd.log.gate``).
"""

from __future__ import annotations

import glob
import os
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class OptionalBuildExt(build_ext):
    """A failed compile is a warning, never a failed install."""

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
        print(f"WARNING: a stalkd C accelerator was not built ({e}); its pure-Python "
              "module (parser, connection, heap, engine, WAL encoders and writes) is used", file=sys.stderr)


_NO_EXT = os.environ.get("STALKD_NO_EXTENSIONS", "") not in ("", "0")
ext_modules = [] if _NO_EXT else [
    Extension("stalkd.protocol._speedups", ["src/stalkd/protocol/_speedups.c"],
              depends=sorted(glob.glob("src/stalkd/protocol/_cext/*.h")),
              extra_compile_args=["-O2", "-Wall", "-Wno-unused-variable"]),
    Extension("stalkd.server._conn", ["src/stalkd/server/_conn.c"],
              depends=["src/stalkd/protocol/_cext/capi.h",
                       *sorted(glob.glob("src/stalkd/server/_cext/*.h"))],
              extra_compile_args=["-O2", "-Wall"]),
    Extension("stalkd.engine._heap", ["src/stalkd/engine/_heap.c"],
              depends=sorted(glob.glob("src/stalkd/engine/_cext/*.h")),
              extra_compile_args=["-O2", "-Wall"]),
    Extension("stalkd.engine._engine", ["src/stalkd/engine/_engine.c"],
              depends=[*sorted(glob.glob("src/stalkd/engine/_cext/*.h")), "src/stalkd/log/_cext/descriptor.c.h"],
              extra_compile_args=["-O2", "-Wall", "-Wno-unused-function"]),  # heapcore's key I/O
    Extension("stalkd.engine._records", ["src/stalkd/engine/_records.c"],
              extra_compile_args=["-O2", "-Wall"]),
    Extension("stalkd.engine._wal", ["src/stalkd/engine/_wal.c"],
              depends=["src/stalkd/log/_cext/descriptor.c.h", "src/stalkd/log/_cext/methodguard.c.h",
                       "src/stalkd/engine/_cext/walroom.c.h"],
              extra_compile_args=["-O2", "-Wall"]),
    Extension("stalkd.log._frames", ["src/stalkd/log/_frames.c"],
              depends=["src/stalkd/log/_cext/framecore.c.h"],
              extra_compile_args=["-O2", "-Wall"]),
    Extension("stalkd.log._write", ["src/stalkd/log/_write.c"],
              depends=sorted(glob.glob("src/stalkd/log/_cext/*.h")),
              extra_compile_args=["-O2", "-Wall"]),
    Extension("stalkd.log._gate", ["src/stalkd/log/_gate.c"],
              extra_compile_args=["-O2", "-Wall"]),
]

setup(ext_modules=ext_modules, cmdclass={"build_ext": OptionalBuildExt})
