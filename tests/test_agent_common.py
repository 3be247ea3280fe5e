"""The agent adapters' shared layer (ckptfs.integrations.agent_common): the item log behaves
as a list under add/pop/clear, its tail reads are O(limit) objects whatever the history's
length (counted), two writers race with exactly one commit, and ToolEffects never calls a
tool twice for one call id (completed, failed, or in doubt after a process died)."""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import ckptfs
from ckptfs.errors import EffectFailed, EffectInDoubt, SessionConflict
from ckptfs.integrations.agent_common import (
    ItemLog,
    ToolEffects,
    as_store,
    forgets_done,
    run_id_for,
)
from ckptfs.storage.local import LocalStorage

#: the storage calls that read (an object, a range, a listing) or ask whether one exists
READS = ("read", "read_range", "read_range_into", "read_many", "read_ranges", "open_ranges",
         "listing", "list", "list_after", "scan", "size", "exists", "mtime")


class CountingStorage(LocalStorage):
    """Local storage that counts every read-side call (by method) while ``counting``."""

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self.calls: Counter[str] = Counter()

    def __getattribute__(self, name: str) -> Any:
        if name in READS:
            object.__getattribute__(self, "calls")[name] += 1
        return object.__getattribute__(self, name)


def _item(i: int) -> dict[str, Any]:
    return {"role": "user" if i % 2 else "assistant", "content": f"message {i}", "n": i}


def test_item_log_is_a_list(tmp_path: Path) -> None:
    """Random add/pop/clear against a Python list; a fresh reader (another Store) agrees."""
    url = str(tmp_path / "s")
    rid = run_id_for("t", "session")
    log = ItemLog(ckptfs.open_store(url), rid, key="session")
    model: list[Any] = []
    rng = random.Random(7)
    n = 0
    for step in range(120):
        r = rng.random()
        if r < 0.6:
            batch = [_item(n + j) for j in range(rng.choice([1, 1, 2, 5]))]
            n += len(batch)
            assert log.append(batch) == len(model) + len(batch)
            model += batch
        elif r < 0.95:
            assert log.pop() == (model.pop() if model else None)
        else:
            log.clear()
            model.clear()
        if step % 10 == 0:
            fresh = ItemLog(ckptfs.open_store(url), rid)
            assert fresh.tail() == model
            assert len(fresh) == len(model)
            for limit in (1, 3, 7):
                assert fresh.tail(limit) == model[-limit:]
    assert log.tail() == model
    assert ItemLog(ckptfs.open_store(url), rid).tail(4) == model[-4:]


def test_meta_entries_ride_along(tmp_path: Path) -> None:
    url = str(tmp_path / "s")
    log = ItemLog(ckptfs.open_store(url), "r1")
    log.append([_item(0)], meta={"state": {"k": 1}})
    log.append([_item(1)])
    log.pop()
    assert ItemLog(ckptfs.open_store(url), "r1").meta == {"state": {"k": 1}}
    log.append([], meta={"state": {"k": 2}})  # a meta-only commit
    fresh = ItemLog(ckptfs.open_store(url), "r1")
    assert fresh.meta == {"state": {"k": 2}} and fresh.tail() == [_item(0)]


def test_tail_reads_are_bounded(tmp_path: Path) -> None:
    """10,000 items (9,900 in pages of 100, then 100 one by one): the newest 10 cost the
    head lookup and 10 snapshot reads; the same on a log 10x shorter."""
    counts = {}
    for total, big in ((10_000, 99), (1_000, 9)):
        url = str(tmp_path / f"s{total}")
        log = ItemLog(ckptfs.open_store(url), "long")
        for p in range(big):
            log.append([_item(p * 100 + j) for j in range(100)])
        for i in range(big * 100, total):
            log.append([_item(i)])
        assert len(log) == total
        storage = CountingStorage(url)
        fresh = ItemLog(ckptfs.Store(storage), "long")
        assert fresh.tail(10) == [_item(i) for i in range(total - 10, total)]
        counts[total] = sum(storage.calls.values())
        storage.calls.clear()
        assert fresh.tail(10) == [_item(i) for i in range(total - 10, total)]
        again = sum(storage.calls.values())
        assert again <= 2, storage.calls  # pages kept, the head has not moved: one check
    print(f"\nreads for tail(10): {counts} (storage calls)")
    assert counts[10_000] == counts[1_000]
    assert counts[10_000] <= 50


