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


def _copied_then_went_on(tmp_path: Path) -> tuple[ckptfs.Store, ckptfs.Store]:
    """``r`` is copied at seq 1; then the source goes on to seq 3 (whose parent, seq 2, the
    destination lacks) and forgets 1 and 2 (keep-last 1, as a nightly ``forget`` would)."""
    from ckptfs.ops.retention import Policy, forget

    src = ckptfs.open_store(str(tmp_path / "src"))
    run = src.start_run("r")
    run.checkpoint({"n": 1})
    dst = ckptfs.open_store(str(tmp_path / "dst"))
    assert copy_runs(src.repo, dst.repo).ok
    run.checkpoint({"n": 2})
    run.checkpoint({"n": 3})
    forget(src.repo, Policy(keep_last=1))
    return src, dst


def _backup_after_source_went_on(tmp_path: Path, *, gc_source: bool, mirror: bool) -> None:
    """``_copied_then_went_on``, (a gc of the source,) then the copy again."""
    from ckptfs.ops.gc import gc, grace_of
    import time

    src, dst = _copied_then_went_on(tmp_path)
    if gc_source:  # the forgotten records are gone from the source too
        gc(src.repo, now=int(time.time() * 1000) + grace_of(src.repo) + 120_000)
        assert not (tmp_path / "src" / "runs" / "r" / f"{1:020d}").exists()
    report = copy_runs(src.repo, dst.repo, mirror=mirror)
    # before: "run 'r' seq 1: ... forgot or erased it, but nothing shows that the snapshot
    # ... holds there is the same one" (a conflict on every run that moved on between copies)
    assert report.ok and not report.conflicts, report.conflicts
    dst = ckptfs.open_store(str(tmp_path / "dst"))
    assert [s.seq for s in dst.snapshots("r")] == ([3] if mirror else [1, 3])
    assert dst.read("r") == {"n": 3}
    assert verify(dst.repo, read_data=True).ok


def test_backup_copy_after_the_source_forgot_past_its_head(tmp_path: Path) -> None:
    """Found by the long stateful run (178 sequences): the backup cycle of README reported a
    conflict once the source had committed past the backup's head and forgotten up to it. The
    retired marker now lists the ids of the seqs it retires (spec/retention.md 3), the proof
    the copy needs."""
    _backup_after_source_went_on(tmp_path, gc_source=False, mirror=False)


def test_backup_copy_after_the_source_forgot_and_collected(tmp_path: Path) -> None:
    _backup_after_source_went_on(tmp_path, gc_source=True, mirror=False)


def test_mirror_copy_after_the_source_forgot_and_collected(tmp_path: Path) -> None:
    _backup_after_source_went_on(tmp_path, gc_source=True, mirror=True)


def test_two_histories_still_conflict_after_the_source_forgot(tmp_path: Path) -> None:
    """The ids prove sameness, and difference: ``r`` written in both stores (its seq 1
    differs), then the source went on and forgot seq 1. Before the ids this was "unproven";
    now the source's marker names its seq 1, which is not the destination's: diverged."""
    from ckptfs.ops.retention import Policy, forget

    src = ckptfs.open_store(str(tmp_path / "src"))
    run = src.start_run("r")
    for n in (1, 2, 3):
        run.checkpoint({"n": n})
    forget(src.repo, Policy(keep_last=1))
    dst = ckptfs.open_store(str(tmp_path / "dst"))
    dst.start_run("r").checkpoint({"n": "another run"})
    report = copy_runs(src.repo, dst.repo)
    assert len(report.conflicts) == 1 and "differs between" in report.conflicts[0]
    assert [s.seq for s in dst.snapshots("r")] == [1]
    assert dst.read("r") == {"n": "another run"}


def test_marker_ids_are_bounded_and_malformed_ones_prove_nothing(tmp_path: Path) -> None:
    """The marker lists the highest MAX_RETIRED_IDS ids; an ``ids`` it cannot parse is read
    as none (the marker itself is still served), so the copy reports the run unproven."""
    from ckptfs.format import cbor
    from ckptfs.format.digest import Digest
    from ckptfs.format.lifecycle import MAX_RETIRED_IDS, Retired

    m = Retired(run="r", through=10_000, kept=(5,), created=0)
    many = [(s, Digest.of(str(s).encode())) for s in range(1, 10_001)]
    got = m.with_ids(many)
    assert len(got.ids) == MAX_RETIRED_IDS and got.ids[0][0] == 10_000 - MAX_RETIRED_IDS + 1
    assert Retired.from_bytes(got.to_bytes(), what="m") == got
    assert 5 not in dict(m.with_ids([(5, many[4][1])]).ids)  # a kept seq is no retired one

    src, dst = _copied_then_went_on(tmp_path)
    (path,) = (tmp_path / "src" / "runs" / "r" / "retired").iterdir()
    marker = cbor.decode(path.read_bytes(), what="m")
    assert [p[0] for p in marker["ids"]] == [1, 2]
    marker["ids"] = [[1, b"short"], marker["ids"][1]]
    path.write_bytes(cbor.encode(marker))
    assert src.read("r") == {"n": 3}
    report = copy_runs(src.repo, dst.repo)
    assert len(report.conflicts) == 1 and "nothing shows" in report.conflicts[0]
