"""Complete locators (spec/v2.md 3.5, 5.2, 6, 9.2; feature ``complete-locators``).

Every record locates every chunk it does not carry, taking the locator from its parent's
record or from a container its writer wrote; readers try the snapshot's own record before
reporting a chunk missing. That is what lets gc delete an old stray record no visible record
locates without reading it. The scenario of spec/v2.md 9.2: a long-lived process that read
record X while it was visible remembers "d is in X"; its own run's snapshots hold d elsewhere.
X is forgotten and gc deletes it unread (nothing names it, so no forward). The process's next
read of d and its next commit must not depend on what it remembers.
"""

from __future__ import annotations

import random
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import Any

import pytest

import ckptfs
from ckptfs.format.containers import Location, RecordRef
from ckptfs.format.models import COMPLETE_LOCATORS, StoreConfig
from ckptfs.format.names import CONFIG_PATH
from ckptfs.ops.gc import gc
from ckptfs.ops.retention import Policy, forget
from ckptfs.ops.upgrade import check_locators, upgrade
from ckptfs.ops.verify import verify
from ckptfs.errors import MissingObject
from ckptfs.store.objects import ObjectStore


X = random.Random(11).randbytes(6000).hex()  # one chunk, carried in a record's bodies


def _from_memory(self: ObjectStore, located: AbstractSet[bytes], parent: RecordRef | None
                 ) -> tuple[dict[bytes, Location], set[bytes]]:
    """The rule before complete locators: a locator from wherever the process last saw the
    chunk (``Locations.exact``, then a record locator's prefix), and no hole ever filled."""
    where: dict[bytes, Location] = {}
    for raw in located:
        loc = self.locations.get_raw(raw)
        if loc is not None:
            where[raw] = loc
    return where, set()


def _scenario(root: str) -> ckptfs.Store:
    a = ckptfs.open_store(root)  # the long-lived process
    run = a.start_run("a")
    run.checkpoint({"x": X, "i": 1})  # a@1 carries d = X
    b = ckptfs.open_store(root)  # another process: run b carries X too (it does not know a)
    rb = b.start_run("b")
    rb.checkpoint({"x": X})
    rb.checkpoint({"n": 2})
    assert a.read("b@1")["x"] == X  # a reads b@1 while visible: it remembers "X is in b@1"
    c = ckptfs.open_store(root)  # a third process: forget b@1, gc deletes it unread
    forget(c.repo, Policy(keep_last=1), runs=["b"])
    rep = gc(c.repo, grace_ms=0)
    assert rep.containers.containers_deleted == 1 and not rep.problems, rep
    assert not Path(root, "runs", "b", "00000000000000000001").exists()
    # the long-lived process commits elsewhere (its look at the lease is now after the gc:
    # no sweep overlaps its next commit to catch a bad locator) ...
    a.start_run("z").checkpoint({"n": 0})
    # ... and on top of a@1, whose record holds d (its memory points
    # at the deleted b@1)
    run.checkpoint({"x": X, "i": 2})
    return a


def test_a_remembered_place_gc_deleted_unread_reaches_no_record(tmp_path: Path) -> None:
    root = str(tmp_path / "s")
    a = _scenario(root)
    assert a.read("a")["x"] == X and a.read("a@1")["x"] == X  # its memory is stale: no matter
    fresh = ckptfs.open_store(root)
    assert COMPLETE_LOCATORS in fresh.repo.config.required
    for ref in ("a@1", "a@2", "b@2"):
        fresh.read(ref)
    assert fresh.read("a")["i"] == 2 and fresh.read("a")["x"] == X
    assert verify(fresh.repo, read_data=True).ok


