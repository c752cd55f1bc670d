"""The YAML subset of stats bodies, as beanstalkd 1.12 (unquoted) and 1.13 (quoted) write it."""

from __future__ import annotations

import pytest

from stalkd.client._yaml import (
    STATS_JOB_STR_KEYS,
    STATS_STR_KEYS,
    STATS_TUBE_STR_KEYS,
    parse_dict,
    parse_list,
)

STATS_112 = (b"---\ncurrent-jobs-urgent: 0\ncmd-put: 12\nrusage-utime: 0.002460\n"
             b"version: 1.12\ndraining: false\nid: 0123456789012345\nhostname: box\n"
             b"os: #1 SMP PREEMPT_DYNAMIC Debian 6.1.1\nplatform: x86_64\n")
STATS_113 = (b'---\ncurrent-jobs-urgent: 0\ncmd-put: 12\nrusage-utime: 0.002460\n'
             b'version: "1.13"\ndraining: true\nid: 0123456789012345\nhostname: "box"\n'
             b'os: "#1 SMP PREEMPT_DYNAMIC Debian 6.1.1"\nplatform: "x86_64"\n')


@pytest.mark.parametrize("body", [STATS_112, STATS_113], ids=["1.12", "1.13"])
def test_stats_both_dialects(body: bytes) -> None:
    s = parse_dict(body, STATS_STR_KEYS)
    assert s["cmd-put"] == 12 and s["current-jobs-urgent"] == 0
    assert s["rusage-utime"] == pytest.approx(0.00246) and isinstance(s["rusage-utime"], float)
    assert s["version"] in ("1.12", "1.13")
    assert s["id"] == "0123456789012345"  # all digits, still a string
    assert s["os"] == "#1 SMP PREEMPT_DYNAMIC Debian 6.1.1"  # '#' is not a comment
    assert s["hostname"] == "box" and s["platform"] == "x86_64"
    assert isinstance(s["draining"], bool)
    assert list(s)[0] == "current-jobs-urgent"  # server order kept


def test_stats_job_and_tube_names_that_look_like_numbers() -> None:
    job = parse_dict(b'---\nid: 5\ntube: "007"\nstate: ready\npri: 1024\n', STATS_JOB_STR_KEYS)
    assert job == {"id": 5, "tube": "007", "state": "ready", "pri": 1024}
    tube = parse_dict(b"---\nname: 1.5\npause: 0\n", STATS_TUBE_STR_KEYS)
    assert tube == {"name": "1.5", "pause": 0}


def test_quoted_escapes_and_empty_values() -> None:
    d = parse_dict(b'---\nhostname: "a\\"b\\\\c"\nos: \nplatform: ""\n', STATS_STR_KEYS)
    assert d == {"hostname": 'a"b\\c', "os": "", "platform": ""}


def test_list_keeps_order_and_names() -> None:
    assert parse_list(b"---\n- default\n- 42\n- a.b\n") == ["default", "42", "a.b"]
    assert parse_list(b"---\n") == []


@pytest.mark.parametrize("body", [b"id: 1\n", b"---\nno colon here\n", b""])
def test_malformed_dict_names_the_line(body: bytes) -> None:
    with pytest.raises(ValueError, match="YAML"):
        parse_dict(body)


def test_malformed_list_names_the_line() -> None:
    with pytest.raises(ValueError, match="'key: 1'"):
        parse_list(b"---\nkey: 1\n")
