"""resolve_log_dir: the path a person typed -> the directory holding the log's segments."""

from __future__ import annotations

from pathlib import Path

import pytest

from stalkd.log import Log, NotALogError, resolve_log_dir


def test_a_log_directory_resolves_to_itself(tmp_path: Path) -> None:
    Log.open(tmp_path / "q", durability="never").close()
    assert resolve_log_dir(tmp_path / "q") == tmp_path / "q"


def test_a_server_data_directory_resolves_to_its_wal(tmp_path: Path) -> None:
    Log.open(tmp_path / "wal", durability="never").close()
    (tmp_path / "snapshots").mkdir()
    assert resolve_log_dir(tmp_path) == tmp_path / "wal"
    assert resolve_log_dir(str(tmp_path)) == tmp_path / "wal"


def test_a_log_whose_segments_are_all_archived_is_still_a_log(tmp_path: Path) -> None:
    (tmp_path / "archive").mkdir()
    (tmp_path / "archive" / "seg-00000000000000000000.log").write_bytes(b"")
    assert resolve_log_dir(tmp_path) == tmp_path


@pytest.mark.parametrize("case", ["empty", "other files", "missing", "a file"])
def test_anything_else_is_a_clear_error_naming_what_was_expected(tmp_path: Path, case: str) -> None:
    target = tmp_path / "d"
    if case == "empty":
        target.mkdir()
    elif case == "other files":
        target.mkdir()
        (target / "snapshots").mkdir()
        (target / "notes.txt").write_text("x")
    elif case == "a file":
        target.write_text("x")
    with pytest.raises(NotALogError) as e:
        resolve_log_dir(target)
    msg = str(e.value)
    assert str(target) in msg and "seg-*.log" in msg and "stalkd serve -b" in msg
