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
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import ckptfs
from ckptfs.errors import ConflictError
from ckptfs.ops.verify import verify
from ckptfs.storage.local import LocalStorage
from ckptfs.storage.local_caps import PORTABLE
from tests.conftest import TALLY

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
    link.write("warm/link", b"probe")
    lock.write("warm/lock", b"probe")
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
