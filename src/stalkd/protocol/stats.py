"""YAML bodies of ``stats``, ``stats-job``, ``stats-tube`` and ``list-*``: key order and quoting.

Ensures: the bytes are beanstalkd 1.13's ``STATS_FMT`` / ``STATS_JOB_FMT`` / ``STATS_TUBE_FMT``
and ``do_list_tubes`` output exactly: ``---\\n``, one ``key: value\\n`` per key in the fixed
order below, string values wrapped in double quotes where 1.13 quotes them (and nowhere else),
no escaping (1.13 does none; tube names cannot contain a quote). A missing or unknown key is a
``ValueError`` naming it, so a layer that forgets a key fails loudly instead of sending YAML
that some client rejects (greenstalk compares whole dicts).

Example:
    >>> encode_yaml_list(("default", "w"))
    b'---\\n- default\\n- w\\n'
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Literal

from stalkd.protocol.grammar import REPORTED_COUNTERS

__all__ = [
    "STATS_KEYS", "STATS_JOB_KEYS", "STATS_TUBE_KEYS", "QUOTED", "KEYS",
    "encode_yaml_dict", "encode_yaml_list", "format_value",
]  # fmt: skip

if TYPE_CHECKING:  # (at run time no Literal is made: see grammar.ArgKind)
    Kind = Literal["stats", "stats-job", "stats-tube"]

STATS_JOB_KEYS: tuple[str, ...] = (
    "id", "tube", "state", "pri", "age", "delay", "ttr", "time-left", "file", "reserves",
    "timeouts", "releases", "buries", "kicks",
)  # fmt: skip

STATS_TUBE_KEYS: tuple[str, ...] = (
    "name", "current-jobs-urgent", "current-jobs-ready", "current-jobs-reserved",
    "current-jobs-delayed", "current-jobs-buried", "total-jobs", "current-using",
    "current-watching", "current-waiting", "cmd-delete", "cmd-pause-tube", "pause",
    "pause-time-left",
)  # fmt: skip

STATS_KEYS: tuple[str, ...] = (
    "current-jobs-urgent", "current-jobs-ready", "current-jobs-reserved",
    "current-jobs-delayed", "current-jobs-buried",
    *REPORTED_COUNTERS,
    "job-timeouts", "total-jobs", "max-job-size", "current-tubes", "current-connections",
    "current-producers", "current-workers", "current-waiting", "total-connections",
    "pid", "version", "rusage-utime", "rusage-stime", "uptime",
    "binlog-oldest-index", "binlog-current-index", "binlog-records-migrated",
    "binlog-records-written", "binlog-max-size",
    "draining", "id", "hostname", "os", "platform",
    # stalkd's: replication (docs/standby.md). Clients ignore keys they do not know.
    "role", "epoch",
)  # fmt: skip
OPTIONAL_KEYS: dict[str, tuple[str, ...]] = {
    "stats": ("fenced-by-epoch", "standbys", "standby-lag", "standby-lag-seconds", "primary-lag",
              "primary-lag-seconds", "in-sync", "cluster-node", "cluster-leader", "cluster-epoch",
              "lease-left-ms", "current-results", "result-bytes", "max-results",
              "max-result-bytes", "max-result-ttl", "max-memory", "current-memory",
              "current-memory-paused", "total-memory-closed"),
}
"""Keys written after the others when present: the epoch that fenced a former primary; a
primary's standbys (count, largest lag in records and in seconds) while any follow it or
``--sync-standbys`` is set; a standby's lag behind its primary and whether it is in sync;
under ``--ha``, this node's name, the leader it sees, that leader's epoch, and the ms before
this node must stop acknowledging as primary (-1: it does not hold the lease); stalkd's
results kept (all owners) and the limits per owner (``engine/results.py``); the memory budget
(``--max-memory``), what connections hold now, how many it stopped reading and how many it
closed for memory."""

KEYS: dict[str, tuple[str, ...]] = {
    "stats": STATS_KEYS,
    "stats-job": STATS_JOB_KEYS,
    "stats-tube": STATS_TUBE_KEYS,
}
"""Key order per ``YamlDict.kind``."""

QUOTED: dict[str, frozenset[str]] = {
    "stats": frozenset({"version", "hostname", "os", "platform", "cluster-node", "cluster-leader"}),
    "stats-job": frozenset({"tube"}),
    "stats-tube": frozenset({"name"}),
}
"""Keys whose string values 1.13 wraps in double quotes (1.12 quoted none)."""


def format_value(value: int | float | bool | str, quoted: bool = False) -> str:
    """One YAML scalar as beanstalkd prints it.

    ``bool`` -> ``true``/``false``; ``float`` -> 6 decimals (``rusage-*``, ``%d.%06d``);
    ``int`` -> decimal; ``str`` -> as is, or in double quotes when ``quoted``.

    >>> format_value(True), format_value(0.5), format_value("1.13", quoted=True)
    ('true', '0.500000', '"1.13"')
    """
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, float):
        return f"{value:.6f}"
    if isinstance(value, str):
        return f'"{value}"' if quoted else value
    return str(value)


def encode_yaml_dict(kind: Kind, values: Mapping[str, int | float | bool | str]) -> bytes:
    """The YAML mapping for ``kind`` (without the ``OK`` line or the final ``\\r\\n``).

    >>> body = encode_yaml_dict("stats-job", {k: 0 for k in STATS_JOB_KEYS} | {"tube": "t"})
    >>> body.splitlines()[:3]
    [b'---', b'id: 0', b'tube: "t"']
    """
    try:
        order = KEYS[kind]
    except KeyError:
        raise ValueError(f"unknown YAML kind {kind!r}; expected one of {sorted(KEYS)}") from None
    optional = [k for k in OPTIONAL_KEYS.get(kind, ()) if k in values]
    if len(values) != len(order) + len(optional) or not all(k in values for k in order):
        missing = [k for k in order if k not in values]
        extra = [k for k in values if k not in order and k not in optional]
        raise ValueError(f"{kind} values do not match beanstalkd's keys: missing {missing}, unexpected {extra}")
    quoted = QUOTED[kind]
    lines = ["---\n"]
    for key in (*order, *optional):
        lines.append(f"{key}: {format_value(values[key], key in quoted)}\n")
    return "".join(lines).encode("utf-8")


def encode_yaml_list(items: Iterable[str]) -> bytes:
    """A YAML list of tube names, unquoted, in the given order.

    >>> encode_yaml_list([])
    b'---\\n'
    """
    names = list(items)
    # one C join, not a Python step per name: 100k names took ~12 ms of CPU, the join ~2 ms
    return ("---\n- " + "\n- ".join(names) + "\n" if names else "---\n").encode("utf-8")
