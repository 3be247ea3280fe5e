"""Writers of both local create-only modes on one store (issue 30, defect 2).

The mode is chosen per process (``CKPTFS_LOCAL_MODE=portable``, ``local_mode=``,
``CKPTFS_LOCAL_DISABLE=link``) and the store records none, so a link-mode writer (no lock,
``link(2)``) and a filelock-mode writer (the folder's lock) can commit to one run. The schedule
that lost a commit: the filelock writer found the record's name absent under its lock and was
descheduled; the link writer, which takes no lock, linked its record there; the filelock writer
then renamed its own over it. Both were told OK for one seq and the link writer's commit was
gone. Here that schedule is forced: the link writer commits at the last moment before the
filelock writer's create takes effect (just before its rename or link of that name).
"""

from __future__ import annotations

import contextlib
import os
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import ckptfs
from ckptfs.errors import ConflictError, StorageError
from ckptfs.ops.verify import verify
from ckptfs.storage.local import LocalStorage
from ckptfs.storage.local_caps import PORTABLE
from tests.conftest import TALLY
from tests.test_local_portable import swap_link_in_at_open

RECORD = "runs/r/00000000000000000001"
#: the ways a process turns link mode off: each must still never replace a link writer's create
FILELOCK_SETTINGS = {"portable": PORTABLE, "disable-link": frozenset({"link"})}


@contextlib.contextmanager
def just_before_create_of(monkeypatch: pytest.MonkeyPatch, final: str,
                          competitor: Callable[[], None]) -> Iterator[list[bool]]:
    """Run ``competitor`` once, at the last moment before a rename or link whose target is
    ``final`` (the create's own check, if any, is done by then); the list says whether it ran.
    The competitor's own link of ``final`` passes through."""
    fired: list[bool] = []

    def wrap(real: Callable[..., Any]) -> Callable[..., Any]:
        def call(src: Any, dst: Any, *a: Any, **k: Any) -> Any:
            if os.fspath(dst) == final and not fired:
                fired.append(True)
                competitor()
            return real(src, dst, *a, **k)

        return call

    monkeypatch.setattr(os, "rename", wrap(os.rename))
    monkeypatch.setattr(os, "link", wrap(os.link))
    try:
        yield fired
    finally:
        monkeypatch.undo()


def _writers(root: Path, filelock: frozenset[str]) -> tuple[LocalStorage, LocalStorage]:
    """A link-mode and a filelock-mode writer of one store, both probed already."""
    link, lock = LocalStorage(str(root), disable=()), LocalStorage(str(root), disable=filelock)
    link.write("tmp/warm-link", b"probe")  # a folder of the store's
    lock.write("tmp/warm-lock", b"probe")
    assert link.features.link and not lock.features.link
    return link, lock


@pytest.mark.parametrize("setting", sorted(FILELOCK_SETTINGS))
@pytest.mark.parametrize("op", ["create", "commit"])
def test_a_filelock_create_never_replaces_a_link_writers_create(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, op: str, setting: str) -> None:
    """Storage level, both exclusive creates (``create``: config, maintenance lease
    generations; ``commit``: run records): exactly one writer is told it created the name,
    and the name holds that writer's bytes. Before the fix both were told so and the
    filelock writer's bytes replaced the link writer's."""
    link, lock = _writers(tmp_path / "s", FILELOCK_SETTINGS[setting])
    told: dict[str, str] = {}

    def attempt(who: str, fn: Callable[[], None]) -> None:
        try:
            fn()
            told[who] = "created"
        except FileExistsError:
            told[who] = "exists"

    def link_writer() -> None:
        attempt("link", lambda: link.create(RECORD, b"link writer"))

    final = os.path.join(lock.root, *RECORD.split("/"))
    with just_before_create_of(monkeypatch, final, link_writer) as fired:
        if op == "create":
            attempt("filelock", lambda: lock.create(RECORD, b"filelock writer"))
        else:
            attempt("filelock", lambda: lock.commit([("chunks/ab/x", b"obj")], RECORD,
                                                    b"filelock writer"))
    assert fired, "the schedule did not happen"
    winners = [who for who, what in told.items() if what == "created"]
    assert len(winners) == 1, told
    assert lock.read(RECORD) == f"{winners[0]} writer".encode()
    assert told == {"link": "created", "filelock": "exists"}  # the link writer was first
    TALLY["mixed-mode schedules: filelock create after a link writer's"] += 1


@pytest.mark.parametrize("setting", sorted(FILELOCK_SETTINGS))
def test_a_filelock_commit_descheduled_before_its_create_loses_no_commit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, setting: str) -> None:
    """Store level, as two processes of different environments would: both resume the run at
    seq 1 and commit seq 2; the link writer commits while the filelock writer is between its
    check and its create. Exactly one is told OK, its state is what seq 2 reads back, and the
    other gets ConflictError. Before the fix both were told OK and the link writer's commit
    was lost (seq 2 read back the filelock writer's state)."""
    link_s, lock_s = _writers(tmp_path / "s", FILELOCK_SETTINGS[setting])
    via_link, via_lock = ckptfs.Store(link_s), ckptfs.Store(lock_s)
    via_lock.start_run("r").checkpoint({"n": 1})
    run_link, run_lock = via_link.resume("r"), via_lock.resume("r")
    told: dict[str, Any] = {}

    def attempt(who: str, run: ckptfs.Run, state: dict[str, Any]) -> None:
        try:
            told[who] = run.checkpoint(state).seq
        except ConflictError:
            told[who] = "conflict"

    final = os.path.join(lock_s.root, "runs", "r", "00000000000000000002")
    with just_before_create_of(monkeypatch, final,
                               lambda: attempt("link", run_link, {"n": "link"})) as fired:
        attempt("filelock", run_lock, {"n": "filelock"})
    assert fired, "the schedule did not happen"
    ok = [who for who, seq in told.items() if seq == 2]
    assert len(ok) == 1, f"seq 2 reported to {told}"
    assert told == {"link": 2, "filelock": "conflict"}
    fresh = ckptfs.Store(LocalStorage(str(tmp_path / "s")))
    assert [s.seq for s in fresh.snapshots("r")] == [1, 2]
    assert fresh.read("r@2") == {"n": "link"}
    assert verify(fresh.repo, read_data=True).ok


