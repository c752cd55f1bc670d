"""What a worker does when the server's ACL refuses it something: say so once, plainly, and wait.

A worker whose certificate lacks a right (to watch its tube, to put a dead letter into
``stalkd.failed``, to watch its cancel tubes...) cannot fix that by retrying: the operator has
to add a line to the ACL file and reload the server (``kill -HUP``). So the first refusal of
each kind is logged once, naming what was refused and the exact entry that grants it (the
``worker`` role, docs/access-control.md); the slot then backs off, longer each time (up to
``MAX_PAUSE`` seconds), so a reload is picked up without flooding the log or the server. A job
refused mid-way is buried by its slot, never handed back to run again (see ``runner``).

>>> d = Denials(["emails"], "tls://q:11400?cert=w.pem")
>>> d.pause(), d.pause(), d.pause()
(1.0, 2.0, 4.0)
>>> what("put", ("stalkd.failed", b"{}", 0, 0, 60)), what("watch_only", (["emails"],))
('put into stalkd.failed', 'watch emails')
>>> what("finish", ("delete", 7, 0, 0, None)), what("reserve", ("emails",))
('delete job 7', 'reserve from emails')
"""

from __future__ import annotations

import logging
import ssl
import threading
from collections.abc import Sequence

log = logging.getLogger("stalkd.worker")

__all__ = ["Denials", "Refused", "what", "buried", "MAX_PAUSE", "BURY_PRIORITY"]

MAX_PAUSE = 60.0
BURY_PRIORITY = 2**31  # a job buried because the ACL refused its worker something


def what(op: str, args: Sequence[object]) -> str:
    """A worker call in words (``ServerOps`` method name and arguments)."""
    if op == "put" and args:
        return f"put into {args[0]}"
    if op == "reserve" and args:
        return f"reserve from {args[0]}"
    if op == "watch_only" and args:
        return "watch " + ", ".join(map(str, args[0]))  # type: ignore[call-overload]
    if op == "finish" and args:
        return f"{args[0]} job {args[1]}" + (" and store its result" if args[4] is not None else "")
    if args:
        return f"{op.replace('_', '-')} {args[0]}"
    return op.replace("_", "-")


def _subject(address: str) -> str:
    """The subject of the client certificate named in ``address``, as the ACL keys it."""
    from stalkd.client._address import parse_addresses
    from stalkd.server.tls import identity

    for a in parse_addresses(address):
        cert = a.tls.cert if a.tls is not None else None
        if cert is None:
            continue
        try:
            decoded = ssl._ssl._test_decode_cert(cert)  # type: ignore[attr-defined]  # noqa: SLF001
        except (AttributeError, OSError, ssl.SSLError):
            return (f"SUBJECT of {cert} (openssl x509 -noout -subject -nameopt RFC2253 "
                    f"-in {cert})")
        return identity(decoded) or "SUBJECT"
    return "SUBJECT"


def buried(job_id: int) -> None:
    """Say that ``job_id`` was buried after a refusal, and how to run it again."""
    log.warning("job %d buried: the ACL refused what finishing it needed; kick it once the ACL "
                "grants it (stalkd kick --job %d)", job_id, job_id)


class Denials:
    """One worker's refusals: what it already said, and how long to wait next."""

    def __init__(self, tubes: Sequence[str], address: str) -> None:
        self.tubes = list(tubes)
        self.address = address
        self._said: set[str] = set()
        self._pause = 0.0
        self._lock = threading.Lock()

    def report(self, done: str, exc: BaseException) -> bool:
        """Log that the ACL refused ``done`` (once per kind); True if this one was new."""
        with self._lock:
            if done in self._said:
                return False
            self._said.add(done)
        try:
            subject = _subject(self.address)
        except ValueError:
            subject = "SUBJECT"
        served = ", ".join(f'"{t}"' for t in self.tubes)
        log.error("the server's ACL refused this worker: %s (%s). Its certificate needs the worker "
                  "role for the tubes it serves; in the ACL file (--acl), add\n"
                  "    [identity.\"%s\"]\n    worker = [%s]\n"
                  "then reload the server (kill -HUP). Until then this worker waits (up to %.0fs "
                  "between tries) and runs nothing it cannot finish; see docs/access-control.md",
                  done, getattr(exc, "word", "") or exc, subject, served, MAX_PAUSE)
        return True

    def pause(self) -> float:
        """Seconds to wait before trying again: 1, 2, 4... up to ``MAX_PAUSE``."""
        with self._lock:
            self._pause = min(MAX_PAUSE, self._pause * 2 if self._pause else 1.0)
            return self._pause

    def passed(self) -> None:
        """Something went through: the next refusal waits from 1 s again."""
        self._pause = 0.0


class Refused(Exception):
    """A worker call the ACL refused: ``done`` says what it was, ``__cause__`` the reply."""

    def __init__(self, done: str) -> None:
        super().__init__(done)
        self.done = done