def test_two_writers_one_commits(tmp_path: Path) -> None:
    url = str(tmp_path / "s")
    a = ItemLog(ckptfs.open_store(url), "r")
    a.append([_item(0)])
    b = ItemLog(ckptfs.open_store(url), "r")
    assert a.tail() == b.tail() == [_item(0)]
    a.append([_item(1)])
    with pytest.raises(SessionConflict, match="another process committed"):
        b.append([_item(2)])
    assert ItemLog(ckptfs.open_store(url), "r").tail() == [_item(0), _item(1)]
    assert b.tail() == [_item(0), _item(1)]  # the read moved it to the head
    b.append([_item(2)])
    assert a.tail() == [_item(0), _item(1), _item(2)]


def test_first_commit_races_too(tmp_path: Path) -> None:
    url = str(tmp_path / "s")
    a = ItemLog(ckptfs.open_store(url), "r")
    b = ItemLog(ckptfs.open_store(url), "r")
    assert a.tail() == b.tail() == []
    a.append([_item(0)])
    with pytest.raises(SessionConflict):
        b.append([_item(1)])
    assert b.tail() == [_item(0)]


def test_tool_effects_never_call_twice(tmp_path: Path) -> None:
    url = str(tmp_path / "s")
    calls: list[str] = []

    def pay(amount: int) -> dict[str, Any]:
        calls.append("pay")
        return {"paid": amount}

    fx = ToolEffects(ckptfs.open_store(url), run_id_for("fx", "s"))
    assert fx.call("call_1", "pay", pay, 5) == {"paid": 5}
    assert fx.call("call_1", "pay", pay, 5) == {"paid": 5}
    other = ToolEffects(ckptfs.open_store(url), run_id_for("fx", "s"))
    assert other.call("call_1", "pay", pay, 5) == {"paid": 5}
    assert calls == ["pay"]
    assert other.get("call_1") is not None and other.get("call_1").status == "completed"

    def boom() -> None:
        calls.append("boom")
        raise ValueError("card declined")

    with pytest.raises(ValueError):
        fx.call("call_2", "boom", boom)
    with pytest.raises(EffectFailed):
        other.call("call_2", "boom", boom)
    assert calls == ["pay", "boom"]


def test_in_doubt_is_reported_never_rerun(tmp_path: Path) -> None:
    """A call whose process stopped between intent and outcome (here: a BaseException, as a
    kill leaves it) is in doubt: never called again by itself; settle records the outcome."""
    url = str(tmp_path / "s")
    calls: list[int] = []

    def dies() -> None:
        calls.append(1)
        raise KeyboardInterrupt

    fx = ToolEffects(ckptfs.open_store(url), "fx-r")
    with pytest.raises(KeyboardInterrupt):
        fx.call("c1", "dies", dies)
    fresh = ToolEffects(ckptfs.open_store(url), "fx-r")
    assert [e.key for e in fresh.unresolved()] == ["c1"]
    with pytest.raises(EffectInDoubt):
        fresh.call("c1", "dies", dies)
    assert calls == [1]
    fresh.settle("c1", result="done by hand")
    assert fresh.call("c1", "dies", dies) == "done by hand"
    assert fresh.unresolved() == []


def test_acall_runs_async_tools_once(tmp_path: Path) -> None:
    url = str(tmp_path / "s")
    calls: list[str] = []

    async def fetch(x: str) -> str:
        await asyncio.sleep(0)
        calls.append(x)
        return x.upper()

    async def main() -> list[str]:
        fx = ToolEffects(ckptfs.open_store(url), "fx-a")
        return [await fx.acall("c", "fetch", fetch, "hi"), await fx.acall("c", "fetch", fetch, "hi")]

    assert asyncio.run(main()) == ["HI", "HI"]
    assert calls == ["hi"]


def test_as_store(tmp_path: Path) -> None:
    store, owned = as_store(str(tmp_path / "s"))
    assert owned and isinstance(store, ckptfs.Store)
    assert as_store(store) == (store, False)
    with pytest.raises(TypeError):
        as_store(42)  # type: ignore[arg-type]


def _count_calls(storage: Any) -> Counter[str]:
    """Count the read-side calls of any Storage instance (wrapped in place)."""
    calls: Counter[str] = Counter()
    for name in READS:
        fn = getattr(storage, name, None)
        if fn is None:
            continue

        def counted(*a: Any, __fn: Any = fn, __name: str = name, **kw: Any) -> Any:
            calls[__name] += 1
            return __fn(*a, **kw)

        setattr(storage, name, counted)
    return calls


