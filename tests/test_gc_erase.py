"""GC and erase: deletion order under a crash at every step, erasure proven by a byte scan,
shared chunks kept for other runs, tombstones, the grace period and the lease."""

from __future__ import annotations

import datetime
import os
import shutil
import time
from pathlib import Path

import pytest

import ckptfs
from ckptfs.errors import Busy, ConflictError, ErasedError
from ckptfs.ops.erase import erase
from ckptfs.ops.gc import gc
from ckptfs.ops.lease import MaintenanceLease, break_held_lease
from ckptfs.ops.retention import Policy, forget
from ckptfs.ops.verify import verify
from ckptfs.storage.local import LocalStorage
from ckptfs.store.repository import Repository
from tests.retention_helpers import CrashingStorage, InjectedCrash, age_tree, files_containing


SHARED = "SHARED-PREFIX-CONTENT"
SECRET = "ERASE-ME-7f3a9c"


def _later() -> int:
    return int(time.time() * 1000) + 1000


def _build(root: str) -> dict[str, object]:
    """Run a (secret after seq 3), fork b of a@3, expired run c, forgotten history of a."""
    store = ckptfs.open_store(root)
    a = store.start_run("a")
    msgs = [f"{SHARED} {i} " * 30 for i in range(3)]
    for i in range(3):
        a.checkpoint({"messages": msgs[: i + 1]})
    for i in range(4):
        msgs.append(f"user said {SECRET}-{i} " * 30)
        a.checkpoint({"messages": list(msgs), "note": f"{SECRET} note {i}"},
                     entry_labels={"messages": {"pii": "true"}})
    b = store.fork("a@3", "b")
    b.checkpoint({"messages": msgs[:3] + ["b's own line " * 200]})
    b.checkpoint({"messages": msgs[:3] + ["b's own line " * 200, "b again " * 200]})
    c = store.start_run("c")
    c.checkpoint({"tmp": "short-lived " * 400}, expires_at=datetime.timedelta(seconds=-1))
    c.checkpoint({"tmp": "short-lived 2 " * 400}, expires_at=datetime.timedelta(seconds=-1))
    forget(store.repo, Policy(keep_last=2), runs=["a"])
    return {"b": store.read("b"), "a": store.read("a")}


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, object]]:
    root = str(tmp_path_factory.mktemp("tpl") / "store")
    states = _build(root)
    age_tree(root, 7200)
    return root, states


def _copy(template: str, dst: Path) -> str:
    out = str(dst / f"s{len(os.listdir(dst))}")
    shutil.copytree(template, out)
    return out


def _files(root: str) -> list[str]:
    """The store's files but its lease generations (their numbers count the reruns)."""
    return sorted(p for p in (os.path.relpath(os.path.join(d, n), root)
                              for d, _, ns in os.walk(root) for n in ns)
                  if not p.startswith("leases/"))


def _crashing(root: str, k: int | None) -> tuple[Repository, CrashingStorage]:
    cs = CrashingStorage(LocalStorage(root, durable=False), k)
    return Repository(cs), cs


def test_erase_crash_at_every_step_then_finish(
        template: tuple[str, dict[str, object]], tmp_path: Path) -> None:
    tpl, states = template
    assert files_containing(tpl, SECRET.encode())  # the scan does see the secret
    repo, cs = _crashing(_copy(tpl, tmp_path), None)
    erase(repo, "a", reason="test")
    total = cs.ops
    for k in range(total):
        root = _copy(tpl, tmp_path)
        repo, _ = _crashing(root, k)
        with pytest.raises(InjectedCrash):
            erase(repo, "a", reason="user request #1")
        store = ckptfs.open_store(root, durable=False)
        # the crashed erase's lease looks held (this very pid): break it, as an operator does
        # (a TTL of 1 ms no longer lets an erase act: a holder stops once its lease expired)
        break_held_lease(store.storage)
        assert verify(store.repo, read_data=True).ok, f"crash at mutation {k}"
        assert store.read("b") == states["b"]
        stone = erase(store.repo, "a", reason="user request #1")
        assert stone.state == "erased" and stone.reason == "user request #1"
        assert files_containing(root, SECRET.encode()) == [], f"crash at mutation {k}"
        assert files_containing(root, SHARED.encode())  # b still needs the shared prefix
        assert verify(store.repo, read_data=True).ok and store.read("b") == states["b"]
        with pytest.raises(ErasedError):
            store.resume("a")
        shutil.rmtree(root)


def test_erase_one_snapshot_fences_the_run_and_keeps_the_rest(store: ckptfs.Store) -> None:
    run = store.start_run("r")
    run.checkpoint({"x": "first"})
    run.checkpoint({"x": f"{SECRET} only here"})
    run.checkpoint({"x": "third"})
    erase(store.repo, "r", seq=2, reason="one bad message")
    with pytest.raises(ErasedError):
        store.read("r@2")
    assert store.read("r@1") == {"x": "first"} and store.read("r") == {"x": "third"}
    with pytest.raises(ErasedError):
        store.resume("r")
    with pytest.raises(ConflictError):
        run.checkpoint({"x": "more"})
    assert verify(store.repo, read_data=True).ok


def _old_garbage_and_gc_in_commit_window(root: str
                                         ) -> tuple[ckptfs.Store, list[object], CrashingStorage]:
    """A store at ``root`` holding an old garbage chunk (of "recurring content"), and a storage
    over it that runs gc once, when the first manifest is written (the chunks are handled, the
    manifest and record not); ``ran`` gets gc's report."""
    store = ckptfs.open_store(root)
    store.start_run("old").checkpoint({"blob": "recurring content " * 200})
    forget(store.repo, Policy(keep_labels=(("none", "x"),)))
    age_tree(root, 7200)  # garbage now, and old
    ran: list[object] = []

    def gc_now(op: str, path: str) -> None:
        if path.startswith("snapshots/") and not ran:
            ran.append(gc(store.repo))

    return store, ran, CrashingStorage(LocalStorage(root), None, before=gc_now)


def test_lease_blocks_a_second_maintainer_until_it_goes_stale(store: ckptfs.Store) -> None:
    store.start_run("r").checkpoint({"x": 1})
    held = MaintenanceLease(store.storage, ttl_ms=60_000).acquire()
    with pytest.raises(Busy):
        gc(store.repo)
    held.release()
    MaintenanceLease(store.storage, ttl_ms=1).acquire()  # then 'crashes' holding it
    time.sleep(0.01)
    assert gc(store.repo).problems == []


def test_whole_run_forget_is_no_fence_and_the_fence_message_says_erased(
        store: ckptfs.Store) -> None:
    """spec/retention.md "Forget rule": forgetting a whole run does not fence it (a writer
    holding its head may go on); only erasure fences, and the error says so."""
    run = store.start_run("gone")
    run.checkpoint({"x": 1})
    forget(store.repo, Policy(keep_labels=(("none", "x"),)))
    store.repo.check_not_erased("gone")  # not fenced
    assert run.checkpoint({"x": 2}).seq == 2  # the holder of the head goes on
    other = store.start_run("r")
    other.checkpoint({"x": 1})
    other.checkpoint({"x": 2})
    erase(store.repo, "r", seq=1, reason="test")
    with pytest.raises(ErasedError) as fenced:
        store.repo.check_not_erased("r")
    assert "erased" in str(fenced.value) and "forgotten" not in str(fenced.value)
