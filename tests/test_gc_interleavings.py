"""GC and forget at every point of a writer's storage operations (issue 5).

The writer re-creates chunks that already lie in the store as old garbage (a forgotten run's
content), so it finds them present and relies on them: the dangerous case for a collector. For
every storage operation k of a scripted writer (checkpoints, a resume, more checkpoints), and
for every pair of operations, a full `forget` + `gc` runs just before them, from another store
object, as another process would: over a thousand interleavings. After each one the store
must verify with every byte read, the writer's final state must restore exactly, and a last
gc must leave it verifying. CKPTFS_GC_INTERLEAVINGS=single runs the single points only.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import ckptfs
from ckptfs.format.digest import Digest
from ckptfs.ops.chunks import snapshot_chunks
from ckptfs.ops.gc import gc
from ckptfs.ops.retention import Policy, forget
from ckptfs.ops.verify import verify
from ckptfs.runtime.store import Store
from ckptfs.storage.local import LocalStorage
from tests.faults import FaultyStorage
from tests.retention_helpers import age_tree
from tests.retention_writer import POOL

T = TypeVar("T")


class Interleaved(FaultyStorage):
    """Counts operations like FaultyStorage and runs ``hook`` before the chosen ones."""

    def __init__(self, inner: LocalStorage, at: set[int], hook: Callable[[], None]) -> None:
        super().__init__(inner)
        self.at, self.hook = at, hook

    def _op(self, name: str, path: str, do: Callable[[], T], data: bytes | None = None) -> T:
        if self.ops in self.at:
            self.hook()
        self.ops += 1
        self.log.append((name, data is not None))
        return do()


def make_template(root: Path) -> None:
    store = ckptfs.open_store(str(root), durable=False)
    old = store.start_run("old")
    for k, block in enumerate(POOL):
        old.checkpoint({"pool": block, "k": k})
    forget(store.repo, Policy(keep_labels=(("none", "x"),)))  # all but old's head: garbage
    age_tree(str(root), 7200)


def write_script(store: Store) -> dict[str, Any]:
    """The writer: checkpoints reusing pool blocks, a resume, more checkpoints."""
    run = store.start_run("w")
    msgs: list[str] = []
    state: dict[str, Any] = {}
    for i in range(6):
        msgs.append(f"step {i} " * 40)
        state = {"messages": list(msgs), "pool": POOL[i % len(POOL)], "i": i}
        run.checkpoint(state)
    run = store.resume("w")
    for i in range(6, 8):
        msgs.append(f"step {i} " * 40)
        state = {"messages": list(msgs), "pool": POOL[i % len(POOL)], "i": i}
        run.checkpoint(state)
    return state


def maintenance(root: Path) -> None:
    other = ckptfs.open_store(str(root), durable=False)
    if "w" in other.runs():
        forget(other.repo, Policy(keep_last=2), runs=["w"])
    gc(other.repo, grace_ms=60_000)


def one_interleaving(template: Path, root: Path, at: set[int]) -> int:
    shutil.copytree(template, root, copy_function=shutil.copy2)
    storage = Interleaved(LocalStorage(str(root), durable=False), at, lambda: maintenance(root))
    expected = write_script(Store(storage))
    check = verify(ckptfs.open_store(str(root)).repo, read_data=True)
    assert check.ok, (sorted(at), check.problems)
    assert ckptfs.open_store(str(root)).read("w") == expected, sorted(at)
    gc(ckptfs.open_store(str(root)).repo, grace_ms=60_000)
    assert verify(ckptfs.open_store(str(root)).repo, read_data=True).ok, sorted(at)
    assert ckptfs.open_store(str(root)).read("w") == expected, sorted(at)
    shutil.rmtree(root)
    return storage.ops


def test_gc_at_every_point_of_a_writer(tmp_path: Path) -> None:
    template = tmp_path / "template"
    make_template(template)
    total = one_interleaving(template, tmp_path / "dry", set())
    assert total > 30  # the script really exercises the storage
    points = [{k} for k in range(total)]
    if os.environ.get("CKPTFS_GC_INTERLEAVINGS") != "single":
        points += [{a, b} for a in range(total) for b in range(a + 1, total)]
    for i, at in enumerate(points):
        one_interleaving(template, tmp_path / f"s{i}", at)
    print(f"gc interleavings checked: {len(points)} over {total} writer operations")


def test_interleaving_hook_runs_where_asked(tmp_path: Path) -> None:
    """The harness itself: the hook fires exactly before the chosen operations."""
    seen: list[int] = []
    root = tmp_path / "s"
    storage = Interleaved(LocalStorage(str(root), durable=False), {0, 3},
                          lambda: seen.append(storage.ops))
    write_script(Store(storage))
    assert seen == [0, 3]


def reckless_collect(root: Path) -> None:
    """A collector that breaks the rules: no lease (writers cannot see it), no grace period."""
    repo = ckptfs.open_store(str(root), durable=False).repo
    live = {c.digest for r in repo.run_ids() for s in repo.snapshots(r)
            for _, c in snapshot_chunks(repo, s)}
    for path in repo.storage.scan("chunks"):
        if Digest.parse(path.rsplit("/", 1)[-1]) not in live:
            repo.storage.delete(path)


def test_a_collector_that_ignores_the_rules_is_caught(tmp_path: Path) -> None:
    """The check can fail: collecting with no lease and no grace while the writer runs breaks
    its store. (gc with grace 0 does not: the writers' handshake restores what it took.)"""
    template = tmp_path / "template"
    make_template(template)
    root = tmp_path / "s"
    shutil.copytree(template, root, copy_function=shutil.copy2)
    total = one_interleaving(template, tmp_path / "dry", set())
    failures = 0
    for at in range(total):
        shutil.rmtree(root, ignore_errors=True)
        shutil.copytree(template, root, copy_function=shutil.copy2)

        def reckless() -> None:
            reckless_collect(root)

        storage = Interleaved(LocalStorage(str(root), durable=False), {at}, reckless)
        try:
            write_script(Store(storage))
            ok = verify(ckptfs.open_store(str(root)).repo, read_data=True).ok
        except ckptfs.errors.CkptfsError:
            ok = False
        failures += not ok
    assert failures > 0