def test_the_scenario_breaks_with_locators_from_process_memory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The hazard is real: with the earlier locator choice (process memory), the same steps
    leave a snapshot no fresh reader can restore. (This is what the rule prevents; the test
    above fails the same way if ``ObjectStore._relied`` goes back to memory.)"""
    monkeypatch.setattr(ObjectStore, "_relied", _from_memory)
    root = str(tmp_path / "s")
    _scenario(root)
    fresh = ckptfs.open_store(root)
    with pytest.raises(ckptfs.errors.MissingObject):
        fresh.read("a@2")


def test_gc_keeps_a_stray_only_a_locator_names(tmp_path: Path) -> None:
    """r@2 carries nothing of X: it locates X in r@1. Forget r@1: the stray is named by a
    visible record's locator, so gc reads it and moves X out (forward) before deleting it."""
    root = str(tmp_path / "s")
    st = ckptfs.open_store(root)
    run = st.start_run("r")
    run.checkpoint({"x": X, "i": 1})
    run.checkpoint({"x": X, "i": 2})
    forget(st.repo, Policy(keep_last=1))
    rep = gc(ckptfs.open_store(root).repo, grace_ms=0)
    assert rep.containers.containers_repacked == 1 and rep.containers.forwards_written == 1, rep
    fresh = ckptfs.open_store(root)
    assert fresh.read("r")["x"] == X and verify(fresh.repo, read_data=True).ok
    # a second gc keeps the forward (r@2 still names r@1) and the pack it points into
    rep2 = gc(ckptfs.open_store(root).repo, grace_ms=0)
    assert rep2.containers.containers_deleted == 0 and rep2.containers.forwards_deleted == 0
    assert ckptfs.open_store(root).read("r")["x"] == X


def _drop_feature(root: str) -> None:
    st = ckptfs.open_store(root)
    cfg = st.repo.config
    st.repo.storage.replace(CONFIG_PATH, StoreConfig(
        chunker=cfg.chunker, created=cfg.created, optional=cfg.optional,
        settings=cfg.settings, version=cfg.version,
        required=tuple(f for f in cfg.required if f != COMPLETE_LOCATORS)).to_bytes())


def test_a_store_without_the_feature_keeps_reading_strays_and_upgrade_adds_it(
        tmp_path: Path) -> None:
    root = str(tmp_path / "s")
    st = ckptfs.open_store(root)
    run = st.start_run("r")
    for i in range(4):
        run.checkpoint({"i": i, "x": X if i % 2 else "small"})
    _drop_feature(root)  # as an earlier ckptfs wrote it
    repo = ckptfs.open_store(root).repo
    assert COMPLETE_LOCATORS not in repo.config.required
    rep = upgrade(repo, dry_run=True)
    assert rep.changed and rep.checked == 4 and not rep.holes
    assert COMPLETE_LOCATORS not in ckptfs.open_store(root).repo.config.required
    rep = upgrade(ckptfs.open_store(root).repo)
    assert rep.changed and rep.checked == 4
    assert COMPLETE_LOCATORS in ckptfs.open_store(root).repo.config.required
    assert not upgrade(ckptfs.open_store(root).repo).changed


