"""A FUSE file system that loses, at a power cut, everything not made durable (the LazyFS model).

``python -m campaign.powerfs BACKING MOUNTPOINT [--strict]`` serves ``BACKING/live`` at
``MOUNTPOINT``: every read and write passes through to ``BACKING/live`` at once, so the program
above sees an ordinary file system (its page cache, ``mmap`` and all). What a power cut would
keep is written beside it, in ``BACKING/durable``, and only when the program asks:

  * a file's data and size reach ``durable/files/<id>`` when the file is fsynced or
    fdatasynced (only the pages written since the last sync are copied);
  * a directory's entries reach ``durable/dirs/<id>.json`` when the directory is fsynced
    (``--strict``: a create, mkdir, rename, link or unlink is durable only then, the strictest
    reading of POSIX, the one ALICE and LazyFS test against). Without ``--strict`` an entry is
    durable as soon as it is made, as on ext4 with its journal, and only data waits for fsync.

A power cut is ``SIGKILL`` of this process (then ``fusermount3 -u -z``): nothing it held in
memory matters, because what survives is exactly ``durable/``. The next start finds no clean
marker and rebuilds ``live/`` from ``durable/``: the directory tree as its fsynced listings say,
each file with its fsynced content (a file whose entry is durable but whose data never was is
empty; an entry made durable in two directories by a rename whose source directory was not
fsynced is both names, hard links, as POSIX allows). A clean unmount is a clean shutdown: the
process syncs everything and leaves the marker, and the next start keeps ``live/`` as it is.

A file's identity is an id this process gives it (``live/``'s inode numbers change at every
rebuild); ids are written in the listings, so a hard link stays one file. :class:`PowerFS` is the
harness side: it starts the process by PID, waits for the mount, cuts and restarts it.

``POWERFS_TRACE=FILE`` in its environment (a PowerFS passes its own on) appends one line per call
that matters to FILE: opens, creates, writes (file id, offset, length), syncs (the pages copied),
directory syncs (the listing kept), renames, unlinks, and each start (a cut, or the first mount).
It is how the campaign's "segment lost while later ones survived" was traced to a footer that
no one synced (log/recovery.py).
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import functools
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import Any

__all__ = ["PowerFS", "fuse_available", "log_tail", "main", "why_no_mount"]

PAGE = 4096
CLEAN = "clean"  # BACKING/clean: the last run ended with an unmount, live/ is whole
ROOT_ID = 0


def _write_atomic(path: str, data: bytes) -> None:
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


class Durable:
    """``BACKING/durable``: what survives a cut, and the rebuild of ``live/`` from it."""

    def __init__(self, backing: str) -> None:
        self.live = os.path.join(backing, "live")
        self.root = os.path.join(backing, "durable")
        self.files = os.path.join(self.root, "files")
        self.dirs = os.path.join(self.root, "dirs")

    def exists(self) -> bool:
        return os.path.isfile(self._listing(ROOT_ID))

    def _listing(self, ident: int) -> str:
        return os.path.join(self.dirs, f"{ident}.json")

    def file(self, ident: int) -> str:
        return os.path.join(self.files, str(ident))

    def listing(self, ident: int) -> dict[str, list[int]]:
        """A directory's durable entries: name -> [id, is_dir, mode]."""
        try:
            with open(self._listing(ident), "rb") as f:
                out: dict[str, list[int]] = json.loads(f.read())
                return out
        except FileNotFoundError:
            return {}  # made, its entry durable, never fsynced itself: empty

    def set_listing(self, ident: int, entries: dict[str, list[int]]) -> None:
        _write_atomic(self._listing(ident), json.dumps(entries, sort_keys=True).encode())

    def reset(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
        os.makedirs(self.files)
        os.makedirs(self.dirs)

    def rebuild(self) -> tuple[dict[int, int], int]:
        """Lay ``live/`` anew from the durable state; the map live inode -> id, and the next id."""
        shutil.rmtree(self.live, ignore_errors=True)
        os.makedirs(self.live, mode=0o700)
        inodes: dict[int, int] = {os.lstat(self.live).st_ino: ROOT_ID}
        made: dict[int, str] = {}  # id -> the first live path made for it (hard links after)
        reached: set[int] = {ROOT_ID}
        top = ROOT_ID

        def lay(ident: int, path: str) -> None:
            nonlocal top
            for name, (child, is_dir, mode) in sorted(self.listing(ident).items()):
                top = max(top, child)
                target = os.path.join(path, name)
                if child in made:
                    if not is_dir:  # one file, two durable names
                        os.link(made[child], target)
                    continue  # a directory cannot have two: the first name keeps it
                reached.add(child)
                if is_dir:
                    os.mkdir(target, mode)
                    made[child] = target
                    inodes[os.lstat(target).st_ino] = child
                    lay(child, target)
                    continue
                if os.path.exists(self.file(child)):
                    shutil.copyfile(self.file(child), target)
                    os.chmod(target, mode)
                else:
                    os.close(os.open(target, os.O_CREAT | os.O_WRONLY, mode))
                made[child] = target
                inodes[os.lstat(target).st_ino] = child

        lay(ROOT_ID, self.live)
        for name in os.listdir(self.files):  # unreachable now, and never again
            if name.isdigit() and int(name) not in reached:
                os.unlink(os.path.join(self.files, name))
        for name in os.listdir(self.dirs):
            stem = name.split(".")[0]
            if stem.isdigit() and int(stem) not in reached:
                os.unlink(os.path.join(self.dirs, name))
        return inodes, top + 1

    def adopt(self) -> tuple[dict[int, int], int]:
        """Take ``live/`` as it is as durable (a first mount, or after a clean unmount)."""
        os.makedirs(self.live, mode=0o700, exist_ok=True)
        self.reset()
        inodes: dict[int, int] = {os.lstat(self.live).st_ino: ROOT_ID}
        top = ROOT_ID
        for path, dirnames, filenames in os.walk(self.live):
            for name in dirnames + filenames:
                st = os.lstat(os.path.join(path, name))
                if st.st_ino not in inodes:
                    top += 1
                    inodes[st.st_ino] = top
                    if stat.S_ISREG(st.st_mode):
                        shutil.copyfile(os.path.join(path, name), self.file(top))
            self.set_listing(inodes[os.lstat(path).st_ino], _entries(path, inodes))
        return inodes, top + 1


def _entries(path: str, inodes: dict[int, int]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for name in os.listdir(path):
        st = os.lstat(os.path.join(path, name))
        if st.st_ino in inodes and (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
            out[name] = [inodes[st.st_ino], int(stat.S_ISDIR(st.st_mode)), stat.S_IMODE(st.st_mode)]
    return out


def _rw(flags: int) -> int:
    """Open flags for our own descriptor: a write-only file is read too (a sync copies from
    it), and the kernel gives every write its offset (no O_APPEND)."""
    if flags & os.O_ACCMODE == os.O_WRONLY:
        flags = (flags & ~os.O_ACCMODE) | os.O_RDWR
    return flags & ~os.O_APPEND


class _Dirty:
    """What a file has changed since its last sync: the pages written, the smallest size it had."""

    __slots__ = ("low", "pages")

    def __init__(self, low: int) -> None:
        self.pages: set[int] = set()
        self.low = low


def _operations(backing: str, strict: bool, ignore_fsync: str = "") -> Any:
    import mfusepy as fuse  # type: ignore[import-untyped]

    class Ops(fuse.Operations):  # type: ignore[misc]
        """The passthrough: every call on ``live/``, with the durability bookkeeping beside it."""

        use_ns = True
        flag_nullpath_ok = True

        def __init__(self) -> None:
            self.store = Durable(backing)
            clean = os.path.join(backing, CLEAN)
            if os.path.exists(clean) or not self.store.exists():
                self.inodes, self.next_id = self.store.adopt()
            else:
                self.inodes, self.next_id = self.store.rebuild()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(clean)
            self.live = self.store.live
            self.dirty: dict[int, _Dirty] = {}
            self.fds: dict[int, int] = {}  # our descriptor -> file id
            self._mutex = threading.Lock()
            trace = os.environ.get("POWERFS_TRACE")  # a diagnosis aid: one line per call that matters
            self._trace = open(trace, "a", buffering=1) if trace else None  # noqa: SIM115
            self._t("start", self.next_id)

        def _t(self, *parts: object) -> None:
            if self._trace is not None:
                self._trace.write(" ".join(str(p) for p in parts) + "\n")

        # -- the bookkeeping --------------------------------------------------------------
        def _p(self, path: str) -> str:
            return self.live + path

        def _id(self, st: os.stat_result) -> int:
            ident = self.inodes.get(st.st_ino)
            if ident is None:
                ident = self.inodes[st.st_ino] = self.next_id
                self.next_id += 1
            return ident

        def _touched(self, ident: int, size: int) -> _Dirty:
            d = self.dirty.get(ident)
            if d is None:
                d = self.dirty[ident] = _Dirty(size)
            return d

        def _forget(self, path: str) -> None:
            """Before ``path``'s entry goes: a file losing its last name loses its id (the live
            inode number may be given to a new file; an open descriptor keeps the id)."""
            with contextlib.suppress(FileNotFoundError):
                st = os.lstat(path)
                if st.st_nlink <= 1 or stat.S_ISDIR(st.st_mode):
                    self.inodes.pop(st.st_ino, None)

        def _sync_file(self, fd: int) -> None:
            st = os.fstat(fd)
            ident = self.fds[fd] if fd in self.fds else self._id(st)
            d = self.dirty.pop(ident, None)
            self._t("sync", fd, ident, st.st_ino, st.st_size, None if d is None else d.low,
                    None if d is None else sorted(d.pages))
            target = self.store.file(ident)
            out = os.open(target, os.O_WRONLY | os.O_CREAT, 0o600)
            try:
                if d is not None:
                    os.ftruncate(out, min(d.low, os.fstat(out).st_size))
                os.ftruncate(out, st.st_size)
                for page in sorted(d.pages if d is not None else ()):
                    data = os.pread(fd, PAGE, page * PAGE)
                    if data:
                        os.pwrite(out, data, page * PAGE)
            finally:
                os.close(out)

        def _sync_dir(self, path: str) -> None:
            full = self._p(path)
            ident = self._id(os.lstat(full))
            for name in os.listdir(full):  # entries made below a mount we did not see: ids
                self._id(os.lstat(os.path.join(full, name)))
            self.store.set_listing(ident, _entries(full, self.inodes))
            self._t("syncdir", path, ident, sorted((n, e[0]) for n, e in _entries(full, self.inodes).items()))

        def _entry_changed(self, *paths: str) -> None:
            if not strict:
                for path in paths:
                    self._sync_dir(os.path.dirname(path) or "/")

        # -- reads ------------------------------------------------------------------------
        def getattr(self, path: str | None, fh: int | None = None) -> dict[str, Any]:
            st = os.fstat(fh) if fh is not None else os.lstat(self._p(path or "/"))
            keys = ("st_mode", "st_nlink", "st_uid", "st_gid", "st_size", "st_ino",
                    "st_atime_ns", "st_mtime_ns", "st_ctime_ns", "st_blocks", "st_blksize")
            out = {k.replace("_ns", ""): getattr(st, k) for k in keys}
            return out

        def readdir(self, path: str, fh: int) -> Iterator[tuple[str, dict[str, int], int]]:
            full = self._p(path)
            for name in (".", "..", *os.listdir(full)):
                st = os.lstat(os.path.join(full, name))  # an entry without its inode is hidden
                yield name, {"st_ino": st.st_ino, "st_mode": st.st_mode}, 0

        def opendir(self, path: str) -> int:
            return 0

        def releasedir(self, path: str | None, fh: int) -> int:
            return 0

        def readlink(self, path: str) -> str:
            return os.readlink(self._p(path))

        def statfs(self, path: str) -> dict[str, Any]:
            sv = os.statvfs(self._p(path))
            keys = ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree",
                    "f_files", "f_flag", "f_frsize", "f_namemax")
            return {k: getattr(sv, k) for k in keys}

        def access(self, path: str, amode: int) -> int:
            if not os.access(self._p(path), amode):
                raise fuse.FuseOSError(errno.EACCES)
            return 0

        def open(self, path: str, flags: int) -> int:
            fd = os.open(self._p(path), _rw(flags))
            with self._mutex:
                self.fds[fd] = self._id(os.fstat(fd))
                self._t("open", path, oct(flags), fd, self.fds[fd], os.fstat(fd).st_ino)
                if flags & os.O_TRUNC:
                    self._touched(self.fds[fd], 0).low = 0
            return fd

        def read(self, path: str | None, size: int, offset: int, fh: int) -> bytes:
            return os.pread(fh, size, offset)

        def flush(self, path: str | None, fh: int) -> int:
            return 0

        def release(self, path: str | None, fh: int) -> int:
            with self._mutex:
                self._t("release", path, fh, self.fds.get(fh))
                self.fds.pop(fh, None)
            os.close(fh)
            return 0

        # -- data -------------------------------------------------------------------------
        def write(self, path: str | None, data: bytes, offset: int, fh: int) -> int:
            with self._mutex:
                d = self._touched(self.fds[fh], os.fstat(fh).st_size)
                d.pages.update(range(offset // PAGE, (offset + len(data) + PAGE - 1) // PAGE))
                self._t("write", path, fh, self.fds[fh], offset, len(data))
                return os.pwrite(fh, data, offset)

        def truncate(self, path: str | None, length: int, fh: int | None = None) -> int:
            with self._mutex:
                if fh is not None:
                    st = os.fstat(fh)
                    os.ftruncate(fh, length)
                else:
                    st = os.lstat(self._p(path or "/"))
                    os.truncate(self._p(path or "/"), length)
                self._t("truncate", path, fh, self._id(st), st.st_size, length)
                self._touched(self._id(st), st.st_size).low = min(
                    self._touched(self._id(st), st.st_size).low, length)
            return 0

        def fallocate(self, path: str | None, mode: int, offset: int, size: int, fh: int) -> int:
            if mode:  # punching holes or keeping the size: stalkd does neither
                raise fuse.FuseOSError(errno.EOPNOTSUPP)
            with self._mutex:
                self._touched(self.fds[fh], os.fstat(fh).st_size)  # the size may grow
                self._t("fallocate", path, fh, self.fds[fh], offset, size)
                os.posix_fallocate(fh, offset, size)
            return 0

        def fsync(self, path: str | None, datasync: int, fh: int) -> int:
            if ignore_fsync and ignore_fsync in (path or ""):
                return 0  # the planted bug: a disk that acknowledges and keeps nothing
            with self._mutex:
                self._sync_file(fh)
            return 0

        def fsyncdir(self, path: str | None, datasync: int, fh: int) -> int:
            with self._mutex:
                self._sync_dir(path or "/")
            return 0

        # -- entries ----------------------------------------------------------------------
        def create(self, path: str, mode: int, flags: int) -> int:
            fd = os.open(self._p(path), _rw(flags) | os.O_CREAT, mode)
            with self._mutex:
                self.fds[fd] = self._id(os.fstat(fd))
                self._t("create", path, oct(flags), fd, self.fds[fd], os.fstat(fd).st_ino)
                self._entry_changed(path)
            return fd

        def mkdir(self, path: str, mode: int) -> int:
            os.mkdir(self._p(path), mode)
            with self._mutex:
                self._id(os.lstat(self._p(path)))
                self._entry_changed(path)
            return 0

        def unlink(self, path: str) -> int:
            with self._mutex:
                self._t("unlink", path, os.lstat(self._p(path)).st_ino)
                self._forget(self._p(path))
                os.unlink(self._p(path))
                self._entry_changed(path)
            return 0

        def rmdir(self, path: str) -> int:
            with self._mutex:
                self._forget(self._p(path))
                os.rmdir(self._p(path))
                self._entry_changed(path)
            return 0

        def rename(self, old: str, new: str, flags: int = 0) -> int:
            if flags:
                raise fuse.FuseOSError(errno.EINVAL)
            with self._mutex:
                if os.path.lexists(self._p(new)) and not os.path.samefile(self._p(old), self._p(new)):
                    self._forget(self._p(new))
                self._t("rename", old, new, os.lstat(self._p(old)).st_ino)
                os.rename(self._p(old), self._p(new))
                self._entry_changed(old, new)
            return 0

        def link(self, target: str, source: str) -> int:
            os.link(self._p(source), self._p(target))
            with self._mutex:
                self._entry_changed(target)
            return 0

        def chmod(self, path: str | None, mode: int) -> int:
            os.chmod(self._p(path or "/"), mode)
            return 0

        def chown(self, path: str | None, uid: int, gid: int) -> int:
            os.lchown(self._p(path or "/"), uid, gid)
            return 0

        def utimens(self, path: str | None, times: tuple[int, int] | None = None) -> int:
            if times is None:
                os.utime(self._p(path or "/"))
            else:
                os.utime(self._p(path or "/"), ns=times)
            return 0

        def destroy(self, path: str) -> None:
            """An unmount is a clean shutdown: everything written is on disk."""
            with self._mutex:
                self.store.adopt()
                _write_atomic(os.path.join(backing, CLEAN), b"")

    return Ops()


def serve(backing: str, mountpoint: str, strict: bool, ignore_fsync: str = "") -> None:
    import mfusepy as fuse

    ops = _operations(backing, strict, ignore_fsync)
    fuse.FUSE(ops, mountpoint, foreground=True, nothreads=True, hard_remove=True, use_ino=True,
              fsname="powerfs", default_permissions=True)


# -- the harness side -------------------------------------------------------------------------

def fuse_available() -> str | None:
    """Why a PowerFS cannot mount here (None when it can)."""
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse on this machine"
    if shutil.which("fusermount3") is None:
        return "fusermount3 is not installed (Debian's fuse3)"
    try:
        import mfusepy  # noqa: F401
    except (ImportError, OSError) as e:
        return f"mfusepy cannot load libfuse3: {e} (pip install -e '.[campaign]')"
    return None


@functools.cache
def why_no_mount() -> str | None:
    """Why no PowerFS can be mounted here (None when one can): probed once, by mounting one."""
    why = fuse_available()
    if why is not None:
        return why
    with tempfile.TemporaryDirectory() as d:
        fs = PowerFS(f"{d}/backing", f"{d}/mnt")
        try:
            fs.start()
        except RuntimeError as e:
            return f"a FUSE mount failed here: {e}: {log_tail(fs.log_path)}"
        finally:
            fs.kill()
    return None


def log_tail(path: str, size: int = 1500) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.path.getsize(path) - size))
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def _mounted(path: str) -> bool:
    real = os.path.realpath(path)
    with open("/proc/self/mounts") as f:
        return any(line.split()[1] == real for line in f)


class PowerFS:
    """A powerfs process serving ``backing`` at ``mountpoint``, started and stopped by PID.

    ``cut()`` is the power cut: SIGKILL, a lazy unmount, and a new process (which rebuilds
    ``live/`` from what was durable). ``stop()`` unmounts cleanly (everything kept).
    """

    def __init__(self, backing: str, mountpoint: str, *, strict: bool = True,
                 log_path: str | None = None, ignore_fsync: str = "") -> None:
        self.backing, self.mountpoint, self.strict = backing, mountpoint, strict
        self.ignore_fsync = ignore_fsync
        self.log_path = log_path or os.path.join(backing, "powerfs.log")
        self.proc: subprocess.Popen[bytes] | None = None
        self.cuts = 0

    def start(self, timeout: float = 20.0) -> None:
        os.makedirs(self.backing, exist_ok=True)
        os.makedirs(self.mountpoint, exist_ok=True)
        cmd = [sys.executable, "-m", "campaign.powerfs", self.backing, self.mountpoint]
        if self.strict:
            cmd.append("--strict")
        if self.ignore_fsync:
            cmd += ["--ignore-fsync", self.ignore_fsync]
        if os.environ.get("POWERFS_DEBUG"):
            cmd.append("--debug")
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=log, env=env)
        deadline = time.monotonic() + timeout
        while not _mounted(self.mountpoint):
            if self.proc.poll() is not None:
                raise RuntimeError(f"powerfs exited {self.proc.returncode}: see {self.log_path}")
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"powerfs did not mount in {timeout} s: see {self.log_path}")
            time.sleep(0.02)

    def kill(self) -> None:
        """SIGKILL the process (by its PID) and detach the mount: what was not durable is gone."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.proc = None
        if _mounted(self.mountpoint):
            subprocess.run(["fusermount3", "-u", "-z", self.mountpoint], check=False,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def cut(self) -> None:
        """A power cut and the power back on: only what was made durable is in the mount."""
        self.kill()
        self.cuts += 1
        self.start()

    def stop(self) -> None:
        """A clean shutdown: unmount (the process syncs everything first) and wait for it."""
        if self.proc is None:
            return
        if _mounted(self.mountpoint):
            subprocess.run(["fusermount3", "-u", self.mountpoint], check=False,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=20)  # then it is killed: a shutdown that hangs is a cut
        self.kill()

    def __enter__(self) -> PowerFS:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m campaign.powerfs",
        description="Serve BACKING/live at MOUNTPOINT, keeping in BACKING/durable only what was "
        "fsynced: SIGKILL of this process is a power cut (see the module docstring).")
    ap.add_argument("backing", help="directory holding live/ and durable/ (made if missing)")
    ap.add_argument("mountpoint", help="an empty directory to mount on")
    ap.add_argument("--strict", action="store_true",
                    help="directory entries durable only once their directory is fsynced")
    ap.add_argument("--ignore-fsync", metavar="TEXT", default="",
                    help="a planted bug: fsync of files whose path contains TEXT succeeds and "
                    "makes nothing durable (a disk that lies), to show a campaign catches it")
    ap.add_argument("--debug", action="store_true", help="log every failed call (with its traceback)")
    args = ap.parse_args(argv)
    if args.debug:
        import logging

        logging.basicConfig(level=logging.DEBUG, format="%(asctime)s %(message)s")
    os.makedirs(args.backing, exist_ok=True)
    serve(args.backing, args.mountpoint, args.strict, args.ignore_fsync)
    return 0


if __name__ == "__main__":
    sys.exit(main())
