"""The note a server leaves in its data directory of where it ships (``DATA/archive.url``).

``stalkd serve --archive URL`` writes it; every reader given the data directory (the Spark
source, ``stalkd analyze``, ``stalkd log inspect``) reads it to find the history retention
deleted locally once it was shipped. One line: the URL as given.

Ensures: the note is replaced atomically (a reader sees the old URL or the new one), mode 0600.

    >>> import tempfile
    >>> d = tempfile.mkdtemp(); write_note(d, "s3://bucket/q"); read_note(d)
    's3://bucket/q'
    >>> read_note(tempfile.mkdtemp()) is None
    True
"""

from __future__ import annotations

import os

__all__ = ["ARCHIVE_URL_FILE", "read_note", "write_note"]

ARCHIVE_URL_FILE = "archive.url"


def write_note(data_dir: str, url: str) -> None:
    """Record ``url`` as where ``data_dir``'s server ships."""
    note = os.path.join(data_dir, ARCHIVE_URL_FILE)
    with open(note + ".tmp", "w", encoding="utf-8", opener=lambda p, f: os.open(p, f, 0o600)) as fh:
        fh.write(url + "\n")
    os.replace(note + ".tmp", note)


def read_note(data_dir: str) -> str | None:
    """Where ``data_dir``'s server ships, or None if it does not."""
    try:
        with open(os.path.join(data_dir, ARCHIVE_URL_FILE), encoding="utf-8") as fh:
            return fh.read().strip() or None
    except FileNotFoundError:
        return None
