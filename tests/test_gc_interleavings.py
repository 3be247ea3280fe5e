"""GC and forget at every point of a writer's storage operations (issue 5).

The writer re-creates chunks that already lie in the store as old garbage (a forgotten run's
content), so it finds them present and relies on them: the dangerous case for a collector. For
every storage operation k of a scripted writer (checkpoints, a resume, more checkpoints), and
for pairs of operations (every neighbouring pair and a seeded sample of 120 others by default;
every pair, over a thousand interleavings, with --long), a full `forget` + `gc` runs just before
them, from another store object, as another process would. After each one the store
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
from ckptfs.ops.gc import gc
from ckptfs.ops.retention import Policy, forget, forget_snapshots
from ckptfs.ops.verify import verify
from ckptfs.runtime.store import Store
from ckptfs.storage.local import LocalStorage
from ckptfs.store.repository import Repository
from tests.faults import FaultyStorage
from tests.retention_helpers import age_tree
from tests.retention_writer import POOL
from tests.sampling import long_run, sample

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
    # the script really exercises the storage (v2 stores with the check window, spec/v2.md 5.4,
    # reuse the lease and retired listings of commits that follow quickly: 28-40 operations)
    assert total > 24, total
    points = [{k} for k in range(total)]
    if os.environ.get("CKPTFS_GC_INTERLEAVINGS") != "single":
        # every single point, every pair of neighbours, and a seeded sample of the other pairs
        # (all of them with --long: about 1,800)
        points += [{a, a + 1} for a in range(total - 1)]
        points += [set(p) for p in sample([(a, b) for a in range(total)
                                           for b in range(a + 2, total)], 120, seed="gc-pairs")]
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


# -- widened (issue 13): forks, cross-run stored blobs, and windows inside gc -------------------
# A second template: run "src" holds a blob and old garbage; the writer forks src's head into
# "f", checkpoints a blob stored by src into a new run "x", and goes on. The collector forgets
# all of src (its blob becomes garbage that only the writer's commits name) and collects. Two
# kinds of schedule: the collector at every point (and, with CKPTFS_GC_INTERLEAVINGS=long,
# every pair of points) of the writer; and each of the writer's commits at every point of a
# collector (the commit runs in a thread started just before that collector operation, and may
# wait for the sweep to end, as the handshake says).
SRC_BLOB = bytes(range(256)) * 1200  # 300 KiB: several chunks


def make_fork_template(root: Path) -> None:
    store = ckptfs.open_store(str(root), durable=False)
    src = store.start_run("src")
    for k, block in enumerate(POOL):
        src.checkpoint({"pool": block, "blob": ckptfs.Blob(SRC_BLOB), "k": k})
    forget(store.repo, Policy(keep_last=1))
    age_tree(str(root), 7200)


class Armed(Interleaved):
    """Interleaved, but the hook does nothing before the script says it is ready (it must first
    restore from src, which the collector forgets)."""

    ready_at: int | None = None

    def _op(self, name: str, path: str, do: Callable[[], T], data: bytes | None = None) -> T:
        if self.ready_at is None:
            self.ops += 1
            return do()
        return super()._op(name, path, do, data)


#: what a commit may answer instead of committing: the objects it names were collected before
#: it could write them again (MissingObject), or a sweep took them after its record and it could
#: not restore them (ConflictError: withdrawn). Never a reported commit that is then lost.
REFUSED = (ckptfs.errors.MissingObject, ckptfs.errors.ConflictError)
OUTCOMES = {"reported": 0, "refused": 0}


def fork_script(store: Store, ready: Callable[[], None], out: dict[str, Any]) -> None:
    """Fork src's head, store src's blob into run x, checkpoint both; ``out`` gets each run's
    last reported state (a refused commit ends that run's part of the script)."""
    stored = store.read("src")["blob"]
    f = store.fork("src", "f")
    ready()
    try:
        for i in range(3):
            state = {"blob": f.state["blob"], "pool": POOL[i], "i": i}
            f.checkpoint(state)
            out["f"] = state
            OUTCOMES["reported"] += 1
    except REFUSED:
        OUTCOMES["refused"] += 1
    x = store.start_run("x")
    try:
        for i in range(2):
            x.checkpoint({"blob": stored, "i": i})
            out["x"] = {"blob": stored, "i": i}
            OUTCOMES["reported"] += 1
    except REFUSED:
        OUTCOMES["refused"] += 1


def fork_maintenance(root: Path) -> None:
    other = ckptfs.open_store(str(root), durable=False)
    if "src" in other.runs():
        forget_snapshots(other.repo, {"src": set(other.repo.seqs("src"))})
    for run in ("f", "x"):
        if run in other.runs():
            forget(other.repo, Policy(keep_last=1), runs=[run])
    gc(other.repo, grace_ms=60_000)


def _check_fork_store(root: Path, expected: dict[str, Any], what: object) -> None:
    store = ckptfs.open_store(str(root))
    check = verify(store.repo, read_data=True)
    assert check.ok, (what, check.problems)
    for run, state in expected.items():
        got = store.read(run)
        assert got["i"] == state["i"] and got["blob"].read() == SRC_BLOB, (what, run)
        assert got.get("pool") == state.get("pool"), (what, run)


def one_fork_interleaving(template: Path, root: Path, at: set[int]) -> int:
    shutil.copytree(template, root, copy_function=shutil.copy2)
    storage = Armed(LocalStorage(str(root), durable=False), at, lambda: fork_maintenance(root))

    def ready() -> None:
        storage.ready_at = storage.ops

    expected: dict[str, Any] = {}
    fork_script(Store(storage), ready, expected)
    _check_fork_store(root, expected, sorted(at))
    fork_maintenance(root)
    _check_fork_store(root, expected, sorted(at))
    shutil.rmtree(root)
    assert storage.ready_at is not None
    return storage.ops


def test_gc_at_every_point_of_a_forking_writer(tmp_path: Path) -> None:
    template = tmp_path / "template"
    make_fork_template(template)
    total = one_fork_interleaving(template, tmp_path / "dry", set())
    points = [{k} for k in range(total)]
    if os.environ.get("CKPTFS_GC_INTERLEAVINGS") == "long" or long_run():
        points += [{a, b} for a in range(total) for b in range(a + 1, total)]
    for i, at in enumerate(points):
        one_fork_interleaving(template, tmp_path / f"s{i}", at)
    print(f"gc interleavings (fork + stored blob writer): {len(points)} over {total} operations;"
          f" commits reported {OUTCOMES['reported']} (all read back), refused "
          f"{OUTCOMES['refused']}")


class CommitInside(FaultyStorage):
    """The collector's storage: just before its operation ``at``, the writer's next commit
    starts in a thread; the collector goes on once the commit returned or waits for the sweep."""

    def __init__(self, inner: LocalStorage, at: int, commit: Callable[[], Any],
                 writer: Store) -> None:
        super().__init__(inner)
        self.at, self.commit, self.writer = at, commit, writer
        self.beside: Any = None

    def _op(self, name: str, path: str, do: Callable[[], T], data: bytes | None = None) -> T:
        if self.ops == self.at:
            from tests.test_gc_races import Beside

            self.beside = Beside(self.writer, self.commit)
        return super()._op(name, path, do, data)


def _inside_gc(template: Path, root: Path, at: int | None, script: str) -> int:
    """Run the writer up to one commit, then that commit at collector operation ``at``, then
    the rest; returns the collector's operation count."""
    shutil.copytree(template, root, copy_function=shutil.copy2)
    writer = ckptfs.open_store(str(root), durable=False)
    expected: dict[str, Any] = {}
    if script == "fork":
        stored = writer.read("src")["blob"]
        f = writer.fork("src", "f")
        expected["f"] = {"blob": f.state["blob"], "pool": POOL[0], "i": 0}
        expected["x"] = {"blob": stored, "i": 0}
        x = writer.start_run("x")

        def commit() -> None:
            for run, r in (("f", f), ("x", x)):
                try:
                    r.checkpoint(expected[run])
                except REFUSED:
                    del expected[run]
                    OUTCOMES["refused"] += 1
    else:
        w = writer.start_run("w")
        w.checkpoint({"pool": POOL[0], "i": -1})
        state = {"pool": POOL[1], "p2": POOL[2], "i": 0}
        expected["w"] = state

        def commit() -> None:
            w.checkpoint(state)
    maint = ckptfs.open_store(str(root), durable=False)
    if script == "fork":
        forget_snapshots(maint.repo, {"src": set(maint.repo.seqs("src"))})
    coll = CommitInside(LocalStorage(str(root), durable=False), -1 if at is None else at,
                        commit, writer)
    if at is None:
        commit()
    gc(Repository(coll), grace_ms=60_000)
    if coll.beside is not None:
        coll.beside.done()
    elif at is not None:
        commit()  # the collector finished before operation ``at``
    store = ckptfs.open_store(str(root))
    check = verify(store.repo, read_data=True)
    assert check.ok, (script, at, check.problems)
    for run, st in expected.items():
        got = store.read(run)
        for k, v in st.items():
            got_v = got[k].read() if k == "blob" else got[k]
            want = v.read() if isinstance(v, ckptfs.StoredBlob) else v
            assert got_v == want, (script, at, run, k)
    gc(ckptfs.open_store(str(root), durable=False).repo, grace_ms=60_000)
    assert verify(ckptfs.open_store(str(root)).repo, read_data=True).ok, (script, at)
    shutil.rmtree(root)
    return coll.ops


def test_a_commit_at_every_point_of_gc(tmp_path: Path) -> None:
    """Inside gc: between its mark and its announcement, between the announcement and its
    second mark, between each age check and its delete, and so on: every operation."""
    count = 0
    for script, make in (("plain", make_template), ("fork", make_fork_template)):
        template = tmp_path / f"template-{script}"
        make(template)
        total = _inside_gc(template, tmp_path / "dry", None, script)
        assert total > 10
        for at in range(total + 1):
            _inside_gc(template, tmp_path / f"{script}{at}", at, script)
        count += total + 1
    print(f"gc-internal windows: {count} collector operations, one commit at each")
