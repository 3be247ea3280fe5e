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
from ckptfs.integrations.agent_common import ItemLog, ToolEffects, as_store, run_id_for
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
        assert again <= 6, storage.calls  # pages are kept: only the head is looked up
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