def test_tail_requests_on_s3(s3_options: dict[str, Any]) -> None:
    """The same bound on moto S3: tail(10) of 10,000 items (9,990 in ten pages, then ten
    single items) costs the head lookup and ten page reads, counted as storage calls (each
    a request or a listing)."""
    from ckptfs.storage import open_storage
    from tests.conftest import new_s3_url

    url = new_s3_url()
    log = ItemLog(ckptfs.open_store(url, **s3_options), "long")
    for p in range(10):
        log.append([_item(p * 999 + j) for j in range(999)])
    for i in range(9990, 10_000):
        log.append([_item(i)])
    storage = open_storage(url, **s3_options)
    calls = _count_calls(storage)
    fresh = ItemLog(ckptfs.Store(storage), "long")
    assert fresh.tail(10) == [_item(i) for i in range(9990, 10_000)]
    total = sum(calls.values())
    print(f"\nS3 storage calls for tail(10) of 10,000 items: {total} {dict(calls)}")
    assert total <= 50
    calls.clear()
    assert len(fresh.tail(10)) == 10
    assert sum(calls.values()) <= 3, calls  # the head has not moved: one existence check


def _bytes_under(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def test_append_stores_only_the_new_items(tmp_path: Path) -> None:
    """One append adds about the same bytes to the store after 10 items as after 2,000: the
    commit holds the new items, not the history."""
    grew = {}
    for n in (10, 2000):
        root = tmp_path / f"s{n}"
        log = ItemLog(ckptfs.open_store(str(root)), "r")
        log.append([_item(i) for i in range(n)])
        before = _bytes_under(root)
        log.append([_item(n)])
        grew[n] = _bytes_under(root) - before
    assert abs(grew[2000] - grew[10]) <= 0.1 * grew[10], grew


def _chat(i: int) -> dict[str, Any]:
    """A chat-like item: ~600 bytes of words drawn from a small vocabulary (compresses)."""
    rng = random.Random(i)
    words = [f"w{rng.randrange(300)}" for _ in range(120)]
    return {"role": "user" if i % 2 else "assistant", "content": " ".join(words)}


def test_folded_log_is_a_list_across_gc(tmp_path: Path) -> None:
    """With small folds, random add/pop/clear still behave as a Python list, for this log
    and a fresh reader, also after gc dropped what the folds took out of the chain; only
    folds and the snapshots since the newest one stay visible."""
    from ckptfs.ops.gc import gc

    url = str(tmp_path / "s")
    log = ItemLog(ckptfs.open_store(url), "r", fold=4)
    model: list[Any] = []
    rng = random.Random(11)
    n = 0
    for step in range(200):
        r = rng.random()
        if r < 0.65:
            batch = [_item(n + j) for j in range(rng.choice([1, 1, 2, 5]))]
            n += len(batch)
            log.append(batch)
            model += batch
        elif r < 0.97:
            assert log.pop() == (model.pop() if model else None)
        else:
            log.clear()
            model.clear()
        if step % 25 == 0:
            assert forgets_done(60)
            gc(log.store.repo, grace_ms=0)
            fresh = ItemLog(ckptfs.open_store(url), "r", fold=4)
            assert fresh.tail() == model and len(fresh) == len(model)
            for limit in (1, 3, 9):
                assert fresh.tail(limit) == model[-limit:]
    assert log.tail() == model
    assert forgets_done(60)
    repo = ckptfs.open_store(url).repo
    seqs = repo.seqs("r")
    ops = {s: repo.snapshot_at("r", s).manifest.labels["ag.op"] for s in seqs}
    newest_fold = max(s for s, op in ops.items() if op == "fold")
    assert all(op == "fold" for s, op in ops.items() if s < newest_fold), ops
    assert len(seqs) < 200 / 2, len(seqs)


def test_folding_shrinks_a_long_session(tmp_path: Path) -> None:
    """1,000 one-item turns: after gc, the folded log's files take under half the bytes and
    under half the disk blocks of the same log kept commit by commit (fold=0), and a fresh
    reader reads the same items."""
    from ckptfs.ops.gc import gc

    sizes = {}
    for fold in (0, 128):
        url = str(tmp_path / f"f{fold}")
        log = ItemLog(ckptfs.open_store(url), "chat", fold=fold)
        for i in range(1000):
            log.append([_chat(i)])
        assert forgets_done(60)
        gc(log.store.repo, grace_ms=0)
        assert ItemLog(ckptfs.open_store(url), "chat").tail() == [_chat(i) for i in range(1000)]
        files = [f.stat() for f in Path(url).rglob("*") if f.is_file()]
        sizes[fold] = (sum(f.st_size for f in files), sum(f.st_blocks for f in files) // 2)
    print(f"\n1,000 turns after gc, (bytes, disk KiB): unfolded {sizes[0]}, folded {sizes[128]}")
    assert sizes[128][0] < sizes[0][0] / 2 and sizes[128][1] < sizes[0][1] / 2, sizes