def test_upgrade_refuses_a_store_with_a_hole(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    root = str(tmp_path / "s")
    st = ckptfs.open_store(root)
    run = st.start_run("r")
    run.checkpoint({"x": X, "i": 1})
    with monkeypatch.context() as m:  # a writer that locates nothing it does not carry
        m.setattr(ObjectStore, "_relied",
                  lambda self, located, parent: ({}, set()))
        run.checkpoint({"x": X, "i": 2})
    _drop_feature(root)
    repo = ckptfs.open_store(root).repo
    checked, holes = check_locators(repo)
    assert checked == 2 and len(holes) == 1 and holes[0].startswith("r@2: ")
    rep = upgrade(repo)
    assert not rep.changed and rep.holes_total == 1
    assert COMPLETE_LOCATORS not in ckptfs.open_store(root).repo.config.required


def test_a_commit_whose_parent_does_not_locate_a_chunk_carries_it(tmp_path: Path) -> None:
    """A writer that cannot locate a chunk it relies on through the rule (here: the parent's
    record, written by a writer that left a hole) carries the body: no second hole."""
    root = str(tmp_path / "s")
    st = ckptfs.open_store(root)
    run = st.start_run("r")
    run.checkpoint({"x": X, "i": 1})
    saved: Any = ObjectStore._relied
    ObjectStore._relied = lambda self, located, parent: ({}, set())  # type: ignore[method-assign]
    try:
        run.checkpoint({"x": X, "i": 2})  # r@2: a hole for X
    finally:
        ObjectStore._relied = saved  # type: ignore[method-assign]
    other = ckptfs.open_store(root)  # a process that read r@1 still cannot read r@2: one
    assert other.read("r@1")["x"] == X  # outcome, whatever was read before (spec/v2.md 6)
    with pytest.raises(MissingObject):
        other.read("r@2")
    run.checkpoint({"x": X, "i": 3})  # the writer commits on top of r@2
    repo = ckptfs.open_store(root).repo
    _, holes = check_locators(repo)
    assert [h.split(":")[0] for h in holes] == ["r@2"]  # r@3 has no hole
    assert ckptfs.open_store(root).read("r")["x"] == X


def _v2_files(root: str) -> list[str]:
    """The store's files but lease generations and gc's own packs and forwards (their names
    hold a creation time: a rerun after a crash writes others)."""
    import os

    return sorted(p for p in (os.path.relpath(os.path.join(d, n), root)
                              for d, _, ns in os.walk(root) for n in ns)
                  if not p.startswith(("leases/", "packs/", "moved/")))


def test_gc_crash_at_every_step_with_unread_deletes(tmp_path: Path) -> None:
    """A v2 store with complete locators: strays that visible records locate (repacked and
    forwarded) and strays nothing names (deleted unread), packs of every kind. A crash at
    every mutation of gc leaves every retained snapshot readable, and a rerun finishes."""
    import shutil

    from tests.retention_helpers import CrashingStorage, InjectedCrash, age_tree
    from tests.test_gc_erase import _build
    from ckptfs.storage.local import LocalStorage
    from ckptfs.store.repository import Repository

    tpl = str(tmp_path / "tpl")
    states = _build(tpl)
    ckptfs.open_store(tpl).start_run("big").checkpoint({"blob": ckptfs.Blob(
        random.Random(3).randbytes(3 << 20))})  # a pack
    forget(ckptfs.open_store(tpl).repo, Policy(keep_labels=(("none", "x"),)), runs=["big"])
    age_tree(tpl, 7200)
    ref = str(tmp_path / "ref")
    shutil.copytree(tpl, ref)
    cs = CrashingStorage(LocalStorage(ref, durable=False), None)
    rep = gc(Repository(cs), grace_ms=0)
    assert rep.containers.containers_repacked >= 1 and rep.containers.containers_deleted >= 4
    total = cs.ops
    final = _v2_files(ref)
    for k in range(total):
        root = str(tmp_path / f"s{k}")
        shutil.copytree(tpl, root)
        with pytest.raises(InjectedCrash):
            gc(Repository(CrashingStorage(LocalStorage(root, durable=False), k)), grace_ms=0)
        st = ckptfs.open_store(root, durable=False)
        assert verify(st.repo, read_data=True).ok, f"crash at mutation {k}"
        assert st.read("b") == states["b"] and st.read("a") == states["a"], k
        gc(st.repo, grace_ms=0, break_lease=True)
        again = ckptfs.open_store(root, durable=False)
        assert verify(again.repo, read_data=True).ok, f"rerun after crash at mutation {k}"
        assert again.read("b") == states["b"] and again.read("a") == states["a"], k
        assert _v2_files(root) == final, f"crash at mutation {k}"
        shutil.rmtree(root)
    assert total >= 5, total


def test_verify_reports_a_hole_in_a_store_that_requires_complete_locators(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A record that neither carries nor locates a chunk it needs breaks the promise gc relies
    on (it may delete the container holding that chunk unread), and a fresh reader of that
    snapshot alone cannot find it: verify says so, naming the snapshot, even when the process
    running it learned the chunk's place from another record first."""
    root = str(tmp_path / "s")
    st = ckptfs.open_store(root)
    run = st.start_run("r")
    run.checkpoint({"x": X, "i": 1})
    assert verify(ckptfs.open_store(root).repo).ok
    with monkeypatch.context() as m:  # a writer that locates nothing it does not carry
        m.setattr(ObjectStore, "_relied",
                  lambda self, located, parent: ({}, set()))
        run.checkpoint({"x": X, "i": 2})
    fresh = ckptfs.open_store(root)
    assert fresh.read("r@1")["x"] == X  # this process now knows where the chunk is
    rep = verify(fresh.repo)
    assert [(p.category, p.run, p.seq) for p in rep.problems] == [("corrupt", "r", 2)], rep
    assert "not located by its record" in rep.problems[0].message
    assert verify(fresh.repo, runs=["other"]).ok  # only the runs asked for are judged
