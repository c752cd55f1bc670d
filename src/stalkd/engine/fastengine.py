"""Which ``Engine.apply`` runs: the compiled twin of its common commands, or the reference alone.

``stalkd.engine._engine`` (built from ``_engine.c`` with the other accelerators, ``make ext``)
runs put, reserve, reserve-with-timeout, delete, release, bury and touch in one C call when
the command meets the common case (no timer due, a job the caller holds, a reserve that finds
a job or waits, a job handed to the first connection waiting for it...), changing the engine's
objects as the Python handlers do; anything else goes to the
reference ``Engine.apply`` unchanged (tests/engine/test_engine_differential.py holds both to
the same outcomes and states). At depth 1 each command's Python frames are most of what the
engine costs, which is what this saves.

It is used only with the compiled ``IndexedHeap`` (it moves jobs in those heaps directly);
``STALKD_NO_EXTENSIONS=1``, a missing build, or classes whose slots no longer match what it
was built for (``configure`` refuses them) select the reference.

Example:
    >>> IMPLEMENTATION in ("c", "python")
    True
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any, Literal

from stalkd.engine import fastheap, jobtable, objects
from stalkd.engine.jobtable import JobTable
from stalkd.engine.model import JobState, Op, Record
from stalkd.engine.objects import ConnState, Job, Tube
from stalkd.engine.state import Outcome
from stalkd.extensions import compiled_module
from stalkd.protocol import commands as C
from stalkd.protocol.grammar import COUNTERS, SPECS_BY_NAME

__all__ = ["IMPLEMENTATION", "accelerated", "job_maker"]

IMPLEMENTATION: Literal["c", "python"] = "python"
"""Whether the last ``accelerated`` call installed the compiled path."""

_COUNTED = ("put", "reserve", "reserve-with-timeout", "delete", "release", "bury", "touch")


def _module() -> Any:
    return compiled_module("stalkd.engine._engine") if fastheap.IMPLEMENTATION == "c" else None


def accelerated(engine: type, reference: Callable[..., Outcome]) -> Callable[..., Outcome]:
    """``reference`` (``engine``'s ``apply``), or the compiled descriptor that stands in for it
    on ``engine`` (instances of subclasses always get the reference's behaviour)."""
    global IMPLEMENTATION
    mod = _module()
    if mod is None:
        IMPLEMENTATION = "python"
        return reference
    # the very key objects of the engine's counter dict (COUNTERS), so a look-up is one compare
    wanted = {SPECS_BY_NAME[name].counter for name in _COUNTED}
    counters = {c: c for c in COUNTERS if c in wanted}
    config = {
        "JobTable": JobTable, "JOB_CHUNK_SHIFT": jobtable.SHIFT,
        "Engine": engine, "IndexedHeap": fastheap.IndexedHeap, "Job": Job, "Tube": Tube,
        "ConnState": ConnState, "Record": Record, "Reply": C.Reply, "JobReply": C.JobReply,
        "Outcome": Outcome, "Put": C.Put, "Reserve": C.Reserve,
        "ReserveWithTimeout": C.ReserveWithTimeout, "Delete": C.Delete, "Release": C.Release,
        "Bury": C.Bury, "Touch": C.Touch,
        "READY": JobState.READY, "RESERVED": JobState.RESERVED, "DELAYED": JobState.DELAYED,
        "BURIED": JobState.BURIED, "OP_PUT": Op.PUT, "OP_DELETE": Op.DELETE,
        "OP_RESERVE": Op.RESERVE, "OP_RELEASE": Op.RELEASE, "OP_BURY": Op.BURY, "OP_TOUCH": Op.TOUCH,
        "DELETED": C.Reply("DELETED"), "RELEASED": C.Reply("RELEASED"),
        "OUT_OF_MEMORY": C.Reply("OUT_OF_MEMORY"), "BURIED_REPLY": C.Reply("BURIED"),
        "TOUCHED": C.Reply("TOUCHED"), "TIMED_OUT": C.Reply("TIMED_OUT"),
        "DEADLINE_SOON": C.Reply("DEADLINE_SOON"), **counters,
    }  # fmt: skip
    try:
        mod.configure(config)
    except TypeError as e:  # a class changed under a stale build
        warnings.warn(f"stalkd.engine._engine does not match engine's classes ({e}); "
                      "the Python engine is used: rebuild with `make ext`", RuntimeWarning, stacklevel=2)
        IMPLEMENTATION = "python"
        return reference
    IMPLEMENTATION = "c"
    return mod.FastMethod("apply", reference)  # type: ignore[no-any-return]


def job_maker() -> Callable[..., list[Job]]:
    """``objects.new_jobs``, or its compiled twin once ``accelerated`` installed the compiled path
    (it needs the Job slots ``configure`` found)."""
    mod = _module()
    made = getattr(mod, "new_jobs", None) if IMPLEMENTATION == "c" else None  # None: an older build
    return objects.new_jobs if made is None else made


def counts() -> tuple[int, int]:
    """(commands the compiled path ran, commands it handed to the reference) in this process;
    (0, 0) without it."""
    mod = _module()
    return (0, 0) if mod is None else mod.counts()
