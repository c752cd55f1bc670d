"""Which copy of a waiting job may run: the decision, without I/O.

A job of a group or chain that waits for its inputs is re-put (a copy, a new id) and then
deleted, and its result is kept under the id it was first put under (``origin``). The delete
carries, in the same write, a ``waiting`` record naming the copy: the record names the one
*current* copy. A crash between the copy's put and that write leaves two live jobs, the one
copied (``prev``) and the copy, and both may be reserved at once by two slots. Only the current
one may run; without this rule both ran the handler (the callback of a group ran twice).

A copy the record does not name cannot tell a crash (the job it copies came back, and is now the
current one) from a write still on its way (the copy was woken before the delete landed). So
while the job it copies still exists it neither runs nor goes away: it is released and looks
again (``recheck``). Once that job is gone, the record is final: a copy it names runs, any other
is ``stale`` and deletes itself (without storing an outcome or freeing the key, which belong to
the current copy). The job copied is looked at *before* the record is read: its delete and the
record naming the copy leave in one write, in that order, so a record read after the job was
seen gone is the one its delete wrote (read the other way round, an older record and a job
gone meanwhile made the current copy delete itself). Two jobs can therefore run the handler at once only if each thinks itself
current, and that needs the record to name both.

>>> from stalkd.worker.results import Outcome
>>> verdict(7, None, None)                               # the job as first put
'run'
>>> verdict(9, 7, Outcome("waiting", 9))                 # the copy the record names
'run'
>>> verdict(7, None, Outcome("waiting", 9))              # copied, and the record says so
'stale'
>>> verdict(9, 7, None)                                  # the job it copies may be current
'check-prev'
>>> verdict(9, 7, None, prev_exists=True), verdict(9, 7, None, prev_exists=False)
('recheck', 'run')
>>> verdict(9, 7, Outcome("done", 4))
'finished'
"""

from __future__ import annotations

from typing import Literal

from stalkd.worker.results import Outcome

__all__ = ["Verdict", "verdict"]

Verdict = Literal["run", "finished", "stale", "recheck", "check-prev"]


def verdict(job_id: int, prev: int | None, record: Outcome | None, *,
            prev_exists: bool | None = None) -> Verdict:
    """What the delivered job ``job_id`` (a copy of ``prev``, or the job as first put when
    ``prev`` is None) does, given the record kept under its origin. ``check-prev``: ask
    whether ``prev`` still exists and call again with ``prev_exists``."""
    if record is not None and record.status != "waiting":
        return "finished"  # an earlier copy ran: only delete this one
    named = None if record is None else record.value
    if named == job_id:
        return "run"
    if prev is not None:
        if prev_exists is None:
            return "check-prev"
        if prev_exists:
            return "recheck"
    # The job this copies is gone (or this is the first one): the record is settled.
    return "run" if named is None else "stale"
