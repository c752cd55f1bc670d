"""Text output for the client CLI: aligned tables and job bodies a terminal can show. Pure."""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence

from stalkd.client._yaml import Value

__all__ = ["table", "key_values", "show_value", "body_text", "body_json"]


def show_value(v: Value) -> str:
    """A stats value as text: ``true``/``false`` like the server, floats as sent.

    >>> show_value(True), show_value(0.25), show_value("x")
    ('true', '0.25', 'x')
    """
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _numeric(cell: str) -> bool:
    return cell.replace(".", "", 1).isdigit()


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Columns padded to their widest cell; numbers right-aligned, text left-aligned.

    >>> print(table(["tube", "ready"], [["default", "3"], ["emails", "120"]]))
    tube     ready
    default      3
    emails     120
    """
    cols = list(zip(*([list(header)] + [list(r) for r in rows]), strict=True))
    widths = [max(len(c) for c in col) for col in cols]
    right = [all(_numeric(c) for c in col[1:]) and len(col) > 1 for col in cols]
    lines = []
    for row in [header, *rows]:
        cells = [c.rjust(w) if r else c.ljust(w) for c, w, r in zip(row, widths, right, strict=True)]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def key_values(d: Mapping[str, Value]) -> str:
    """A dict as two aligned columns, in its own order.

    >>> print(key_values({"current-jobs-ready": 3, "version": "1.13"}))
    current-jobs-ready  3
    version             1.13
    """
    if not d:
        return ""
    width = max(len(k) for k in d)
    return "\n".join(f"{k:<{width}}  {show_value(v)}" for k, v in d.items())


def body_text(body: bytes) -> str:
    """The body as shown on a terminal: UTF-8 text as is, anything else as an escaped literal.

    >>> body_text(b"hi"), body_text(b"\\xff\\x00")
    ('hi', "b'\\\\xff\\\\x00'")
    """
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return repr(body)
    if all(ch.isprintable() or ch in "\n\t\r" for ch in text):
        return text
    return repr(body)


def body_json(body: bytes) -> dict[str, str]:
    """The body for JSON output: ``{"body": text}`` if UTF-8, else ``{"body_base64": ...}``.

    >>> body_json(b"hi"), body_json(b"\\xff")
    ({'body': 'hi'}, {'body_base64': '/w=='})
    """
    try:
        return {"body": body.decode("utf-8")}
    except UnicodeDecodeError:
        return {"body_base64": base64.b64encode(body).decode("ascii")}
