"""Crash-point enumeration (ALICE/CrashMonkey style): a scripted sequence of checkpoints,
resumes and forks dies at every storage operation in turn, in every way the backend can die;
after each death a fresh process (a clean Storage) must find a store that verifies, whose heads
are the last commits that returned (or the one in flight), whose states equal what was committed,
and which accepts new commits."""

from __future__ import annotations

import collections
import contextlib
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import fsspec
import pytest

import ckptfs
from ckptfs.format.cdc import ChunkerParams
from ckptfs.ops.verify import verify
from ckptfs.runtime.effects import NOT_DONE
from ckptfs.storage import Storage, open_storage
from tests.conftest import TALLY
from tests.faults import Crash, FaultyStorage

SMALL = ChunkerParams(min_size=64, avg_size=256, max_size=1024)


@attrs.define
class Journal:
    """What the doomed process knew: commits that returned, the ones in flight (a prefix of
    which may have landed), and the outside world its effects act on (it outlives the crash)."""

    committed: dict[str, dict[int, tuple[str, dict[str, Any]]]] = attrs.field(factory=dict)
    inflight: tuple[str, list[tuple[int, dict[str, Any]]]] | None = None
    world: collections.Counter[str] = attrs.field(factory=collections.Counter)

    def commit(self, run: ckptfs.Run, state: dict[str, Any]) -> None:
        self.inflight = (run.id, [(run.seq + 1, state)])
        snap = run.checkpoint(state)
        self.committed.setdefault(run.id, {})[snap.seq] = (snap.id, state)
        self.inflight = None

    def effect(self, run: ckptfs.Run, key: str) -> None:
        """An effect commits twice (intent, result), both with the run's last state."""
        state = self.last_state(run.id)
        self.inflight = (run.id, [(run.seq + 1, state), (run.seq + 2, state)])
        assert run.effect("pay", self.charge, key, key=key) == receipt(key)
        assert run.snapshot is not None
        for seq in (run.seq - 1, run.seq):
            self.committed[run.id][seq] = ("", state)
        self.inflight = None

    def charge(self, key: str) -> str:
        self.world[key] += 1
        return receipt(key)

    def last_state(self, run_id: str) -> dict[str, Any]:
        seqs = self.committed[run_id]
        return seqs[max(seqs)][1]


def receipt(key: str) -> str:
    return f"receipt for {key}"


EFFECT_KEYS = ("pay-1", "pay-2")


def payload(i: int) -> bytes:
    return random.Random(i).randbytes(3000 + 600 * i)


