"""Crash-point enumeration beyond the scripted writer (issue 13, "Widen the enumerations"):

- a fork whose first snapshot reuses its parent's blob, and a stored blob of one run
  checkpointed into another (chunks a commit names without writing them);
- ``erase --snapshot`` of a run that shares chunks between its snapshots;
- ``copy`` into a destination that already holds an older copy of the runs, its own run, a run
  the source has since erased and a range the source has since forgotten.

Each dies at every storage operation (before it, after it, and torn for a write on local disk),
then a fresh process (a clean Storage) checks: the store verifies with its data read; heads
and states are exactly what was committed (the in-flight commit may or may not have landed);
the interrupted erase or copy, run again, finishes, and then the erased data is gone, every
other snapshot is intact and a further run changes nothing.

Default: local disk, at every operation that changes the store (a death at a read or listing
leaves the same store as one just after the change before it, so those add no new state to
check: they only cost time). ``CKPTFS_CRASH_LONG=1``: every operation, reads and listings
included, on local disk and memory://.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fsspec
import pytest
import zstandard

import ckptfs
from ckptfs.errors import ErasedError, NotFound
from ckptfs.ops.copy import copy_runs
from ckptfs.ops.erase import erase
from ckptfs.ops.lease import break_held_lease
from ckptfs.ops.retention import Policy, forget
from ckptfs.ops.verify import verify
from ckptfs.storage import Storage
from ckptfs.store.repository import Repository
from tests.conftest import TALLY
from tests.faults import Crash, FaultyStorage
from tests.test_crash_points import (  # noqa: F401  (scratch: the same tmpfs fixture)
    SMALL,
    Journal,
    check_after_crash,
    fresh,
    payload,
    reopen,
    scratch,
)

LONG = bool(os.environ.get("CKPTFS_CRASH_LONG"))
KINDS = ["local", "memory"] if LONG else ["local"]
MUTATIONS = {"write", "create", "replace", "delete"}
SECRET = b"CRASH-ERASE-SECRET-5d1e"
SHARED = "shared history line " * 40


def holding(storage: Storage, marker: bytes) -> list[str]:
    """Every object of the store whose bytes, or zstd payload, contain ``marker``."""
    dctx = zstandard.ZstdDecompressor()
    out = []
    for path in storage.scan(""):
        data = storage.read(path)
        hay = [data]
        if data[:1] == b"\x01":
            with contextlib.suppress(zstandard.ZstdError):
                hay.append(dctx.decompress(data[1:], max_output_size=64 << 20))
        if any(marker in h for h in hay):
            out.append(path)
    return out


def load(kind: str, template: Path, scratch: Path) -> str:
    """A fresh store location holding a copy of the local store ``template``."""
    url = fresh(kind, scratch)
    if kind == "local":
        shutil.copytree(template, url)
        return url
    st = reopen(kind, url)
    for d, _, names in os.walk(template):
        for n in names:
            p = os.path.join(d, n)
            with open(p, "rb") as f:
                st.write(os.path.relpath(p, template), f.read())
    return url


def drop(kind: str, url: str) -> None:
    if kind == "memory":  # memory:// lists by scanning every object it holds
        with contextlib.suppress(FileNotFoundError):
            fsspec.filesystem("memory").rm(url, recursive=True)
    else:
        shutil.rmtree(url, ignore_errors=True)


def unlease(storage: Storage) -> None:
    """Remove the maintenance lease a dead process left (what ``--break-lease`` is for; a
    crashed copy's erase holds the default lease, issue 13 #10 is handled elsewhere)."""
    for name in storage.list("leases/maintenance"):
        storage.delete(f"leases/maintenance/{name}")


def every_crash(kind: str, prepare: Callable[[], str], doomed: Callable[[Storage], None],
                check: Callable[[Storage, str], None]) -> int:
    """Run ``doomed`` on a store ``prepare`` makes, dying at each storage operation in each
    way; ``check`` the store a fresh process finds. Returns the number of crash points."""
    url = prepare()
    counting = FaultyStorage(reopen(kind, url))
    doomed(counting)
    drop(kind, url)
    plan = [(k, mode) for k, (op, has_data) in enumerate(counting.log)
            if LONG or op in MUTATIONS
            for mode in ("before", "after", "tear")
            if mode != "tear" or (has_data and kind == "local")]
    finished = 0
    for k, mode in plan:
        url = prepare()
        faulty = FaultyStorage(reopen(kind, url), fail_at=k, mode=mode)
        try:
            doomed(faulty)
        except Crash:
            pass
        else:
            # this run made fewer operations than the counting one: copy uploads packs on a
            # thread while it creates records, and reuses a lease look only within the check
            # window, so its operations can depend on timing. The finished store is checked
            # like a crashed one; most points must still crash
            finished += 1
        check(reopen(kind, url), f"op {k}: {faulty.crashed_in}")
        drop(kind, url)
    assert finished <= len(plan) // 10, f"{finished} of {len(plan)} runs ended before their op"
    return len(plan) - finished


def _tally(name: str, kind: str, n: int) -> None:
    TALLY[f"crash:{name}:{kind}"] += n
    TALLY["crash points (issue 13 scenarios)"] += n
    print(f"\ncrash points, {name} on {kind}: {n}")


# -- chunks a commit names without writing them ---------------------------------------------------
def script_reuse(store: ckptfs.Store, j: Journal) -> None:
    """A fork whose first snapshot reuses the parent's blob; a stored blob of one run
    checkpointed into another run."""
    main = store.start_run("main")
    j.commit(main, {"step": 0, "blob": ckptfs.Blob(payload(1)), "text": SHARED})
    j.commit(main, {"step": 1, "blob": ckptfs.Blob(payload(2)), "text": SHARED})
    fork = store.fork("main@2", "fork")
    state = fork.state
    assert isinstance(state["blob"], ckptfs.StoredBlob)
    j.commit(fork, {**state, "step": "forked"})
    borrowed = store.read("main@1")["blob"]
    other = store.start_run("other")
    j.commit(other, {"borrowed": borrowed, "step": 0})
    j.commit(other, {"borrowed": borrowed, "again": fork.state["blob"], "step": 1})


@pytest.mark.parametrize("kind", KINDS)
def test_every_crash_point_of_reused_and_borrowed_blobs(kind: str, scratch: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    # writers only: a check window no step outlasts (spec/v2.md 5.4), so that every run makes
    # the same storage operations (as in tests/test_crash_points.py)
    monkeypatch.setenv("CKPTFS_CHECK_WINDOW_MS", "60000")
    journals: list[Journal] = []

    def doomed(st: Storage) -> None:
        journals.append(Journal())
        script_reuse(ckptfs.Store(st, chunker=SMALL), journals[-1])

    def check(st: Storage, where: str) -> None:
        check_after_crash(st, journals[-1], where, effects=False)

    n = every_crash(kind, lambda: fresh(kind, scratch), doomed, check)
    assert n >= min_points()
    _tally("reused blobs", kind, n)


def min_points() -> int:
    """A meaningful enumeration: a commit is one object (its record), so a script of a few
    commits and one operation makes at least this many storage operations."""
    return 15


# -- erase --snapshot ---------------------------------------------------------------------------
def _erase_template(root: Path) -> dict[int, dict[str, Any]]:
    store = ckptfs.open_store(str(root), chunker=SMALL)
    run = store.start_run("r")
    states = {1: {"i": 1, "text": SHARED, "blob": ckptfs.Blob(payload(3))},
              2: {"i": 2, "text": SHARED, "secret": (SECRET * 300).decode()},
              3: {"i": 3, "text": SHARED + "more " * 20}}
    for seq in (1, 2, 3):
        run.checkpoint(states[seq])
    other = store.start_run("other")
    other.checkpoint({"text": SHARED, "own": "other's line " * 30})
    return {s: store.read(f"r@{s}") for s in states} | {0: store.read("other")}


@pytest.mark.parametrize("kind", KINDS)
def test_every_crash_point_of_erasing_one_snapshot(kind: str, scratch: Path) -> None:
    template = scratch / "erase-template"
    states = _erase_template(template)

    def doomed(st: Storage) -> None:
        erase(Repository(st), "r", seq=2, reason="crash test")

    def check(st: Storage, where: str) -> None:
        store = ckptfs.Store(st)
        report = verify(store.repo, read_data=True)
        assert report.ok, (where, report.problems)
        assert store.read("r@1") == states[1] and store.read("r@3") == states[3], where
        assert store.read("other") == states[0], where
        try:  # not yet fenced, or already gone; never half-readable
            assert store.read("r@2") == states[2], where
        except NotFound:
            pass
        # the crashed erase's lease looks held (this very pid): break it, as an operator does
        # (a TTL of 1 ms no longer lets an erase act: a holder stops once its lease expired)
        break_held_lease(st)
        stone = erase(store.repo, "r", seq=2, reason="crash test")  # the rerun finishes
        assert stone.state == "erased", where
        assert holding(st, SECRET) == [], where
        with pytest.raises(ErasedError):
            store.read("r@2")
        assert store.repo.seqs("r") == [1, 3], where
        assert store.read("r@1") == states[1] and store.read("r@3") == states[3], where
        assert store.read("other") == states[0], where
        assert verify(store.repo, read_data=True).ok, where

    n = every_crash(kind, lambda: load(kind, template, scratch), doomed, check)
    assert n >= 30
    _tally("erase --snapshot", kind, n)


# -- copy into a non-empty destination ---------------------------------------------------------
def _copy_template(root: Path) -> dict[str, Any]:
    """``src``: runs r (4 snapshots, r@1 since forgotten) and e (since erased); ``dst``: a copy
    of both taken when r had 2 snapshots, plus its own run ``mine``. Default chunker: a few
    chunks per value are enough for every kind of step."""
    src, dst = str(root / "src"), str(root / "dst")
    s = ckptfs.open_store(src)
    r = s.start_run("r")
    for i in (1, 2):
        r.checkpoint({"i": i, "text": SHARED, "blob": ckptfs.Blob(payload(i))})
    e = s.start_run("e")
    e.checkpoint({"secret": (SECRET * 300).decode(), "text": SHARED})
    e.checkpoint({"secret": (SECRET * 301).decode()})
    assert copy_runs(s.repo, ckptfs.open_store(dst).repo).ok
    d = ckptfs.open_store(dst)
    d.start_run("mine").checkpoint({"mine": True, "text": SHARED})
    r = s.resume("r")
    for i in (3, 4):
        r.checkpoint({"i": i, "text": SHARED, "blob": ckptfs.Blob(payload(i % 2 + 5))})
    forget(s.repo, Policy(keep_last=3), runs=["r"])
    erase(s.repo, "e", reason="user request")
    return {"ids": {x.seq: x.id for x in s.snapshots("r")},
            "states": {x.seq: s.read(x) for x in s.snapshots("r")},
            "e": {x.seq: d.read(x) for x in d.snapshots("e")}, "mine": d.read("mine")}


@pytest.mark.parametrize("mirror", [False, True], ids=["backup", "mirror"])
@pytest.mark.parametrize("kind", KINDS)
def test_every_crash_point_of_copy_into_a_non_empty_destination(kind: str, scratch: Path,
                                                                 mirror: bool) -> None:
    """A backup copy keeps r@1, which the source forgot; a mirror copy forgets it there too
    (a v2 destination keeps the record as a stray: its gc deals with it)."""
    template = scratch / "copy-template"
    want = _copy_template(template)
    src = ckptfs.open_store(str(template / "src"))
    assert sorted(want["ids"]) == [2, 3, 4]
    done = [2, 3, 4] if mirror else [1, 2, 3, 4]

    def doomed(st: Storage) -> None:
        copy_runs(src.repo, Repository(st), mirror=mirror)

    def same_r(store: ckptfs.Store, seqs: list[int], where: str) -> None:
        for seq in seqs:
            snap = store.get(f"r@{seq}")
            assert snap.id == want["ids"].get(seq, snap.id), where
            assert store.read(snap) == want["states"].get(seq, store.read(snap)), where

    def check(st: Storage, where: str) -> None:
        store = ckptfs.Store(st)
        report = verify(store.repo, read_data=True)
        assert report.ok, (where, report.problems)
        assert store.read("mine") == want["mine"], where
        seqs = store.repo.seqs("r")  # what was there (less the forgotten seq), plus a prefix
        assert 2 in seqs and set(seqs) <= {1, 2, 3, 4}, (where, seqs)
        assert mirror or 1 in seqs, (where, seqs)
        assert [s for s in seqs if s > 2] == [3, 4][: len([s for s in seqs if s > 2])], where
        same_r(store, seqs, where)
        e_seqs = store.repo.seqs("e")
        assert e_seqs in ([], [1, 2]), (where, e_seqs)
        for seq in e_seqs:  # not erased yet: whole
            assert store.read(f"e@{seq}") == want["e"][seq], where
        unlease(st)
        rep = copy_runs(src.repo, store.repo, mirror=mirror)  # the rerun finishes
        assert rep.ok, (where, rep.conflicts)
        assert store.repo.seqs("r") == done, where
        same_r(store, [2, 3, 4], where)
        with pytest.raises(ErasedError):
            store.read("e")
        assert holding(st, SECRET) == [], where
        assert store.read("mine") == want["mine"], where
        assert verify(store.repo, read_data=True).ok, where
        again = copy_runs(src.repo, store.repo, mirror=mirror)
        assert again.ok and again.snapshots_copied == again.chunks_copied == 0, where
        assert again.life.controls_written == 0 and again.life.erased == [], where

    n = every_crash(kind, lambda: load(kind, template / "dst", scratch), doomed, check)
    assert n >= min_points()
    _tally("copy into a non-empty destination", kind, n)
