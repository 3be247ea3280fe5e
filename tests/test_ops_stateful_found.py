"""Bugs the stateful test (tests/test_ops_stateful.py) found beyond issue 30's list, each as
the minimal sequence it shrank to. Each is kept out of the stateful test by its name in
``NEW_BUGS`` there; remove the name (and the xfail) with the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

import ckptfs
from ckptfs.errors import ErasedError
from ckptfs.ops.copy import copy_runs
from ckptfs.ops.erase import erase
from ckptfs.ops.verify import verify


@pytest.mark.xfail(strict=True, reason="copy-erasure-behind: not fixed (ckptfs/ops/copy_history"
                   ".py: the source's erase fence counts as forgetting every seq above its head)")
def test_erasure_reaches_a_destination_that_went_on(tmp_path: Path) -> None:
    """Erase a snapshot in the store that is behind (a backup), copy back to the one that went
    on: the erasure must reach it. Today the copy reports a conflict, "<backup> forgot or
    erased seq 3" (a seq the backup never had: its erase fence retires every seq) and leaves
    the erased snapshot readable in the primary."""
    primary = ckptfs.open_store(str(tmp_path / "primary"))
    backup = ckptfs.open_store(str(tmp_path / "backup"))
    run = primary.start_run("r")
    run.checkpoint({"note": "PII MK000001Z"})
    run.checkpoint({"note": "clean 2"})
    assert copy_runs(primary.repo, backup.repo).ok
    run.checkpoint({"note": "clean 3"})       # the primary goes on
    erase(backup.repo, "r", seq=1, reason="deletion request #1")
    report = copy_runs(backup.repo, primary.repo)
    assert report.conflicts == []
    assert report.life.erased == ["r@1"]
    assert [s.seq for s in primary.snapshots("r")] == [2, 3]
    with pytest.raises(ErasedError):
        primary.read("r@1")
    assert verify(primary.repo, read_data=True).ok


@pytest.mark.xfail(strict=True, reason="junk-run-folder: defect 4's class in a place issue 30 "
                   "does not name, not fixed by branch junkgc")
def test_junk_under_tombstones_does_not_stop_copy(tmp_path: Path) -> None:
    """``tombstones/x.swp`` (an editor's swap file) is listed as a run's folder of tombstones:
    copy and export fail on every run ("is a file where a folder belongs"). ``.DS_Store`` and
    ``name~`` there are already ignored."""
    name = "x.swp"
    src = ckptfs.open_store(str(tmp_path / "src"))
    src.start_run("r").checkpoint({"note": "hello"})
    erase(src.repo, "r", reason="make tombstones/ exist")
    src.start_run("s").checkpoint({"note": "kept"})
    (tmp_path / "src" / "tombstones" / name).write_bytes(b"junk bytes")
    dst = ckptfs.open_store(str(tmp_path / "dst"))
    report = copy_runs(src.repo, dst.repo)   # StorageError: "below a file" today
    assert report.ok and dst.read("s") == {"note": "kept"}


@pytest.mark.xfail(strict=True, reason="copy-erasure-fence-skips: not fixed (ckptfs/ops/"
                   "copy_retention.py erases in the destination, whose fence then refuses the "
                   "source's later snapshots)")
def test_erasure_copied_into_a_backup_keeps_its_later_snapshots(tmp_path: Path) -> None:
    """A backup holds r@1; the primary commits r@2, erases r@1 and copies to the backup: the
    backup must end with r@2, as a fresh destination does. Today it ends with no snapshot of
    r (the copy says ok, snapshots_skipped=1)."""
    primary = ckptfs.open_store(str(tmp_path / "primary"))
    backup = ckptfs.open_store(str(tmp_path / "backup"))
    run = primary.start_run("r")
    run.checkpoint({"note": "PII MK000001Z"})
    assert copy_runs(primary.repo, backup.repo).ok
    run.checkpoint({"note": "clean 2"})
    erase(primary.repo, "r", seq=1, reason="deletion request #1")
    report = copy_runs(primary.repo, backup.repo)
    assert report.ok and report.life.erased == ["r@1"]
    assert [s.seq for s in backup.snapshots("r")] == [2]
    assert backup.read("r@2") == {"note": "clean 2"}


@pytest.mark.xfail(strict=True, reason="junk-run-folder: defect 4's class in a place issue 30 "
                   "does not name, not fixed by branch junkgc")
def test_junk_named_like_a_run_is_not_a_run(tmp_path: Path) -> None:
    """``runs/x.swp`` is listed as a run, and verify (and listing its snapshots) raises
    StorageError "is a file where a folder belongs" instead of ignoring a name that is not an
    object (format.md 3.1)."""
    store = ckptfs.open_store(str(tmp_path / "s"))
    store.start_run("r").checkpoint({"note": "hello"})
    (tmp_path / "s" / "runs" / "x.swp").write_bytes(b"junk bytes")
    assert store.runs() == ["r"]
    assert verify(store.repo, read_data=True).ok
