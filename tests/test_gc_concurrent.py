"""GC and forget beside live writers in other processes: every interleaving the scheduler
produces must leave a store that verifies, and the writers' heads must stay restorable."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import ckptfs
from ckptfs.ops.gc import gc
from ckptfs.ops.retention import Policy, forget
from ckptfs.ops.verify import verify
from tests.retention_helpers import age_tree
from tests.retention_writer import POOL

STEPS = 60


def test_gc_beside_writers_in_other_processes(tmp_path: Path) -> None:
    root = str(tmp_path / "store")
    store = ckptfs.open_store(root, durable=False)
    old = store.start_run("old")  # garbage the writers will re-create: its chunks are old
    for k, block in enumerate(POOL):
        old.checkpoint({"pool": block, "k": k})
    forget(store.repo, Policy(keep_labels=(("none", "x"),)))
    age_tree(root, 7200)
    repo_root = Path(__file__).resolve().parent.parent
    writers = [subprocess.Popen([sys.executable, "-m", "tests.retention_writer", root, f"w{i}",
                                 str(STEPS)], cwd=repo_root, stdout=subprocess.PIPE, text=True)
               for i in range(2)]
    rounds = deleted = 0
    while any(w.poll() is None for w in writers) or rounds < 3:
        forget(store.repo, Policy(keep_last=2), runs=[r for r in store.runs() if r != "old"])
        report = gc(store.repo, grace_ms=60_000)
        deleted += report.chunks_deleted + report.manifests_deleted
        check = verify(store.repo)
        assert check.ok, (rounds, check.problems)
        rounds += 1
    # one round after both writers ended: on a quiet machine they can finish inside a single
    # round, and the loop above then never saw their last snapshots (the bound below failed)
    forget(store.repo, Policy(keep_last=2), runs=[r for r in store.runs() if r != "old"])
    gc(store.repo, grace_ms=60_000)
    rounds += 1
    outs = [w.communicate()[0] for w in writers]
    assert [w.returncode for w in writers] == [0, 0] and outs == [f"{STEPS}\n"] * 2
    assert deleted > 0  # gc did collect garbage while the writers ran
    assert verify(store.repo, read_data=True).ok
    for i in range(2):
        state = store.read(f"w{i}")
        assert state["i"] == STEPS - 1 and state["pool"] == POOL[(STEPS - 1) % len(POOL)]
        assert len(store.repo.seqs(f"w{i}")) <= 3 + 2 * rounds  # forget kept up
