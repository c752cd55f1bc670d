"""A secret kept in a file (the admin endpoint's bearer token, the replication secret).

Ensures: the secret is the file's text without surrounding whitespace, at least 16 characters;
a file that group or others may read or write is refused (anyone who can read the secret can
act as its holder), and so is a missing or unreadable file, each with a message that names the
file and says what to do.
"""

from __future__ import annotations

import os
import stat

__all__ = ["read_secret", "MIN_LENGTH"]

MIN_LENGTH = 16


def read_secret(path: str, what: str = "secret") -> str:
    """The ``what`` in ``path``; ValueError says what is wrong with the file."""
    try:
        st = os.stat(path)
        if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise ValueError(f"{path}: the {what} file must not be readable by group or others "
                             f"(chmod 600 {path})")
        with open(path, encoding="utf-8") as f:
            secret = f.read().strip()
    except OSError as e:
        raise ValueError(f"cannot read the {what} file {path}: {e.strerror or e}") from None
    if len(secret) < MIN_LENGTH:
        raise ValueError(f"{path}: the {what} must be at least {MIN_LENGTH} characters "
                         f"(e.g. `head -c 32 /dev/urandom | base64 > {path}`)")
    return secret
