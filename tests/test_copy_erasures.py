"""Erasures travel through ``copy`` between a store that went on and one that is behind
(spec/retention.md section 9, "Erase fences"). Found by the stateful test
(tests/test_ops_stateful.py, ``copy-erasure-behind`` and ``copy-erasure-fence-skips``), each
as the minimal sequence it shrank to, then the same class in both directions and modes:

- an erase fence (spec/retention.md 5) retires every seq above the run's head to stop stale
  writers; the seqs the store never held are not seqs it *forgot*, so a store that is behind,
  whose only difference is an erasure, is no conflict and takes nothing from the one that
  went on but the erasure;
- the erase a copy repeats in the destination keeps the seqs the source holds visibly (they
  were committed there), so the copy still carries them; a stale writer in the destination
  is still refused."""

from __future__ import annotations

from pathlib import Path

import pytest

import ckptfs
from ckptfs.errors import ConflictError, ErasedError
from ckptfs.ops.copy import copy_runs
from ckptfs.ops.erase import erase
from ckptfs.ops.verify import verify
from ckptfs.storage import Storage
from ckptfs.store.lifecycle import read_retired
from ckptfs.store.repository import Repository
from tests.test_crash_points_ops import (  # noqa: F401  (scratch: the same tmpfs fixture)
    SECRET,
    SHARED,
    every_crash,
    holding,
    load,
    min_points,
    scratch,
    unlease,
)

MODES = pytest.mark.parametrize("mirror", [False, True], ids=["backup", "mirror"])


def _stores(tmp_path: Path) -> tuple[ckptfs.Store, ckptfs.Store]:
    return (ckptfs.open_store(str(tmp_path / "primary")),
            ckptfs.open_store(str(tmp_path / "backup")))


def _clean(*stores: ckptfs.Store) -> None:
    for s in stores:
        rep = verify(s.repo, read_data=True)
        assert rep.ok, rep.problems


def _settled(src: ckptfs.Store, dst: ckptfs.Store, mirror: bool) -> None:
    """Copying again, either way, finds nothing to do and no conflict."""
    for a, b in ((src, dst), (dst, src)):
        again = copy_runs(a.repo, b.repo, mirror=mirror)
        assert again.ok, again.conflicts
        assert again.snapshots_copied == 0 and again.life.erased == [] \
            and again.life.controls_written == 0 and again.life.forgotten == []


@pytest.mark.parametrize("gone", [1, 2], ids=["first", "head"])
@MODES
def test_erasure_reaches_a_destination_that_went_on(tmp_path: Path, mirror: bool,
                                                    gone: int) -> None:
    """Erase a snapshot in the store that is behind (a backup), copy back to the one that went
    on: the erasure must reach it. Before the fix, the mirror copy reported a conflict,
    "<backup> forgot or erased seq 3" (a seq the backup never had: its erase fence retires
    every seq above its head) and left the erased snapshot readable in the primary. Then
    back: the backup's own fence retired r@3 only to stop writers (it never held it), so it
    takes r@3, as a fresh copy does, when its head r@2 is visible; above an erased head
    (``gone`` = 2), which nothing compares, it takes nothing."""
    primary, backup = _stores(tmp_path)
    run = primary.start_run("r")
    notes = {1: "clean 1", 2: "clean 2", 3: "clean 3", gone: "PII MK000001Z"}
    run.checkpoint({"note": notes[1]})
    run.checkpoint({"note": notes[2]})
    assert copy_runs(primary.repo, backup.repo).ok
    run.checkpoint({"note": notes[3]})       # the primary goes on
    erase(backup.repo, "r", seq=gone, reason="deletion request")
    report = copy_runs(backup.repo, primary.repo, mirror=mirror)
    assert report.conflicts == []
    assert report.life.erased == [f"r@{gone}"] and report.life.forgotten == []
    kept = [s for s in (1, 2, 3) if s != gone]
    assert [s.seq for s in primary.snapshots("r")] == kept
    with pytest.raises(ErasedError):
        primary.read(f"r@{gone}")
    assert all(primary.read(f"r@{s}") == {"note": notes[s]} for s in kept)
    back = copy_runs(primary.repo, backup.repo, mirror=mirror)
    assert back.ok and back.life.erased == []
    assert back.snapshots_copied == (1 if gone == 1 else 0)
    assert [s.seq for s in backup.snapshots("r")] == (kept if gone == 1 else [1])
    with pytest.raises(ErasedError):         # its writers stay refused
        backup.resume("r")
    _clean(primary, backup)
    _settled(backup, primary, mirror)


@MODES
def test_erasure_copied_into_a_backup_keeps_its_later_snapshots(
        tmp_path: Path, mirror: bool) -> None:
    """A backup holds r@1; the primary commits r@2, erases r@1 and copies to the backup: the
    backup must end with r@2, as a fresh destination does. Before the fix it ended with no
    snapshot of r (the copy said ok, snapshots_skipped=1): the erase of r@1 in the backup
    fenced the run there, and the fence refused the source's later snapshot."""
    primary, backup = _stores(tmp_path)
    run = primary.start_run("r")
    run.checkpoint({"note": "PII MK000001Z"})
    assert copy_runs(primary.repo, backup.repo).ok
    run.checkpoint({"note": "clean 2"})
    erase(primary.repo, "r", seq=1, reason="deletion request #1")
    stale = backup.resume("r")                # a writer in the backup, at its head r@1
    fresh = ckptfs.open_store(str(tmp_path / "fresh"))
    assert copy_runs(primary.repo, fresh.repo, mirror=mirror).ok
    report = copy_runs(primary.repo, backup.repo, mirror=mirror)
    assert report.ok and report.life.erased == ["r@1"]
    assert report.snapshots_copied == 1 and report.snapshots_skipped == 0
    for dst in (backup, fresh):
        assert [s.seq for s in dst.snapshots("r")] == [2]
        assert dst.read("r@2") == {"note": "clean 2"}
        with pytest.raises(ErasedError):
            dst.read("r@1")
    marker = read_retired(backup.repo.storage, "r")  # the erase's fence, keeping the copy's r@2
    assert marker is not None and marker.fenced and marker.kept == (2,)
    with pytest.raises(ConflictError):        # the fence still refuses a stale writer
        stale.checkpoint({"note": "stale 2"})
    with pytest.raises(ErasedError):
        backup.resume("r")
    assert [s.seq for s in backup.snapshots("r")] == [2]
    _clean(primary, backup, fresh)
    _settled(primary, backup, mirror)


