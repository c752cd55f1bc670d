"""The file-system seam: how stalkd opens, writes, reserves and syncs files in a data directory.

Every system call the log and the engine's WAL make on their directories goes through a
:class:`FileSystem`, so the rules for data files hold in one place:

  * files are created 0600 and directories 0700 (job bodies are nobody else's business);
  * no file in a data directory is opened through a symbolic link (``O_NOFOLLOW``), and a
    directory holding one is refused: a ``LOCK`` pointing elsewhere would otherwise be truncated;
  * space is reserved with ``posix_fallocate`` (the one place blocks are taken), a directory is
    fsynced through ``O_DIRECTORY``, and writes loop until every byte is written.

Tests inject faults (a full disk, EIO from fsync, short writes, a crash at a chosen call) by
passing a :class:`Faults` instead of the default :data:`REAL`, never by patching ``os``.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # mypy reads the shim's signatures; Cython reads its own ``cython``
    from stalkd import cyshim as cython
else:
    try:
        import cython
    except ModuleNotFoundError:  # uncompiled, and Cython is not installed
        from stalkd import cyshim as cython

from .errors import LogError

__all__ = ["DIR_MODE", "FILE_MODE", "REAL", "CrashPoint", "Faults", "FileSystem", "SymlinkError", "create_whole"]

FILE_MODE = 0o600
DIR_MODE = 0o700
_NOFOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC
# The write chain's calls, looked up once rather than on the ``os`` module per call (callgrind:
# ~250 instructions a look-up). Faults are injected by a ``Faults``, never by patching ``os``.
_pwrite = os.pwrite
_fdatasync = os.fdatasync


if not cython.compiled:  # compiled, fs.pxd takes these from C

    def _c_pwrite(fd: int, data: bytes | bytearray | memoryview, pos: int) -> int:
        raise NotImplementedError("compiled only")

    def _c_fdatasync(fd: int) -> None:
        raise NotImplementedError("compiled only")


class SymlinkError(LogError):
    """A data directory holds a symbolic link where stalkd expects its own file or directory."""


def _symlink_error(path: str) -> SymlinkError:
    return SymlinkError(
        f"{path} is a symbolic link; stalkd never follows links inside its data directory: "
        "replace it with the real file or directory (or point the data directory itself elsewhere)"
    )


class FileSystem:
    """The real file system, with stalkd's rules for data files (see the module docstring).

    >>> import tempfile
    >>> d = tempfile.mkdtemp()
    >>> fd = REAL.open(d + "/f", os.O_RDWR, create=True)
    >>> REAL.pwrite_all(fd, b"abc", 0); os.close(fd)
    >>> oct(os.stat(d + "/f").st_mode & 0o777)
    '0o600'
    """

    def open(self, path: str, flags: int, *, create: bool = False, truncate: bool = False) -> int:
        """A descriptor for a data file (created 0600 if asked); never through a symbolic link."""
        if create:
            flags |= os.O_CREAT
        if truncate:
            flags |= os.O_TRUNC
        try:
            return os.open(path, flags | _NOFOLLOW, FILE_MODE)
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise _symlink_error(path) from None
            raise

    def open_read(self, path: str) -> int:
        """A read-only descriptor for a data file."""
        return self.open(path, os.O_RDONLY)

    def read_file(self, path: str) -> bytes:
        """A small data file's whole content."""
        fd = self.open_read(path)
        try:
            parts = []
            while chunk := os.read(fd, 1 << 16):
                parts.append(chunk)
            return b"".join(parts)
        finally:
            os.close(fd)

    def pwrite(self, fd: int, data: bytes | bytearray | memoryview, pos: int) -> int:
        """One ``pwrite`` (it may write fewer bytes than given)."""
        if cython.compiled:  # the system call from C, as os.pwrite makes it (~800 instructions less)
            return _c_pwrite(fd, data, pos)
        return _pwrite(fd, data, pos)

    def pwrite_all(self, fd: int, data: bytes | bytearray | memoryview, pos: int) -> None:
        """Write all of ``data`` at ``pos``, however many calls it takes."""
        n = len(data)
        if not n:
            return
        done = self.pwrite(fd, data, pos)
        if done == n:  # the common case: no view over the data, no slicing
            return
        view = memoryview(data)[done:]
        pos += done
        while view:
            n = self.pwrite(fd, view, pos)
            view = view[n:]
            pos += n

    def write(self, fd: int, data: bytes | memoryview) -> int:
        """One ``write`` at the file position (it may write fewer bytes than given)."""
        return os.write(fd, data)

    def write_all(self, fd: int, data: bytes | memoryview) -> None:
        """Write all of ``data`` at the file position."""
        view = memoryview(data)
        while view:
            view = view[self.write(fd, view) :]

    def fdatasync(self, fd: int) -> None:
        if cython.compiled:  # the system call from C, as os.fdatasync makes it (~600 instructions less)
            _c_fdatasync(fd)
        else:
            _fdatasync(fd)

    def fsync(self, fd: int) -> None:
        os.fsync(fd)

    def allocate(self, fd: int, offset: int, size: int) -> None:
        """Reserve blocks for ``offset .. offset + size`` (ENOSPC/EDQUOT when the disk is full)."""
        os.posix_fallocate(fd, offset, size)

    def fsync_dir(self, path: str) -> None:
        """Make a directory's entries (new, renamed or removed files) durable."""
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            self.fsync(fd)
        finally:
            os.close(fd)

    def makedirs(self, path: str) -> None:
        """Create ``path`` 0700 (missing parents too); an existing directory is kept as it is.

        Each directory made has its entry made durable (its parent fsynced): a data directory
        made by the first start would otherwise vanish at a power cut, with every job its files
        made durable since, where a file system keeps new entries only once their directory is
        fsynced (strict POSIX; the power-loss campaign's file system, campaign/powerfs.py)."""
        made = []
        d = os.path.abspath(path)
        while not os.path.isdir(d):
            made.append(d)
            d = os.path.dirname(d)
        for d in reversed(made):  # each one 0700: os.makedirs gives the mode to the last only
            try:
                os.mkdir(d, DIR_MODE)
            except FileExistsError:
                if not os.path.isdir(d):
                    raise
            self.fsync_dir(os.path.dirname(d))

    def check_no_symlinks(self, directory: str, names: Iterable[str] | None = None) -> None:
        """SymlinkError if an entry of ``directory`` (only ``names``, if given) is a symbolic link."""
        try:
            entries = os.scandir(directory)
        except FileNotFoundError:
            return
        with entries:
            for entry in entries:
                if (names is None or entry.name in names) and entry.is_symlink():
                    raise _symlink_error(entry.path)

    def replace(self, src: str, dst: str) -> None:
        os.replace(src, dst)

    def unlink(self, path: str) -> None:
        os.unlink(path)


