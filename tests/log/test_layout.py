"""resolve_log_dir: a log directory or a server data directory, and a clear error otherwise."""

from __future__ import annotations

from pathlib import Path

import pytest

from stalkd.log import Log
from stalkd.log.errors import NotALogError
from stalkd.log.layout import resolve_log_dir


def test_log_dir_and_data_dir_resolve_to_the_log(tmp_path: Path) -> None:
    with Log.open(tmp_path / "data" / "wal", durability="never") as log:
        log.append(b"x")
    assert resolve_log_dir(tmp_path / "data" / "wal") == tmp_path / "data" / "wal"
    assert resolve_log_dir(tmp_path / "data") == tmp_path / "data" / "wal"


@pytest.mark.parametrize("make", ["empty", "missing", "file", "other-files"])
def test_not_a_log_is_an_error_naming_what_was_expected(tmp_path: Path, make: str) -> None:
    target = tmp_path / "d"
    if make == "empty":
        target.mkdir()
    elif make == "file":
        target.write_text("hello")
    elif make == "other-files":
        (target / "wal").mkdir(parents=True)
        (target / "wal" / "notes.txt").write_text("not a segment")
    with pytest.raises(NotALogError) as err:
        resolve_log_dir(target)
    assert str(target) in str(err.value) and "stalkd log" in str(err.value)
