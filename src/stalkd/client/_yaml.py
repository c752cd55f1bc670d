"""The tiny YAML subset beanstalkd speaks (``stats*`` dicts and ``list-*`` lists), parsed purely.

beanstalkd writes flat documents: ``---`` then ``key: value`` lines or ``- item`` lines. 1.13
quotes string values (``tube: "default"``); 1.12 did not, and its ``os`` value contains ``#``,
which general YAML parsers take for a comment. So values are typed by key, not guessed alone:
keys that name strings stay strings (a tube named ``123`` is not an int), the rest become
int, float or bool when they look like one.

Ensures: parsing never raises on a well-formed beanstalkd body and raises ``ValueError``
naming the line on anything else.
"""

from __future__ import annotations

__all__ = ["Value", "parse_dict", "parse_list", "STATS_STR_KEYS", "STATS_JOB_STR_KEYS",
           "STATS_TUBE_STR_KEYS"]

Value = int | float | bool | str

# Keys whose values are strings even when they look like numbers.
STATS_STR_KEYS = frozenset({"version", "id", "hostname", "os", "platform", "role"})
STATS_JOB_STR_KEYS = frozenset({"tube", "state"})
STATS_TUBE_STR_KEYS = frozenset({"name"})


def _lines(body: bytes) -> list[str]:
    text = body.decode("utf-8", errors="replace")
    lines = text.split("\n")
    if not lines or lines[0].rstrip("\r") != "---":
        raise ValueError(f"YAML body does not start with '---': {text[:40]!r}")
    return [ln.rstrip("\r") for ln in lines[1:] if ln.strip()]


def _unquote(raw: str) -> str:
    if len(raw) >= 2 and raw[0] == raw[-1] == '"':
        inner = raw[1:-1]
        if "\\" not in inner:
            return inner
        out, i = [], 0
        while i < len(inner):
            ch = inner[i]
            if ch == "\\" and i + 1 < len(inner):
                i += 1
                ch = {"n": "\n", "t": "\t", "r": "\r"}.get(inner[i], inner[i])
            out.append(ch)
            i += 1
        return "".join(out)
    if len(raw) >= 2 and raw[0] == raw[-1] == "'":
        return raw[1:-1].replace("''", "'")
    return raw


def _scalar(raw: str) -> Value:
    if raw.isdigit():
        return int(raw)
    if raw in ("true", "false"):
        return raw == "true"
    head, dot, tail = raw.partition(".")
    if dot and head.isdigit() and tail.isdigit():
        return float(raw)
    return _unquote(raw)


def parse_dict(body: bytes, str_keys: frozenset[str] = frozenset()) -> dict[str, Value]:
    """A ``stats``/``stats-job``/``stats-tube`` body as a dict, key order kept.

    >>> parse_dict(b'---\\nid: 3\\ntube: "a b"\\nrusage-utime: 0.25\\ndraining: false\\n')
    {'id': 3, 'tube': 'a b', 'rusage-utime': 0.25, 'draining': False}
    >>> parse_dict(b"---\\nname: 123\\n", frozenset({"name"}))
    {'name': '123'}
    """
    out: dict[str, Value] = {}
    for line in _lines(body):
        key, sep, raw = line.partition(": ")
        if not sep:
            if line.endswith(":"):  # an empty value
                key, raw = line[:-1], ""
            else:
                raise ValueError(f"YAML line is not 'key: value': {line!r}")
        out[key] = _unquote(raw) if key in str_keys else _scalar(raw)
    return out


def parse_list(body: bytes) -> list[str]:
    """A ``list-tubes``/``list-tubes-watched`` body as a list of names, in server order.

    >>> parse_list(b"---\\n- default\\n- 42\\n")
    ['default', '42']
    """
    out: list[str] = []
    for line in _lines(body):
        if not line.startswith("- "):
            raise ValueError(f"YAML line is not a list item '- name': {line!r}")
        out.append(_unquote(line[2:]))
    return out
