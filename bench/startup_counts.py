"""Start-up counted, not timed: instructions from exec to the first reply (callgrind), in memory
and with an empty data directory, for this tree and (``--peer-src DIR``) another, next to the
floors (``python -c pass``, ``import asyncio``, ``import asyncio, uvloop``).

A shared 2-core machine swings wall-clock start-up times 2-3x (server_bench.py's start-up cells
print the floors next to them: when ``import asyncio`` takes far more than ~50 ms, so does
everything else); an instruction count does not swing. Each start runs in one process:
``stalkd.node.cli.main`` serves on a free port while a thread of the same process connects, sends
``list-tube-used``, reads the reply and ends the process (``os._exit``, which callgrind counts up
to). The thread's few instructions are in every figure alike.

Run: ``.venv/bin/python bench/startup_counts.py [--peer-src /path/to/other/src] [--runs N]``
(valgrind needed; ~5 s per start). The peer runs under this interpreter with ``PYTHONPATH`` set
to its tree, so its compiled modules must be built in that tree (``make .venv/.dev bytecode``
there) and its bytecode current (else every start compiles what is stale, and pays for it).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

# One start, to the first reply: argv[1] is "memory" or a data directory.
_FIRST_REPLY = """
import os, socket, sys, threading, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
def client():
    while True:
        try:
            c = socket.create_connection((b"127.0.0.1", port))  # (bytes: a str host imports the idna codec, ~4.3 M)
            break
        except OSError:
            time.sleep(0.05)
    c.sendall(b"list-tube-used\\r\\n")
    reply = b""
    while not reply.endswith(b"\\r\\n"):
        reply += c.recv(100)
    os._exit(0 if reply == b"USING default\\r\\n" else 1)
threading.Thread(target=client, daemon=True).start()
from stalkd.node.cli import main
main(["-l", "127.0.0.1", "-p", str(port), "--log-level", "error",
      *([] if sys.argv[1] == "memory" else ["-b", sys.argv[1]])])
"""
_COLLECTED = re.compile(r"Collected : (\d+)")


def count(code: str, *args: str, src: str | None = None) -> int:
    """Instructions ``python -c code args`` executes, all threads (callgrind)."""
    env = {**os.environ, **({"PYTHONPATH": src} if src else {})}
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={tmp}/cg.out", sys.executable, "-c", code, *args],
            env=env, capture_output=True, text=True, check=True)  # fmt: skip
    m = _COLLECTED.search(out.stderr)
    if m is None:
        raise RuntimeError(f"no callgrind total in: {out.stderr[-500:]}")
    return int(m.group(1))


def first_reply(empty_dir: bool, src: str | None) -> int:
    if not empty_dir:
        return count(_FIRST_REPLY, "memory", src=src)
    data = tempfile.mkdtemp(prefix="startup-counts-", dir=os.environ.get("BENCH_DATA_DIR", "/var/tmp"))
    try:
        return count(_FIRST_REPLY, data, src=src)
    finally:
        shutil.rmtree(data, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--peer-src", metavar="DIR", help="also count the stalkd of this src/ directory")
    ap.add_argument("--runs", type=int, default=1, help="starts per cell (median; counts barely vary)")
    opts = ap.parse_args()
    if shutil.which("valgrind") is None:
        print("valgrind is not installed", file=sys.stderr)
        return 1
    trees: list[tuple[str, str | None]] = [("stalkd", None)]
    if opts.peer_src:
        trees.append(("peer", os.path.abspath(opts.peer_src)))
    # Each floor ends as a measured start does, by os._exit: an interpreter's normal exit (its
    # modules finalized, ~28 M instructions after asyncio) is no part of a first reply.
    for label, code in (("python -c pass", "pass"), ("import asyncio", "import asyncio"),
                        ("import asyncio, uvloop", "import asyncio, uvloop")):  # fmt: skip
        print(f"floor {label:24}: {count(code + '; import os; os._exit(0)') / 1e6:8.1f} M instructions", flush=True)
    for empty_dir in (False, True):
        where = "empty dir" if empty_dir else "memory"
        got = {}
        for label, src in trees:
            got[label] = statistics.median(first_reply(empty_dir, src) for _ in range(opts.runs))
            print(f"exec -> first reply {where:9} {label:6}: {got[label] / 1e6:8.1f} M instructions", flush=True)
        if "peer" in got:
            delta = got["stalkd"] - got["peer"]
            print(f"exec -> first reply {where:9} stalkd - peer: {delta / 1e6:+8.1f} M ({100 * delta / got['peer']:+.1f} %)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
