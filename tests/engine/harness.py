"""A tiny driver for table-driven engine tests: a script of steps against one Engine.

Steps:
  (conn, command, expected_reply)   apply; expected None means "now waiting"
  ("sleep", seconds)                advance the clock and tick
  ("wake", conn, expected_reply)    the previous steps woke ``conn`` with this reply
  ("close", conn)                   disconnect
"""

from __future__ import annotations

from typing import Any

from stalkd.engine import Engine, Outcome
from stalkd.protocol.commands import AnyReply, Command, JobReply, Reply, YamlDict

T0 = 1_700_000_000.0


class Harness:
    def __init__(self, max_job_size: int = 65535, now: float = T0, step_jobs: int | None = None) -> None:
        self.e = Engine(max_job_size=max_job_size) if step_jobs is None else Engine(
            max_job_size=max_job_size, step_jobs=step_jobs)
        self.now = now
        self.woken: dict[int, list[AnyReply]] = {}
        self.records: list[Any] = []

    def _absorb(self, out: Outcome) -> Outcome:
        self.records.extend(out.records)
        for cid, reply in out.wakeups:
            self.woken.setdefault(cid, []).append(reply)
        return out

    def ensure(self, cid: int) -> None:
        if cid not in self.e.conns:
            self.e.connect(cid, self.now)

    def do(self, cid: int, cmd: Command) -> AnyReply | None:
        self.ensure(cid)
        return self._absorb(self.e.apply(cid, cmd, self.now)).reply

    def sleep(self, seconds: float) -> Outcome:
        self.now += seconds
        return self._absorb(self.e.tick(self.now))

    def close(self, cid: int) -> Outcome:
        return self._absorb(self.e.disconnect(cid, self.now))

    def take_wakeups(self, cid: int) -> list[AnyReply]:
        return self.woken.pop(cid, [])

    def run(self, steps: list[tuple[Any, ...]]) -> None:
        for i, step in enumerate(steps):
            if step[0] == "sleep":
                self.sleep(step[1])
            elif step[0] == "close":
                self.close(step[1])
            elif step[0] == "wake":
                got = self.take_wakeups(step[1])
                assert got == [step[2]], f"step {i} {step}: woke with {got}"
            else:
                cid, cmd, want = step
                got = self.do(cid, cmd)
                if isinstance(want, str) and want.endswith("..."):
                    assert isinstance(got, Reply) and got.word == want[:-3], f"step {i} {step}: {got}"
                else:
                    assert got == want, f"step {i} {cmd}: got {got}, want {want}"


def R(word: str, *args: int | str) -> Reply:
    return Reply(word, tuple(args))


def RES(jid: int, body: bytes) -> JobReply:
    return JobReply("RESERVED", jid, body)


def FOUND(jid: int, body: bytes) -> JobReply:
    return JobReply("FOUND", jid, body)


def yaml_of(reply: AnyReply | None) -> dict[str, Any]:
    assert isinstance(reply, YamlDict), reply
    return dict(reply.values)