# -- objects hard-linked from outside the store (issue 30, defect 10) ---------------------------
BIG = random.Random(30).randbytes(3 << 20)


def _store_with_a_pack(root: Path) -> tuple[ckptfs.Store, str]:
    """A store whose run "r" reads a pack; the pack's store path."""
    big = root.parent / "big"
    big.write_bytes(BIG)
    store = ckptfs.open_store(str(root))
    run = store.start_run("r")
    run.checkpoint({"blob": ckptfs.Blob(big), "n": 1})  # a streamed blob: its bodies in a pack
    run.checkpoint({"blob": ckptfs.Blob(big), "n": 2})
    packs = sorted(p for p in store.storage.scan("packs"))
    assert packs, "the blob's bodies went to a pack"
    return store, packs[0]


def _link_from_outside(root: Path, rel: str, outside: Path) -> None:
    """Give the store's file ``rel`` a second name outside the store (``ln``)."""
    os.link(root / rel, outside)


@pytest.mark.parametrize("kind", ["pack", "record", "config"])
def test_an_object_hard_linked_from_outside_is_read_and_reported(tmp_path: Path,
                                                                 kind: str) -> None:
    """A hard link is no redirection: the bytes read are the file at the store's name, checked
    by their digest as any, so readers accept it (as they must a writer's own transient second
    name). But deleting the store's name (gc, erase) leaves the bytes under the other name:
    verify reports it. Before: verify said nothing (0 problems)."""
    root = tmp_path / "s"
    store, pack = _store_with_a_pack(root)
    rel = {"pack": pack, "record": "runs/r/00000000000000000002", "config": "ckptfs.cbor"}[kind]
    _link_from_outside(root, rel, tmp_path / "outside")
    again = ckptfs.open_store(str(root))
    assert again.read("r")["n"] == 2
    assert again.read("r")["blob"].read() == BIG
    report = verify(again.repo, read_data=True)
    linked = [p for p in report.problems if rel in p.message]
    assert len(linked) == 1 and linked[0].category == "storage", report.problems
    assert "hard link" in linked[0].message and "erase" in linked[0].message
    assert len(report.problems) == 1, report.problems
    # replaced by a copy of its own (the message's advice): nothing to report
    data = (root / rel).read_bytes()
    (root / rel).unlink()
    (root / rel).write_bytes(data)
    assert verify(ckptfs.open_store(str(root)).repo, read_data=True).ok
    TALLY["hard-linked objects reported by verify"] += 1


def test_a_temp_file_left_linked_by_a_crashed_writer_is_no_problem(tmp_path: Path) -> None:
    """A writer killed between its link and the removal of its named temp file leaves the
    record with a second name in tmp/: the store's own, removed by gc's temp sweep; neither
    readers nor verify object to it."""
    root = tmp_path / "s"
    store, _ = _store_with_a_pack(root)
    os.link(root / "runs/r/00000000000000000002", root / "tmp" / "123-abcdef")
    assert ckptfs.open_store(str(root)).read("r")["n"] == 2
    report = verify(ckptfs.open_store(str(root)).repo, read_data=True)
    assert report.ok, report.problems


@pytest.mark.parametrize("setting", ["auto", "portable"])
def test_a_hint_never_writes_through_a_hard_link(tmp_path: Path, setting: str) -> None:
    """``hint`` overwrites in place (no fsync, no rename): a hint file that has another name
    outside the store must be replaced, not written through. Before: the outside file was
    truncated and overwritten."""
    s = LocalStorage(str(tmp_path / "s"), disable=PORTABLE if setting == "portable" else ())
    s.create("runs/r/00000000000000000001", b"record")
    s.hint("runs/r/head", b"old hint")
    outside = tmp_path / "outside"
    outside.write_bytes(b"precious, not the store's")
    os.unlink(tmp_path / "s" / "runs" / "r" / "head")
    os.link(outside, tmp_path / "s" / "runs" / "r" / "head")
    s.hint("runs/r/head", b"new hint")
    assert outside.read_bytes() == b"precious, not the store's"
    assert s.read("runs/r/head") == b"new hint"
    assert os.lstat(tmp_path / "s" / "runs" / "r" / "head").st_nlink == 1
    s.hint("runs/r/head", b"newer")  # an ordinary hint is still written in place
    assert s.read("runs/r/head") == b"newer"


def test_a_link_swapped_in_before_a_hints_open_is_not_written_through(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without O_NOFOLLOW (portable mode) a hint's lstat check and its open are two steps: a
    symbolic link swapped in between made the open follow it, and the hint truncated and wrote
    the link's target outside the store. Now the open does not truncate, and the name must
    still lead to the file opened before a byte is written."""
    s = LocalStorage(str(tmp_path / "s"), disable=PORTABLE)
    s.create("runs/r/00000000000000000001", b"record")
    s.hint("runs/r/head", b"old hint")
    secret = tmp_path / "secret"
    secret.write_bytes(b"outside the store")
    swap_link_in_at_open(monkeypatch, os.path.join(s.root, "runs", "r", "head"), secret)
    with pytest.raises(StorageError, match="symbolic link"):
        s.hint("runs/r/head", b"new hint")
    monkeypatch.undo()
    assert secret.read_bytes() == b"outside the store"
