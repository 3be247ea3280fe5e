"""Erase leaves no byte of the erased run (issue 30, defects 3 and 8).

3: erase repacked the containers holding the erased snapshots' bodies and copied out every
other body, including bodies only the run's *forgotten* snapshots used (whose records a gc had
deleted): the erased content landed in a fresh pack nothing names. Now erase keeps exactly the
bodies retained snapshots use (the gc mark) in every container it rewrites.
8: a commit killed after its pack was durable and before its record left a pack of the run's
content that erase did not see. Now erase removes it when it is provably nobody's (older than
the grace period), and otherwise names it in its report.

Every check scans every file of the store, raw and inside every zstd frame (tests/bytescan.py).
"""

from __future__ import annotations

import itertools
import os
import time
from pathlib import Path
from typing import Any

import pytest

import ckptfs
from ckptfs.ops import erase as erase_ops
from ckptfs.ops.erase import erase
from ckptfs.ops.gc import gc
from ckptfs.ops.retention import Policy, forget
from ckptfs.ops.verify import verify
from ckptfs.storage.local import LocalStorage
from tests.bytescan import files_holding
from tests.faults import Crash, FaultyStorage
from tests.retention_helpers import age_tree

SETTINGS = {"record_bulk_max": 4096, "pack_target": 1 << 20}
HOUR_MS = 3_600_000


def _later(hours: float = 2) -> int:
    return int(time.time() * 1000) + int(hours * HOUR_MS)


