"""A power-cut model for segment files, and the child process of test_sealcut.py.

:class:`SyncShadow` is a :class:`stalkd.log.fs.Faults` that copies a file's bytes to
``shadow/<inode>`` each time it is fsynced or fdatasynced through it: what a power cut would keep
of it. :func:`power_cut` puts every segment file of a log directory back to that copy (zeros if
it was never synced). Only segment data is modelled: names are kept as they are (the directory's
own durability is the power-loss campaign's, campaign/powerfs.py --strict).

As a script (``sealcut_child.py DIR SHADOW N [OP:MATCH:NTH]``): open the log in DIR under
``never`` through a SyncShadow, append N records (``seq:`` then padding, one per call), and
SIGKILL itself; with a crash point, SIGKILL itself just before that call instead (a kill -9
landing there). It prints the offset the log continued from, then each appended offset.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys

from stalkd.log import Log
from stalkd.log.fs import Faults

SEGMENT = 4096


class SyncShadow(Faults):
    """Keeps, per inode, the bytes a file had when it was last synced through it."""

    def __init__(self, shadow: str) -> None:
        super().__init__()
        self.shadow = shadow
        os.makedirs(shadow, exist_ok=True)

    def _keep(self, fd: int) -> None:
        size = os.fstat(fd).st_size
        data = os.pread(fd, size, 0)
        tmp = os.path.join(self.shadow, "tmp")
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, os.path.join(self.shadow, str(os.fstat(fd).st_ino)))

    def fdatasync(self, fd: int) -> None:
        super().fdatasync(fd)
        self._keep(fd)

    def fsync(self, fd: int) -> None:
        super().fsync(fd)
        if not os.path.isdir(f"/proc/self/fd/{fd}"):  # a directory's fsync keeps names: not modelled
            self._keep(fd)


def power_cut(log_dir: str, shadow: str) -> None:
    """Every segment file of ``log_dir`` as its last sync left it (zeros where never synced)."""
    for name in os.listdir(log_dir):
        if not (name.startswith("seg-") and name.endswith(".log")):
            continue
        path = os.path.join(log_dir, name)
        kept = os.path.join(shadow, str(os.stat(path).st_ino))
        if os.path.exists(kept):
            shutil.copyfile(kept, path)
        else:
            size = os.path.getsize(path)
            with open(path, "r+b") as f:
                f.write(bytes(size))


def main() -> None:
    path, shadow, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    fs = SyncShadow(shadow)
    out = sys.stdout
    log = Log.open(path, segment_size=SEGMENT, durability="never", fs=fs)
    out.write(f"open {log.next_offset}\n")
    out.flush()
    if len(sys.argv) > 4:
        op, match, nth = sys.argv[4].split(":")
        fs.crash_at(op, match, int(nth), then=lambda: os.kill(os.getpid(), signal.SIGKILL))
    for _ in range(n):
        seq = log.next_offset
        out.write(f"{log.append(b'%d:' % seq + b'.' * 100)}\n")
        out.flush()
    os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    main()
