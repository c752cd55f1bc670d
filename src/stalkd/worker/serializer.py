"""Payload serializers and the job envelope that names the task a job belongs to.

A job body is ``#stalkd1 <header JSON>\\n<serialized payload>``. The header carries the task name
and, when used, the unique key, its marker job id and the keys the job depends on (and, for
groups and chains, its inputs' job ids, its result's TTL and the id it was first put under;
``stalkd.worker.canvas``). A body without
the ``#stalkd1 `` prefix (put by another client) is taken as a bare payload for the tube's only
task, so plain beanstalkd producers interoperate.

Ensures: ``decode(encode(h, p)) == (h, p)`` for every header ``h`` and payload bytes ``p``.

>>> body = encode_envelope(Header(task="send"), b'{"to": "a@b"}')
>>> decode_envelope(body, job_id=7) == (Header(task="send"), b'{"to": "a@b"}')
True
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import functools
import json
import uuid
from dataclasses import dataclass
from typing import Any, Protocol

from stalkd.worker.errors import EnvelopeError

__all__ = ["Serializer", "JsonSerializer", "Header", "encode_envelope", "decode_envelope", "PREFIX"]

PREFIX = b"#stalkd1 "


class Serializer(Protocol):
    """Turns a task's payload into bytes and back (``dumps``/``loads``)."""

    def dumps(self, payload: Any) -> bytes: ...

    def loads(self, data: bytes) -> Any: ...


def _to_json(value: Any) -> Any:
    """What JSON has no type for: datetimes and dates as ISO 8601 text, UUIDs and Decimals as
    text (exact), dataclass instances as objects of their fields."""
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, (uuid.UUID, decimal.Decimal)):
        return str(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    raise TypeError(f"cannot encode {type(value).__name__} {value!r:.60} as JSON (known: str, int, "
                    f"float, bool, None, list, tuple, dict with str keys, datetime, date, time, "
                    f"UUID, Decimal, dataclasses); convert it, or give the App another Serializer")


class JsonSerializer:
    """The default: compact UTF-8 JSON. datetime, date, time, UUID and Decimal values go as
    strings and dataclasses as objects (decoded as such: JSON does not say the type).

    >>> s = JsonSerializer()
    >>> s.loads(s.dumps({"a": [1, 2], "at": dt.date(2026, 1, 2), "n": decimal.Decimal("0.10")}))
    {'a': [1, 2], 'at': '2026-01-02', 'n': '0.10'}
    >>> s.dumps({1, 2})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    TypeError: cannot encode set {1, 2} as JSON (known: str, int, ...
    """

    # one encoder for every call: json.dumps with options builds a new one each time
    _encoder = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, default=_to_json)

    def dumps(self, payload: Any) -> bytes:
        return self._encoder.encode(payload).encode()

    def loads(self, data: bytes) -> Any:
        return json.loads(data)


@dataclass(frozen=True)
class Header:
    """What the worker needs besides the payload: the task, and the optional unique key,
    the id of the marker job holding that key, and the keys this job waits for."""

    task: str
    key: str | None = None
    marker: int | None = None
    deps: tuple[str, ...] = ()
    ttr: int | None = None     # set when the put's TTR differs from the task's (for heartbeats)
    # groups and chains (stalkd.worker.canvas): the jobs whose results are this job's payload
    # (one: its result; ``gather``: the list of them), how long to keep this job's own result,
    # and the id it was first put under (results are kept by that id across dependency waits)
    inputs: tuple[int, ...] = ()
    gather: bool = False
    result_ttl: float | None = None
    origin: int | None = None
    # a copy re-put while it waited: the id of the job it copies (which may still be there
    # after a crash; see ``copies``)
    prev: int | None = None
    # attempts a postponed job used before it was put again (``errors.Postpone``)
    tries: int = 0


@functools.lru_cache(maxsize=1024)
def _plain_prefix(task: str) -> bytes:
    """The envelope's first line for a header that names only its task (almost every put):
    made once per task name rather than once per job."""
    return PREFIX + json.dumps({"t": task}, separators=(",", ":")).encode() + b"\n"


def encode_envelope(header: Header, payload: bytes) -> bytes:
    if header == Header(header.task):  # every other field at its default (a new field too)
        return _plain_prefix(header.task) + payload
    fields: dict[str, Any] = {"t": header.task}
    if header.key is not None:
        fields["k"] = header.key
    if header.marker is not None:
        fields["m"] = header.marker
    if header.deps:
        fields["d"] = list(header.deps)
    if header.ttr is not None:
        fields["r"] = header.ttr
    if header.inputs:
        fields["i"] = list(header.inputs)
    if header.gather:
        fields["g"] = 1
    if header.result_ttl is not None:
        fields["s"] = header.result_ttl
    if header.origin is not None:
        fields["o"] = header.origin
    if header.prev is not None:
        fields["p"] = header.prev
    if header.tries:
        fields["n"] = header.tries
    return PREFIX + json.dumps(fields, separators=(",", ":")).encode() + b"\n" + payload


def decode_envelope(body: bytes, *, job_id: int) -> tuple[Header | None, bytes]:
    """(header, payload bytes); header is None for a bare body from a foreign producer."""
    if not body.startswith(PREFIX):
        return None, body
    end = body.find(b"\n", len(PREFIX))
    if end < 0:
        raise EnvelopeError(f"job {job_id}: envelope header has no newline")
    try:
        header = _parse_header(body[len(PREFIX):end])
    except (ValueError, KeyError, TypeError) as exc:
        raise EnvelopeError(f"job {job_id}: bad envelope header {body[:80]!r}: {exc}") from exc
    return header, body[end + 1:]


@functools.lru_cache(maxsize=1024)
def _parse_header(text: bytes) -> Header:
    """A header line's value; cached, since most jobs of a task carry the same line (a Header
    is immutable, so deliveries may share one)."""
    fields = json.loads(text)
    task = fields["t"]
    if not isinstance(task, str):
        raise TypeError("task name is not a string")
    ttr = fields.get("r")
    keep = fields.get("s")
    origin = fields.get("o")
    prev = fields.get("p")
    return Header(task=task, key=fields.get("k"), marker=fields.get("m"),
                  deps=tuple(fields.get("d", ())), ttr=None if ttr is None else int(ttr),
                  inputs=tuple(int(i) for i in fields.get("i", ())), gather=bool(fields.get("g")),
                  result_ttl=None if keep is None else float(keep),
                  origin=None if origin is None else int(origin),
                  prev=None if prev is None else int(prev), tries=int(fields.get("n", 0)))
