"""Bugs the stateful test (tests/test_ops_stateful.py) found beyond issue 30's list, each as
the minimal sequence it shrank to, kept as regression tests (fixed by branch junkruns: one
listing tells files from folders, format.md 3.1)."""

from __future__ import annotations

from pathlib import Path

import ckptfs
from ckptfs.errors import ErasedError
from ckptfs.ops.copy import copy_runs
from ckptfs.ops.erase import erase
from ckptfs.ops.verify import verify


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


def test_junk_named_like_a_run_is_not_a_run(tmp_path: Path) -> None:
    """``runs/x.swp`` is listed as a run, and verify (and listing its snapshots) raises
    StorageError "is a file where a folder belongs" instead of ignoring a name that is not an
    object (format.md 3.1)."""
    store = ckptfs.open_store(str(tmp_path / "s"))
    store.start_run("r").checkpoint({"note": "hello"})
    (tmp_path / "s" / "runs" / "x.swp").write_bytes(b"junk bytes")
    assert store.runs() == ["r"]
    assert verify(store.repo, read_data=True).ok
