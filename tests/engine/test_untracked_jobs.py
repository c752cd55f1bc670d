"""Compiled, jobs are not tracked by the cycle collector (objects.Job is no_gc: no collection
walks the queue), and an engine let go with jobs in it still frees them all: ``EngineState``
cuts the references from each job to its tube and to the connection holding it, the only ones
that close a cycle through a job. Both builds run these; the first is about the compiled one."""

from __future__ import annotations

import gc
import sys

import pytest

from stalkd.engine import Engine
from stalkd.engine.objects import Job, JobState, Tube
from stalkd.extensions import compiled_modules
from stalkd.protocol.commands import Bury, JobReply, Put, Reserve, Use, Watch

from .harness import Harness


def test_compiled_jobs_are_not_tracked_by_the_cycle_collector() -> None:
    if not compiled_modules()["stalkd.engine.objects"]:
        pytest.skip("stalkd.engine.objects runs uncompiled: its jobs are ordinary tracked objects")
    job = Job(1, Tube("default", 1), 0, 0, 60, b"x", JobState.READY, 0)
    assert not gc.is_tracked(job)
    h = Harness()
    h.do(1, Put(0, 0, 60, b"y"))
    assert not any(gc.is_tracked(j) for j in h.e.state.jobs.values())


def test_compiled_commands_and_replies_are_not_tracked_either() -> None:
    # no_gc in commands.pxd was ignored by Cython, silently: this holds the one that works
    if not compiled_modules()["stalkd.protocol.commands"]:
        pytest.skip("stalkd.protocol.commands runs uncompiled: its values are ordinary tracked objects")
    assert not gc.is_tracked(Put(0, 0, 60, b"x"))
    assert not gc.is_tracked(Use("t"))
    assert not gc.is_tracked(JobReply("RESERVED", 1, b"x"))


def test_an_engine_let_go_frees_its_jobs_in_every_state() -> None:
    # One body object shared by every job, kept here: its reference count says how many jobs
    # still hold it once the engine is gone.
    body = bytes(bytearray(b"held by the jobs"))  # a fresh object, not a shared constant
    base = sys.getrefcount(body)
    h = Harness()
    h.do(1, Use("t"))
    for delay in (0, 0, 0, 30):  # three ready, one delayed
        h.do(1, Put(0, delay, 60, body))
    h.do(2, Watch("t"))
    assert isinstance(h.do(2, Reserve()), JobReply)  # reserved by connection 2
    h.do(3, Watch("t"))
    reply = h.do(3, Reserve())
    assert isinstance(reply, JobReply)
    h.do(3, Bury(reply.id, 0))  # and one buried
    held = sys.getrefcount(body) - base
    assert held >= 4, "the engine's jobs should hold the body itself (else this test sees nothing)"

    del h, reply
    gc.collect()
    assert sys.getrefcount(body) == base


def test_an_engine_whose_arguments_were_refused_is_let_go_quietly(monkeypatch: pytest.MonkeyPatch) -> None:
    # Its state was refused half-made (no job table yet): letting it go raises nothing unseen.
    unraised: list[object] = []
    monkeypatch.setattr(sys, "unraisablehook", unraised.append)
    with pytest.raises(ValueError, match="step_jobs"):
        Engine(step_jobs=0)
    gc.collect()
    assert unraised == []