@MODES
def test_erasures_in_both_stores_meet(tmp_path: Path, mirror: bool) -> None:
    """Each store erases another snapshot after the primary went on; copies both ways leave
    both stores with the same snapshots, neither erased one anywhere."""
    primary, backup = _stores(tmp_path)
    run = primary.start_run("r")
    for i in (1, 2, 3):
        run.checkpoint({"note": f"note {i}"})
    assert copy_runs(primary.repo, backup.repo).ok
    run.checkpoint({"note": "note 4"})
    erase(backup.repo, "r", seq=1, reason="deletion request #1")
    erase(primary.repo, "r", seq=3, reason="deletion request #3")
    for a, b in ((backup, primary), (primary, backup)):
        rep = copy_runs(a.repo, b.repo, mirror=mirror)
        assert rep.ok, rep.conflicts
    for s in (primary, backup):
        assert [x.seq for x in s.snapshots("r")] == [2, 4]
        for seq in (1, 3):
            with pytest.raises(ErasedError):
                s.read(f"r@{seq}")
    _clean(primary, backup)
    _settled(primary, backup, mirror)


@MODES
def test_whole_run_erased_in_the_store_behind_erases_the_run_that_went_on(
        tmp_path: Path, mirror: bool) -> None:
    """``erase RUN`` in the backup reaches the primary's whole run, its later snapshots too."""
    primary, backup = _stores(tmp_path)
    run = primary.start_run("r")
    run.checkpoint({"note": "PII MK000001Z"})
    assert copy_runs(primary.repo, backup.repo).ok
    run.checkpoint({"note": "clean 2"})
    erase(backup.repo, "r", reason="deletion request: the whole run")
    report = copy_runs(backup.repo, primary.repo, mirror=mirror)
    assert report.ok and report.life.erased == ["r"]
    assert primary.repo.record_seqs("r") == []
    for ref in ("r", "r@1", "r@2"):
        with pytest.raises(ErasedError):
            primary.read(ref)
    _clean(primary, backup)
    _settled(backup, primary, mirror)


@MODES
def test_a_fenced_store_takes_nothing_of_another_history(tmp_path: Path, mirror: bool) -> None:
    """The seqs above a fenced store's head are open to a copy of *its* run only: another
    history of the same id (written to both stores) is a conflict, and nothing of it lands."""
    primary, backup = _stores(tmp_path)
    run = primary.start_run("r")
    run.checkpoint({"note": "one"})
    run.checkpoint({"note": "two"})
    assert copy_runs(primary.repo, backup.repo).ok
    erase(backup.repo, "r", seq=1, reason="deletion request #1")
    other = ckptfs.open_store(str(tmp_path / "other"))
    orun = other.start_run("r")
    for i in (1, 2, 3):
        orun.checkpoint({"note": f"other {i}"})
    report = copy_runs(other.repo, backup.repo, mirror=mirror)
    assert len(report.conflicts) == 1 and "seq 2 differs" in report.conflicts[0]
    assert [s.seq for s in backup.snapshots("r")] == [2]
    assert backup.read("r@2") == {"note": "two"}
    marker = read_retired(backup.repo.storage, "r")
    assert marker is not None and marker.kept == (2,)


def test_every_crash_point_of_a_copy_that_erases_and_goes_on(scratch: Path) -> None:
    """The copy of the second test dies at each storage operation (before, after, torn):
    the backup is never half-erased nor shows a record the fence hides, and the rerun ends
    with r@2 and no byte of r@1, as the uninterrupted copy does."""
    template = scratch / "copy-erase-template"
    primary = ckptfs.open_store(str(template / "primary"))
    run = primary.start_run("r")
    run.checkpoint({"note": (SECRET * 200).decode(), "text": SHARED})
    assert copy_runs(primary.repo, ckptfs.open_store(str(template / "backup")).repo).ok
    run.checkpoint({"note": "clean 2", "text": SHARED})
    erase(primary.repo, "r", seq=1, reason="deletion request #1")
    want = primary.read("r@2")

    def doomed(st: Storage) -> None:
        copy_runs(primary.repo, Repository(st))

    def check(st: Storage, where: str) -> None:
        store = ckptfs.Store(st)
        report = verify(store.repo, read_data=True)
        assert report.ok, (where, report.problems)
        assert store.repo.seqs("r") in ([1], [], [2]), (where, store.repo.seqs("r"))
        unlease(st)
        rep = copy_runs(primary.repo, store.repo)  # the rerun finishes
        assert rep.ok, (where, rep.conflicts)
        assert store.repo.seqs("r") == [2] and store.read("r@2") == want, where
        with pytest.raises(ErasedError):
            store.read("r@1")
        assert holding(st, SECRET) == [], where
        assert verify(store.repo, read_data=True).ok, where
        again = copy_runs(primary.repo, store.repo)
        assert again.ok and again.snapshots_copied == 0 and again.life.erased == [], where

    n = every_crash("local", lambda: load("local", template / "backup", scratch), doomed, check)
    assert n >= min_points()
