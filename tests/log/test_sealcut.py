"""A writer killed between a segment's footer and its fdatasync, then a power cut.

Under ``never`` a segment's frames reach the disk only with its seal (footer written, then
fdatasync). A kill -9 between the two leaves the footer and frames in the page cache, where the
next open finds them and trusts the segment as sealed; unless that open makes them durable, no
one ever syncs that segment again, and a power cut later loses it while the segments written
after it survive: the log then refuses to open ("bad frame in a sealed segment without a valid
footer; N valid frames follow it"), and a repair would drop every later record (found by the
power-loss campaign, campaign/logcut.py, about one run in twenty under ``never``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from sealcut_child import SyncShadow, power_cut

from stalkd.log import Log
from stalkd.log.segment import SegmentView, segment_name

CHILD = Path(__file__).with_name("sealcut_child.py")


def test_footer_left_unsynced_by_a_kill_is_made_durable_by_the_next_open(tmp_path: Path) -> None:
    log_dir, shadow = tmp_path / "log", tmp_path / "shadow"
    first = log_dir / segment_name(0)
    # the first segment's next fdatasync after the open (its header's, at creation, is done) is its seal's
    proc = subprocess.run([sys.executable, str(CHILD), str(log_dir), str(shadow), "1000",
                           f"fdatasync:{first.name}:1"], capture_output=True, text=True, env=dict(os.environ))
    assert proc.returncode == -9, proc.stderr
    view = SegmentView(str(first))
    try:
        assert view.footer is not None  # the kill landed after the footer's store
        sealed_end = view.footer[0]
    finally:
        view.close()

    # The next writer goes on: several segments, each sealed (so durable) before the next.
    with Log.open(log_dir, segment_size=4096, durability="never", fs=SyncShadow(str(shadow))) as log:
        assert log.next_offset == sealed_end
        for _ in range(200):
            log.append(b"%d:" % log.next_offset + b"." * 100)
        durable_end = log.segment_bounds()[-2][1]  # the last sealed segment's end
    assert durable_end is not None and durable_end > sealed_end + 100

    power_cut(str(log_dir), str(shadow))
    with Log.open(log_dir, segment_size=4096, durability="never") as log:
        seqs = [(f.offset, int(bytes(f.payload).split(b":", 1)[0])) for f in log.read(0)]
    assert [o for o, _ in seqs] == list(range(len(seqs)))
    assert all(o == s for o, s in seqs)
    assert len(seqs) >= durable_end  # every sealed record survived the cut