def script(store: ckptfs.Store, j: Journal) -> None:
    """Checkpoints with growing history and blobs, a resume, a fork, a second resume."""
    run = store.start_run("main", schema=("agent", 1))
    msgs: list[dict[str, Any]] = []
    for i in range(4):
        msgs.append({"role": "user", "content": f"message {i} " * 30})
        j.commit(run, {"messages": list(msgs), "step": i, "blob": ckptfs.Blob(payload(i)),
                        "note": ckptfs.Blob(b"small, inline %d" % (i // 2))})
    run = store.resume("main")
    assert run.state == j.last_state("main")
    for i in range(4, 6):
        msgs.append({"role": "tool", "content": f"result {i} " * 30})
        j.commit(run, {"messages": list(msgs), "step": i, "blob": ckptfs.Blob(payload(i % 2))})
    j.effect(run, "pay-1")
    side = store.fork("main@2", "side")
    j.commit(side, {**side.state, "step": 100})
    j.commit(side, {"messages": msgs[:1], "step": 101})
    run = store.resume("main")
    j.effect(run, "pay-2")
    j.commit(run, {"messages": list(msgs), "step": 6, "done": True})


def check_after_crash(storage: Storage, j: Journal, where: str, *, effects: bool = True) -> None:
    """A fresh process opens the store and checks every promise."""
    store = ckptfs.Store(storage)
    if store.repo.load_config() is None:
        assert not j.committed and storage.list("runs") == [], where
        return
    report = verify(store.repo, read_data=True)
    assert report.ok, (where, report.problems)
    inflight_run = j.inflight[0] if j.inflight else None
    assert set(j.committed) <= set(store.runs()) <= set(j.committed) | {inflight_run}, where
    for run_id in store.runs():
        seqs = [s.seq for s in store.snapshots(run_id)]
        done = dict(j.committed.get(run_id, {}))
        if j.inflight and j.inflight[0] == run_id:  # a prefix of the in-flight commits landed
            for seq, state in j.inflight[1]:
                if seq in seqs:
                    done[seq] = ("", state)
        assert seqs == sorted(done), (where, run_id, seqs, sorted(done))
        for seq in seqs:
            snap = store.get(f"{run_id}@{seq}")
            sid, state = done[seq]
            assert not sid or snap.id == sid, where
            assert store.read(snap) == state, (where, run_id, seq)
    if effects and "main" in store.runs():  # no effect lost or performed twice
        run = store.resume("main")
        for key in EFFECT_KEYS:
            eff = run.ledger.get(key)
            if eff is None:
                assert j.world[key] == 0, (where, key)  # the intent is committed first
            elif eff.status == "completed":
                assert j.world[key] == 1, (where, key)
            else:
                assert eff.in_doubt and j.world[key] <= 1, (where, key, eff)
                TALLY["in-doubt effects reconciled"] += 1
            got = run.effect("pay", j.charge, key, key=key,
                             reconcile=lambda e: receipt(e.key) if j.world[e.key] else NOT_DONE)
            assert got == receipt(key) and j.world[key] == 1, (where, key, j.world)
    # and the run goes on: resume every head and commit once more
    for run_id in store.runs():
        run = store.resume(run_id)
        run.checkpoint({"after": "crash"})
        assert store.read(run_id) == {"after": "crash"}


def fresh(kind: str, tmp_path: Path) -> str:
    return str(tmp_path / uuid.uuid4().hex) if kind == "local" \
        else f"memory://crash-{uuid.uuid4().hex}"


def reopen(kind: str, url: str) -> Storage:
    return open_storage(url, durable=False) if kind == "local" else open_storage(url)


@pytest.fixture
def scratch(tmp_path: Path) -> Iterator[Path]:
    """A directory for hundreds of small stores: tmpfs when the host has one (a real POSIX
    filesystem with link(2), just without a disk under it), else the test's tmp_path."""
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        d = Path(tempfile.mkdtemp(prefix="ckptfs-crash-", dir="/dev/shm"))
        yield d
        shutil.rmtree(d, ignore_errors=True)
    else:
        yield tmp_path


@pytest.mark.parametrize("kind", ["local", "memory"])
def test_every_crash_point(kind: str, scratch: Path,
                           monkeypatch: pytest.MonkeyPatch) -> None:
    tmp_path = scratch
    # v2 stores: a check window no step of the script outlasts (spec/v2.md 5.4), so that every
    # run makes the same storage operations (the window's reuse of the lease and retired
    # listings depends on time): every commit after the first reuses them
    monkeypatch.setenv("CKPTFS_CHECK_WINDOW_MS", "60000")
    counting = FaultyStorage(reopen(kind, fresh(kind, tmp_path)))
    script(ckptfs.Store(counting, chunker=SMALL), Journal())
    assert counting.ops >= 50, counting.ops
    # every operation dies before and after; on local disk every write also dies torn
    plan = [(k, mode) for k, (_, has_data) in enumerate(counting.log)
            for mode in ("before", "after", "tear")
            if mode != "tear" or (has_data and kind == "local")]
    for k, mode in plan:
        url = fresh(kind, tmp_path)
        faulty = FaultyStorage(reopen(kind, url), fail_at=k, mode=mode)
        j = Journal()
        with pytest.raises(Crash):
            script(ckptfs.Store(faulty, chunker=SMALL), j)
        check_after_crash(reopen(kind, url), j, f"op {k}: {faulty.crashed_in}")
        if kind == "memory":  # memory:// lists by scanning every object it holds
            with contextlib.suppress(FileNotFoundError):
                fsspec.filesystem("memory").rm(url, recursive=True)
    TALLY[f"crash:{kind}:v2"] += len(plan)
    assert TALLY["in-doubt effects reconciled"] > 0  # crashes did land inside effects
    print(f"\ncrash points on {kind}, format v2: {len(plan)} ({counting.ops} "
          "operations)")


KILLEE = str(Path(__file__).with_name("killee.py"))


def test_sigkill_at_random_moments(tmp_path: Path) -> None:
    """Real processes killed with SIGKILL mid-run, each successor resuming the head."""
    url = str(tmp_path / "store")
    rng = random.Random(8)
    kills = 0
    last_reported = 0
    for _ in range(5):
        p = subprocess.Popen([sys.executable, KILLEE, url], stdout=subprocess.PIPE, text=True)
        assert p.stdout is not None
        first = p.stdout.readline()  # the child is up and has committed once
        assert first.startswith("committed"), first
        time.sleep(rng.uniform(0.0, 0.3))
        p.send_signal(signal.SIGKILL)
        out = first + p.stdout.read()
        p.wait()
        kills += 1
        reported = [int(line.split()[1]) for line in out.splitlines()
                    if line.startswith("committed")]
        assert reported and reported[0] == last_reported + 1
        last_reported = reported[-1]
        store = ckptfs.open_store(url)
        head = store.head("killed").seq
        assert head in (last_reported, last_reported + 1), (head, last_reported)
        assert verify(store.repo, read_data=True).ok
        from tests.killee import state_for

        assert store.read("killed") == state_for(head)
        last_reported = head
    assert kills == 5
