"""The streaming sink's *batch marker* frame, written once: a payload starting with
:data:`MARKER_MAGIC`, then JSON ``{"batch": id, "rows": n}``. ``logsink`` writes one before each
streamed batch's rows; readers (``columnar``) hide them unless asked.
"""

from __future__ import annotations

import json

__all__ = ["MARKER_MAGIC", "is_marker", "marker", "parse_marker"]

MARKER_MAGIC = b"\x00stalkd-spark-batch\x00"


def is_marker(payload: bytes | memoryview) -> bool:
    """True for a streaming sink's batch marker frame."""
    return bytes(payload[: len(MARKER_MAGIC)]) == MARKER_MAGIC


def marker(batch_id: int, rows: int) -> bytes:
    """The marker frame payload for ``batch_id`` of ``rows`` rows.

    >>> parse_marker(marker(7, 3))
    (7, 3)
    """
    return MARKER_MAGIC + json.dumps({"batch": batch_id, "rows": rows}).encode()


def parse_marker(payload: bytes | memoryview) -> tuple[int, int]:
    meta = json.loads(bytes(payload[len(MARKER_MAGIC):]))
    return int(meta["batch"]), int(meta["rows"])
