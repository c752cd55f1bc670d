"""Reply values -> wire bytes, including the exact 1.13 YAML of stats, stats-job, stats-tube."""

from __future__ import annotations

import pytest

from stalkd.protocol import encode_reply, encode_reply_parts
from stalkd.protocol.commands import Close, JobReply, Reply, YamlDict, YamlList
from stalkd.protocol.stats import STATS_JOB_KEYS, STATS_KEYS, STATS_TUBE_KEYS

SIMPLE = [
    (Reply("INSERTED", (7,)), b"INSERTED 7\r\n"),
    (Reply("BURIED", (3,)), b"BURIED 3\r\n"),
    (Reply("BURIED"), b"BURIED\r\n"),
    (Reply("USING", ("a-b",)), b"USING a-b\r\n"),
    (Reply("WATCHING", (2,)), b"WATCHING 2\r\n"),
    (Reply("KICKED", (0,)), b"KICKED 0\r\n"),
    (Reply("KICKED"), b"KICKED\r\n"),
    (Reply("DELETED"), b"DELETED\r\n"),
    (Reply("NOT_FOUND"), b"NOT_FOUND\r\n"),
    (Reply("TIMED_OUT"), b"TIMED_OUT\r\n"),
    (Reply("DEADLINE_SOON"), b"DEADLINE_SOON\r\n"),
    (Reply("PAUSED"), b"PAUSED\r\n"),
    (Reply("SOMETHING_NEW"), b"SOMETHING_NEW\r\n"),
    (Reply("X", (1, "a", 2)), b"X 1 a 2\r\n"),
    (JobReply("RESERVED", 18446744073709551615, b"a\r\nb"), b"RESERVED 18446744073709551615 4\r\na\r\nb\r\n"),
    (JobReply("FOUND", 1, b""), b"FOUND 1 0\r\n\r\n"),
    (YamlList(("default", "w", "u")), b"OK 22\r\n---\n- default\n- w\n- u\n\r\n"),
    (YamlList(()), b"OK 4\r\n---\n\r\n"),
    (Close(), b""),
]


@pytest.mark.parametrize(("reply", "wire"), SIMPLE, ids=[repr(r) for r, _ in SIMPLE])
def test_encode(reply: object, wire: bytes) -> None:
    assert encode_reply(reply) == wire  # type: ignore[arg-type]
    assert b"".join(encode_reply_parts(reply)) == wire  # type: ignore[arg-type]


def test_job_body_is_not_copied_by_parts() -> None:
    body = b"x" * 100_000
    parts = encode_reply_parts(JobReply("RESERVED", 1, body))
    assert parts[1] is body


def _job_values(**over: object) -> dict[str, object]:
    values: dict[str, object] = {
        "id": 1, "tube": "default", "state": "reserved", "pri": 0, "age": 3, "delay": 0,
        "ttr": 10, "time-left": 9, "file": 0, "reserves": 1, "timeouts": 0, "releases": 0,
        "buries": 0, "kicks": 0,
    }  # fmt: skip
    values.update(over)
    return values


def test_stats_job_exact_bytes() -> None:
    yaml = (
        b'---\nid: 1\ntube: "default"\nstate: reserved\npri: 0\nage: 3\ndelay: 0\nttr: 10\n'
        b"time-left: 9\nfile: 0\nreserves: 1\ntimeouts: 0\nreleases: 0\nburies: 0\nkicks: 0\n"
    )
    assert encode_reply(YamlDict("stats-job", _job_values())) == b"OK %d\r\n%s\r\n" % (len(yaml), yaml)  # type: ignore[arg-type]


def test_key_order_does_not_depend_on_mapping_order() -> None:
    values = _job_values()
    reversed_values = dict(reversed(list(values.items())))
    assert encode_reply(YamlDict("stats-job", reversed_values)) == encode_reply(YamlDict("stats-job", values))  # type: ignore[arg-type]


def test_stats_tube_exact_bytes() -> None:
    values = dict.fromkeys(STATS_TUBE_KEYS, 0) | {"name": "t", "pause-time-left": -1, "total-jobs": 5}
    body = encode_reply(YamlDict("stats-tube", values)).split(b"\r\n", 1)[1]
    assert body.startswith(b'---\nname: "t"\ncurrent-jobs-urgent: 0\n')
    assert b"\ntotal-jobs: 5\n" in body and body.endswith(b"pause: 0\npause-time-left: -1\n\r\n")
    assert body.count(b"\n") == 1 + len(STATS_TUBE_KEYS) + 1


def test_stats_quoting_and_formats() -> None:
    values: dict[str, object] = dict.fromkeys(STATS_KEYS, 0)
    values |= {"version": "1.13", "rusage-utime": 0.001234, "rusage-stime": 2.5, "draining": False,
               "id": "0123456789abcdef", "hostname": "vm", "os": "#1 SMP", "platform": "x86_64"}  # fmt: skip
    wire = encode_reply(YamlDict("stats", values))  # type: ignore[arg-type]
    head, body = wire.split(b"\r\n", 1)
    assert head == b"OK %d" % (len(body) - 2)
    lines = body[:-2].decode().split("\n")
    assert lines[0] == "---" and lines[-1] == ""
    assert [ln.split(":")[0] for ln in lines[1:-1]] == list(STATS_KEYS)
    for want in ('version: "1.13"', "rusage-utime: 0.001234", "rusage-stime: 2.500000",
                 "draining: false", "id: 0123456789abcdef", 'hostname: "vm"', 'os: "#1 SMP"',
                 'platform: "x86_64"'):  # fmt: skip
        assert want in lines


def test_missing_or_extra_keys_are_named() -> None:
    values = _job_values()
    del values["kicks"]
    with pytest.raises(ValueError, match=r"missing \['kicks'\]"):
        encode_reply(YamlDict("stats-job", values))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"unexpected \['extra'\]"):
        encode_reply(YamlDict("stats-job", _job_values(extra=1)))  # type: ignore[arg-type]


def test_all_key_lists_are_complete() -> None:
    assert len(STATS_JOB_KEYS) == 14 and len(STATS_TUBE_KEYS) == 14
    assert len(STATS_KEYS) == len(set(STATS_KEYS)) == 51 + 2  # beanstalkd's + role, epoch


def test_not_a_reply() -> None:
    with pytest.raises(TypeError, match="not a reply"):
        encode_reply_parts("INSERTED")  # type: ignore[arg-type]
