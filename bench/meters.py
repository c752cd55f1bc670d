"""The meters of bench/counts.py: each counts one thing a running server does between ``begin``
and ``end`` (instructions under callgrind, system calls under strace, Python calls under
sys.setprofile), on a server started for it (counts.metered starts it); and ``perf_script``,
the system calls of running processes over one call, as ``perf script`` prints them (the
traces of ``standby_bench.py --trace`` and ``server_bench.py --split``)."""

from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol, TypeVar

T = TypeVar("T")


def perf_script(pids: Sequence[int], calls: Sequence[str], run: Callable[[], T],
                events: Sequence[str] = ()) -> tuple[T, str]:
    """``run()``'s result, and the lines ``perf script`` prints of processes ``pids`` over that
    call (``pid/tid time: event: fields``): ``perf record`` on the entry and exit tracepoints of
    system calls ``calls``, and on ``events`` (say ``sched:sched_switch``)."""
    with tempfile.TemporaryDirectory(prefix="perf-script-") as tmp:
        data = os.path.join(tmp, "perf.data")
        args = [x for c in calls for x in ("-e", f"syscalls:sys_enter_{c}", "-e", f"syscalls:sys_exit_{c}")]
        args += [x for e in events for x in ("-e", e)]
        rec = subprocess.Popen(["perf", "record", "-q", *args, "-p", ",".join(map(str, pids)), "-o", data],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        time.sleep(0.3)  # (perf attaches: no event of the run is lost to its start)
        try:
            got = run()
        finally:
            rec.send_signal(signal.SIGINT)
            rec.wait(60)
        text = subprocess.run(["perf", "script", "-i", data, "-F", "pid,tid,time,event,trace"],
                              capture_output=True, text=True, timeout=300).stdout  # fmt: skip
    return got, text


class Meter(Protocol):
    def begin(self) -> None: ...

    def end(self) -> Counter[str]: ...

    def close(self) -> None: ...


def past_first_tick(pid: int, timeout: float = 600.0) -> None:
    """Wait until the stalkd server ``pid`` has done its first trim tick's one-off work: about a
    second after it serves, memtrim loads ctypes and tunes glibc there (off the way to the first
    reply), millions of instructions that would otherwise fall into one of the two runs a count
    per job is the difference of. Seen in the process's mappings: ctypes' extension is loaded
    (a tree that tunes at start has it already)."""
    maps = Path(f"/proc/{pid}/maps")
    deadline = time.monotonic() + timeout
    while b"/_ctypes." not in maps.read_bytes():
        if time.monotonic() > deadline:
            raise TimeoutError(f"pid {pid} never loaded ctypes (its first trim tick)")
        time.sleep(0.02)


class Callgrind:
    """Instructions ("Ir") between begin and end: each is a callgrind_control dump, and a
    dump holds the counts since the one before."""

    timeout = 120.0  # seconds a dump may take (a slowed server under load takes longer)

    def __init__(self, pid: int, out: Path) -> None:
        self.pid, self.out, self.dumps = pid, out, 0

    def _dump(self) -> int:
        self.dumps += 1
        path = Path(f"{self.out}.{self.dumps}")
        done = subprocess.run(["callgrind_control", "-d", str(self.pid)], capture_output=True, timeout=self.timeout)
        if done.returncode != 0:
            raise RuntimeError(f"callgrind_control -d {self.pid}: {done.stderr.decode().strip()}")
        deadline = time.monotonic() + self.timeout
        while not (path.exists() and (m := re.search(rb"^totals: (\d+)", path.read_bytes(), re.M))):
            if time.monotonic() > deadline:
                raise TimeoutError(f"callgrind wrote no dump {path}")
            time.sleep(0.01)
        self._done(path)
        return int(m.group(1))

    def _done(self, dump: Path) -> None:
        """A dump was read: it is not needed any more."""
        dump.unlink()

    def begin(self) -> None:
        self._dump()

    def end(self) -> Counter[str]:
        return Counter({"instructions": self._dump()})

    def close(self) -> None:
        pass


class Strace:
    """System calls between begin and end: strace attaches to every thread at begin and
    detaches at end, when it writes its per-name summary."""

    def __init__(self, pid: int, out: Path) -> None:
        self.pid, self.out = pid, out
        self.proc: subprocess.Popen[bytes] | None = None

    def begin(self) -> None:
        # strace says "Process N attached" once it has seized every thread *and* asked each to
        # stop; from then on no system call escapes it. A thread's TracerPid is set by the seize
        # alone, and a strace preempted between the two (a loaded machine) let the server run
        # untraced meanwhile: a beanstalkd run once counted 0.8 reads and writes per job.
        self.proc = subprocess.Popen(["strace", "-f", "-c", "-o", str(self.out), "-p", str(self.pid)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        err = self.proc.stderr
        assert err is not None
        deadline = time.monotonic() + 30
        said = b""
        while b" attached" not in said:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([err], [], [], left)[0]:
                raise RuntimeError(f"strace did not attach to {self.pid} in 30 s")
            got = os.read(err.fileno(), 4096)
            if not got:
                raise RuntimeError(f"strace did not attach to {self.pid} (ptrace allowed?): "
                                   f"{said.decode(errors='replace').strip()}")
            said += got
        # (what it says later, "detached" at the end, must not fill the pipe and block it)
        threading.Thread(target=err.read, daemon=True).start()

    def end(self) -> Counter[str]:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGINT)
        self.proc.wait(60)
        self.proc = None
        calls: Counter[str] = Counter()
        # "% time  seconds  usecs/call  calls  [errors]  syscall" rows between dashed rules
        for row in self.out.read_text().splitlines():
            fields = row.split()
            if len(fields) >= 5 and fields[3].isdigit() and fields[-1] != "total":
                calls[fields[-1]] += int(fields[3])
        return calls

    def close(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()


# Run a Python server (a module with -m, or a script) counting its function calls by function;
# each line read on stdin is answered on the original stdout with the counts so far, as JSON:
# "calls" and "c calls" in all, "py FILE:FUNCTION" and "c MODULE.FUNCTION" one by one.
PYCALLS = """
import collections, json, os, runpy, sys, threading
py, c = collections.Counter(), collections.Counter()
def profile(frame, event, arg):
    if event == "call":
        py[frame.f_code] += 1
    elif event == "c_call":
        c[(getattr(arg, "__module__", None), getattr(arg, "__qualname__", type(arg).__name__))] += 1
def where(code):
    path = code.co_filename
    return path[path.rfind("/stalkd/") + 1:] if "/stalkd/" in path else os.path.basename(path)
out = os.fdopen(os.dup(1), "w")
os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
def answer():
    sys.setprofile(None)  # its own calls are not the server's
    for _ in sys.stdin:
        counts = collections.Counter({"calls": sum(py.values()), "c calls": sum(c.values())})
        for code, n in list(py.items()):
            counts[f"py {where(code)}:{code.co_qualname}"] += n
        for (module, name), n in list(c.items()):
            counts[f"c {module + '.' if module else ''}{name}"] += n
        out.write(json.dumps(counts) + "\\n")
        out.flush()
threading.Thread(target=answer, daemon=True).start()
what = sys.argv[1]
del sys.argv[0]
threading.setprofile(profile)
sys.setprofile(profile)
if what == "-m":
    del sys.argv[0]
    runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
else:
    runpy.run_path(what, run_name="__main__")
"""


class PyCalls:
    """Python function calls ("call") and calls of C functions from Python ("c_call"), in all
    and by function."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self.start: Counter[str] = Counter()

    def _read(self) -> Counter[str]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(b"\n")
        self.proc.stdin.flush()
        return Counter(json.loads(self.proc.stdout.readline()))

    def begin(self) -> None:
        self.start = self._read()

    def end(self) -> Counter[str]:
        now = self._read()
        now.subtract(self.start)
        return Counter({k: n for k, n in now.items() if n})

    def close(self) -> None:
        pass