REAL = FileSystem()
"""The file system stalkd uses unless a test passes another."""


def create_whole(fs: FileSystem, path: str, fill: Callable[[int], None]) -> None:
    """Create ``path`` whole: ``fill(fd)`` writes (or reserves) it under a temporary name
    (``path.tmp``), renamed into place once done, so a crash or an error (it is re-raised, the
    temporary file removed) never leaves a half-made file under the final name."""
    tmp = path + ".tmp"
    fd = fs.open(tmp, os.O_RDWR, create=True, truncate=True)
    try:
        fill(fd)
        fs.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            fs.unlink(tmp)
        raise
    finally:
        os.close(fd)


class CrashPoint(Exception):
    """Raised by a :class:`Faults` crash point: the process "dies" before that call runs."""


class Faults(FileSystem):
    """A real file system whose chosen calls fail, for tests of the fault paths.

    ``fail(op, err)`` makes the next ``times`` calls of ``op`` (a method name: ``fdatasync``,
    ``allocate``, ``pwrite``, ``write``, ``fsync``, ``open``, ``replace``, ``unlink``...) on a
    path containing ``match`` raise ``OSError(err)``; ``short_writes(n)`` makes every write put
    at most ``n`` bytes; ``crash_at(op, match, nth)`` stops the program before the ``nth`` such
    call (``then`` runs first: a crash test's child SIGKILLs itself there).

    >>> import errno, tempfile
    >>> fs = Faults()
    >>> fs.fail("fdatasync", errno.EIO)
    >>> fd = fs.open(tempfile.mkdtemp() + "/f", os.O_RDWR, create=True)
    >>> fs.fdatasync(fd)
    Traceback (most recent call last):
    OSError: [Errno 5] Input/output error (injected)
    >>> fs.heal(); fs.fdatasync(fd); os.close(fd)
    """

    def __init__(self) -> None:
        self._rules: list[list[object]] = []  # [op, errno, match, times left or None]
        self._crashes: list[tuple[str, str, list[int], Callable[[], object] | None]] = []
        self.crashed: str | None = None  # the call a crash point stopped (op and path)
        self._paths: dict[int, str] = {}
        self._short = 0
        self.calls: dict[str, int] = {}  # calls per op, counted even when they fail
        self.failures: dict[str, int] = {}  # injected failures per op

    def fail(self, op: str, err: int, match: str = "", times: int | None = None) -> None:
        self._rules.append([op, err, match, times])

    def short_writes(self, max_bytes: int) -> None:
        self._short = max_bytes

    def crash_at(self, op: str, match: str = "", nth: int = 1,
                 then: Callable[[], object] | None = None) -> None:
        """Before the ``nth`` call of ``op`` on a path containing ``match`` (counted from now)
        runs: call ``then`` (which may kill the process), then raise :class:`CrashPoint`."""
        self._crashes.append((op, match, [nth], then))

    def heal(self) -> None:
        """Every call succeeds again (and writes are whole); crash points are disarmed."""
        self._rules.clear()
        self._crashes.clear()
        self._short = 0

    def _check(self, op: str, path: str) -> None:
        self.calls[op] = self.calls.get(op, 0) + 1
        for c_op, c_match, left, then in self._crashes:
            if c_op == op and c_match in path and left[0] > 0:
                left[0] -= 1
                if left[0] == 0:
                    self.crashed = f"{op} {path}"
                    if then is not None:
                        then()
                    raise CrashPoint(f"crash point: {op} {path}")
        for rule in self._rules:
            r_op, err, match, times = rule
            if r_op == op and str(match) in path and times != 0:
                if isinstance(times, int):
                    rule[3] = times - 1
                assert isinstance(err, int)
                self.failures[op] = self.failures.get(op, 0) + 1
                raise OSError(err, os.strerror(err) + " (injected)")

    def path_of(self, fd: int) -> str:
        """The path a descriptor opened through this file system was opened with ("" if unknown)."""
        return self._paths.get(fd, "")

    def _fd(self, op: str, fd: int) -> None:
        self._check(op, self._paths.get(fd, ""))

    def open(self, path: str, flags: int, *, create: bool = False, truncate: bool = False) -> int:
        self._check("open", path)
        fd = super().open(path, flags, create=create, truncate=truncate)
        self._paths[fd] = path
        return fd

    def pwrite(self, fd: int, data: bytes | bytearray | memoryview, pos: int) -> int:
        self._fd("pwrite", fd)
        if self._short and len(data) > self._short:
            data = memoryview(data)[: self._short]
        return super().pwrite(fd, data, pos)

    def write(self, fd: int, data: bytes | memoryview) -> int:
        self._fd("write", fd)
        if self._short and len(data) > self._short:
            data = memoryview(data)[: self._short]
        return super().write(fd, data)

    def fdatasync(self, fd: int) -> None:
        self._fd("fdatasync", fd)
        super().fdatasync(fd)

    def fsync(self, fd: int) -> None:
        self._fd("fsync", fd)
        super().fsync(fd)

    def allocate(self, fd: int, offset: int, size: int) -> None:
        self._fd("allocate", fd)
        super().allocate(fd, offset, size)

    def fsync_dir(self, path: str) -> None:
        self._check("fsync_dir", path)
        super().fsync_dir(path)

    def replace(self, src: str, dst: str) -> None:
        self._check("replace", src)
        super().replace(src, dst)

    def unlink(self, path: str) -> None:
        self._check("unlink", path)
        super().unlink(path)