def _blob(tag: str, n: int) -> str:
    """``n`` bytes of incompressible text starting with ``tag`` (so it lands in packs)."""
    return tag + os.urandom(n // 2).hex()


def _open(root: Path) -> ckptfs.Store:
    store = ckptfs.open_store(str(root))
    store.init(settings=SETTINGS)
    return store


def _marker_store(root: Path, marker: str) -> ckptfs.Store:
    """victim@1 holds ``marker`` in a pack beside a large body victim@2 keeps (so a gc leaves
    that pack alone: it is mostly live); run other has content of its own."""
    store = _open(root)
    v = store.start_run("victim")
    big = _blob("victim-big-", 400_000)
    v.checkpoint({"big": big, "m": _blob(marker, 40_000)})
    v.checkpoint({"big": big, "n": "second"})
    o = store.start_run("other")
    o.checkpoint({"x": _blob("other-", 50_000)})
    assert files_holding(str(root), marker.encode())
    return store


@pytest.mark.parametrize("gc_how", ["aged", "grace0"])
def test_erase_after_forget_and_gc_leaves_no_byte_of_the_forgotten_snapshot(
        tmp_path: Path, gc_how: str) -> None:
    """The issue's steps: victim@1 holds a marker; forget victim@1; gc; erase victim. Before
    the fix the marker was in a new pack written by erase (it failed here)."""
    root = tmp_path / "s"
    marker = "MARKER-victim-1-3f9c"
    store = _marker_store(root, marker)
    other = store.read("other")
    forget(store.repo, Policy(keep_last=1), runs=["victim"])
    if gc_how == "aged":  # a later gc, past the grace period
        age_tree(str(root), 7200)
        gc(store.repo)
    else:  # gc --grace 0 right away
        gc(store.repo, grace_ms=0)
    held = files_holding(str(root), marker.encode())
    assert held and all(p.startswith("packs/") for p in held)  # gc left it (mostly live pack)
    erase(store.repo, "victim", reason="deletion request")
    assert files_holding(str(root), marker.encode()) == []
    gc(store.repo, grace_ms=0)
    assert files_holding(str(root), marker.encode()) == []
    erase(store.repo, "victim", reason="deletion request, again")  # a second erase
    assert files_holding(str(root), marker.encode()) == []
    fresh = ckptfs.open_store(str(root))
    assert fresh.read("other") == other
    assert verify(fresh.repo, read_data=True).ok


def test_langgraph_prune_keep_latest_then_delete_thread_leaves_no_byte(tmp_path: Path) -> None:
    """prune(keep_latest) forgets the older checkpoints; a gc collects; delete_thread erases."""
    pytest.importorskip("langgraph")
    from tests.test_langgraph_lifecycle import cfg, ckpt
    from ckptfs.integrations.langgraph import CkptfsSaver

    root = tmp_path / "s"
    _open(root)
    saver = CkptfsSaver(str(root))
    marker = "MARKER-only-in-old-checkpoint-8b1d"
    big = _blob("thread-big-", 400_000)
    c = saver.put(cfg("t"), ckpt({"big": big, "m": _blob(marker, 40_000)}), {}, {"big": 1, "m": 1})
    saver.put(cfg("t", cid=c["configurable"]["checkpoint_id"]), ckpt({"big": big}), {},
              {"big": 1})
    keep = saver.put(cfg("u"), ckpt({"u": _blob("other-thread-", 50_000)}), {}, {"u": 1})
    saver.flush()
    saver.prune(["t"], strategy="keep_latest")
    gc(saver.store.repo, grace_ms=0)
    assert files_holding(str(root), marker.encode())  # the old checkpoint's pack stays
    saver.delete_thread("t")
    assert files_holding(str(root), marker.encode()) == []
    fresh = CkptfsSaver(str(root))
    got = fresh.get_tuple(cfg("u"))
    assert got is not None and got.config == keep
    assert fresh.get_tuple(cfg("t")) is None


class _DieAtRecord(FaultyStorage):
    """Dies (Crash) when the record ``runs/<run>/<seq>`` is about to be created: the commit's
    packs are durable, its record never lands."""

    def __init__(self, inner: LocalStorage, record: str) -> None:
        super().__init__(inner)
        self.record = record

    def create(self, path: str, data: bytes) -> None:
        if path == self.record:
            raise Crash(f"create {path}")
        super().create(path, data)


def _crashed_commit(root: Path, marker: str, *, shared: str | None = None) -> None:
    """victim@1 committed; victim@2 (holding ``marker`` in a pack) dies before its record."""
    _open(root)
    ckptfs.open_store(str(root)).start_run("victim").checkpoint({"a": "first"})
    st = _DieAtRecord(LocalStorage(str(root)), "runs/victim/00000000000000000002")
    doomed = ckptfs.Store(st)
    run = doomed.resume("victim")
    state: dict[str, Any] = {"a": "first", "m": _blob(marker, 60_000)}
    if shared is not None:
        state["s"] = shared
    with pytest.raises(Crash):
        run.checkpoint(state)
    assert files_holding(str(root), marker.encode())


def test_erase_names_a_young_crashed_commit_pack(tmp_path: Path) -> None:
    """Right after the crash nobody can tell that pack from a commit in flight of another
    run: erase keeps it and names it in its report (before the fix: 'erased', nothing said)."""
    root = tmp_path / "s"
    marker = "MARKER-crashed-commit-c01d"
    _crashed_commit(root, marker)
    held = files_holding(str(root), marker.encode())
    report = erase_ops.erase_run(ckptfs.open_store(str(root)).repo, "victim", reason="request")
    assert report.tombstone.state == "erased"
    assert sorted(p.path for p in report.unresolved) == held
    assert all(p.path.startswith("packs/") and p.stored > 0 for p in report.unresolved)
    # erase again once the grace period is over: the pack is removed
    report = erase_ops.erase_run(ckptfs.open_store(str(root)).repo, "victim", reason="request",
                       now=_later())
    assert report.unresolved == () and files_holding(str(root), marker.encode()) == []


def test_erase_removes_an_old_crashed_commit_pack(tmp_path: Path) -> None:
    """Past the grace period no writer may rely on a pack no retained snapshot uses (the
    grace rule): erase removes it (before the fix it stayed)."""
    root = tmp_path / "s"
    marker = "MARKER-crashed-commit-0ld1"
    _crashed_commit(root, marker)
    age_tree(str(root), 7200)
    report = erase_ops.erase_run(ckptfs.open_store(str(root)).repo, "victim", reason="request")
    assert report.unresolved == ()
    assert files_holding(str(root), marker.encode()) == []
    assert verify(ckptfs.open_store(str(root)).repo, read_data=True).ok


def test_cli_erase_names_the_pack_in_text_and_json(tmp_path: Path) -> None:
    from tests.clihelp import cli

    root = tmp_path / "s"
    marker = "MARKER-crashed-commit-c11e"
    _crashed_commit(root, marker)
    [held] = files_holding(str(root), marker.encode())
    r = cli("erase", str(root), "victim", "--reason", "request", "--json")
    assert r.returncode == 0, r.stderr
    import json

    out = json.loads(r.stdout)
    assert [p["path"] for p in out["unresolved"]] == [held]
    r = cli("erase", str(root), "victim", "--reason", "request")
    assert r.returncode == 0 and held in r.stdout and "again after" in r.stdout


# -- the class: every combination of what came before the erase -----------------------------
CASES = list(itertools.product([False, True], repeat=4))


@pytest.mark.parametrize("forgotten,collected,crashed,shared", CASES,
                         ids=["-".join(n for n, on in zip(("forgot", "gc", "crash", "shared"), c)
                                       if on) or "plain" for c in CASES])
def test_erase_leaves_no_byte_unique_to_the_run(tmp_path: Path, forgotten: bool,
                                                collected: bool, crashed: bool,
                                                shared: bool) -> None:
    """16 cases: {forgotten before or not} x {gc before or not} x {a crashed commit of the run
    or not} x {other runs sharing content with it or not}. After erase no byte unique to the
    erased run is in the store but in the packs its report names (a crashed commit, younger
    than the grace period); after an erase past the grace period, none at all; every other
    run's retained snapshots read back equal throughout and the store verifies."""
    root = tmp_path / "s"
    store = _open(root)
    common = _blob("COMMON-", 300_000)
    markers = [f"VICTIM-UNIQ-{i}-" for i in range(3)]
    v = store.start_run("victim")
    for i, m in enumerate(markers):
        state: dict[str, Any] = {"big": _blob(m + "big-", 200_000), "small": m + "small",
                                 "keep": _blob("victim-keep-", 100_000) if i else None}
        if shared:
            state["common"] = common
        v.checkpoint(state)
    others: dict[str, Any] = {}
    o = store.start_run("other")
    o.checkpoint({"x": _blob("other-own-", 50_000),
                  **({"common": common} if shared else {})})  # locates into victim's pack
    if shared:
        kid = store.fork("victim@2", "kid")
        kid.checkpoint({"common": common, "kid": "kid's own"})
    crash_marker = "VICTIM-CRASHED-COMMIT-"
    if crashed:
        st = _DieAtRecord(LocalStorage(str(root)), "runs/victim/00000000000000000004")
        with pytest.raises(Crash):
            ckptfs.Store(st).resume("victim").checkpoint({"m": _blob(crash_marker, 60_000)})
        markers.append(crash_marker)
    if forgotten:
        forget(store.repo, Policy(keep_last=1), runs=["victim"])
    if collected:
        age_tree(str(root), 7200)
        gc(store.repo)
    for run in store.repo.run_ids():
        if run != "victim":
            others[run] = [store.read(f"{run}@{s}") for s in store.repo.seqs(run)]

    def check(allowed: set[str]) -> None:
        left = {m: files_holding(str(root), m.encode()) for m in markers}
        assert {m: p for m, p in left.items() if set(p) - allowed} == {}
        fresh = ckptfs.open_store(str(root))
        for run, states in others.items():
            assert [fresh.read(f"{run}@{s}") for s in fresh.repo.seqs(run)] == states
        assert verify(fresh.repo, read_data=True).ok

    report = erase_ops.erase_run(store.repo, "victim", reason="request")
    named = {u.path for u in report.unresolved}
    if not crashed or collected:
        assert not named
    check(named)
    report = erase_ops.erase_run(ckptfs.open_store(str(root)).repo, "victim", reason="again",
                                 now=_later())
    assert report.unresolved == ()
    check(set())
    gc(ckptfs.open_store(str(root)).repo, grace_ms=0)
    check(set())


def test_a_writer_does_not_rely_on_what_it_wrote_before_an_erase(tmp_path: Path) -> None:
    """spec/v2.md 5.2: a writer relies on a body it wrote less than REUSE_WINDOW ago. Erase
    (unlike gc) drops bodies of containers of any age, so a writer that saw an erase's sweep
    trusts nothing it wrote before it. Before the fix, a process that wrote M for run victim,
    then (after another process erased victim) committed M in run other, located M in
    victim's deleted pack: a record with a hole, reported committed, unreadable."""
    root = tmp_path / "s"
    store = _open(root)
    m = _blob("M-", 100_000)
    store.start_run("victim").checkpoint({"m": m})
    o = store.start_run("other")
    o.checkpoint({"x": 1})
    erase(ckptfs.open_store(str(root)).repo, "victim", reason="request")  # another process
    o.checkpoint({"x": 2})  # overlapped nothing it needs: in doubt, checked, committed
    o.checkpoint({"x": 3, "m": m})
    fresh = ckptfs.open_store(str(root))
    assert fresh.read("other") == {"x": 3, "m": m}
    assert verify(fresh.repo, read_data=True).ok


def test_erase_rewrites_in_batches_with_the_same_result(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """One container per repack (``BATCH_BYTES`` = 1): the same store as in one repack."""
    from ckptfs.ops import erase_containers

    calls = []
    real = erase_containers.repack

    def counted(*a: Any, **k: Any) -> Any:
        calls.append(len(a[1]))
        return real(*a, **k)

    monkeypatch.setattr(erase_containers, "BATCH_BYTES", 1)
    monkeypatch.setattr(erase_containers, "repack", counted)
    test_erase_leaves_no_byte_unique_to_the_run(tmp_path, True, True, False, True)
    assert len(calls) >= 3 and set(calls) == {1}


def test_erase_says_which_removed_files_live_on_under_hard_links(tmp_path: Path) -> None:
    """issue 30 defect 10, erase's side: a pack of the erased run hard-linked from outside the
    store (a ``cp -al`` snapshot of it) keeps the erased bytes after erase unlinks the store's
    name. Erase cannot reach them, so it names the file (JSON ``linked_elsewhere``; the CLI
    warns and exits 1). Before, it reported a clean erase."""
    import json

    from ckptfs.ops.erase import erase_run
    from tests.clihelp import cli

    for how in ("api", "cli"):
        root = tmp_path / how
        marker = f"LINKED-{how}-"
        store = _marker_store(root, marker)
        outside = tmp_path / f"{how}-outside"
        outside.mkdir()
        held = files_holding(str(root), marker.encode())
        for i, rel in enumerate(held):
            os.link(root / rel, outside / str(i))
        if how == "api":
            report = erase_run(store.repo, "victim", reason="deletion request")
            assert report.linked and set(report.linked) <= set(held)
            assert report.to_json()["linked_elsewhere"] == list(report.linked)
        else:
            p = cli("erase", str(root), "victim", "--reason", "deletion request", "--json",
                    check=1)
            assert json.loads(p.stdout)["linked_elsewhere"]
            assert "hard links" in p.stderr and "cp -al" in p.stderr
        assert not files_holding(str(root), marker.encode())  # the store holds none of it
        assert files_holding(str(outside), marker.encode())   # what the report warns about
    # a store with no outside names reports none
    plain = _marker_store(tmp_path / "plain", "PLAIN-")
    assert erase_run(plain.repo, "victim", reason="deletion request").linked == ()
