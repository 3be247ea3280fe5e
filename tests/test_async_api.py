"""The async API (issue 35 item 10): ``Store.aresume``/``astart_run``, ``Run.acheckpoint``,
``aappend``, ``aeffect``. The loop keeps running while storage is held (a heartbeat task must
release the held storage call: no timing involved), commits of one run keep their order,
fencing and exactly-once effects hold between asyncio tasks as between processes."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import ckptfs
from ckptfs.errors import ConflictError, EffectFailed, EffectInDoubt
from ckptfs.runtime.effects import NOT_DONE

#: how long a held storage call waits for the heartbeat before giving up: a deadlock escape
#: (a blocked loop never runs the heartbeat), not a timed assertion
ESCAPE = 20.0


class Held:
    """Holds ``store.repo.commit`` calls until the event loop's heartbeat releases them."""

    def __init__(self, store: ckptfs.Store) -> None:
        self.entered = threading.Event()
        self.released = threading.Event()
        self.escaped = False
        self.beats = 0
        real: Callable[..., Any] = store.repo.commit

        def commit(*a: Any, **kw: Any) -> Any:
            self.entered.set()
            if not self.released.wait(ESCAPE):
                self.escaped = True
            return real(*a, **kw)

        store.repo.commit = commit  # type: ignore[method-assign]

    async def heartbeat(self) -> None:
        """Ticks only while the loop runs; releases the held commit after three ticks."""
        while not self.entered.is_set():
            await asyncio.sleep(0.001)
        for _ in range(3):
            self.beats += 1
            await asyncio.sleep(0)
        self.released.set()


@pytest.fixture
def local(tmp_path: Path) -> ckptfs.Store:
    return ckptfs.open_store(str(tmp_path / "s"))


def test_acheckpoint_leaves_the_loop_running_while_storage_is_held(local: ckptfs.Store) -> None:
    async def main() -> None:
        run = await local.astart_run("r")
        held = Held(local)
        snap, _ = await asyncio.gather(run.acheckpoint({"step": 1}), held.heartbeat())
        assert not held.escaped and held.beats == 3
        assert snap.seq == 1 and run.seq == 1

    asyncio.run(main())


def test_a_sync_checkpoint_in_a_coroutine_blocks_the_loop(local: ckptfs.Store) -> None:
    """The check above can fail: the sync call starves the heartbeat until the escape."""
    import tests.test_async_api as me

    me_escape = me.ESCAPE
    me.ESCAPE = 0.2
    try:
        async def main() -> bool:
            run = local.start_run("r")
            held = Held(local)

            async def sync_commit() -> None:
                await asyncio.sleep(0)
                run.checkpoint({"step": 1})

            await asyncio.gather(sync_commit(), held.heartbeat())
            return held.escaped

        assert asyncio.run(main()) is True
    finally:
        me.ESCAPE = me_escape


def test_aeffect_leaves_the_loop_running_during_its_commits(local: ckptfs.Store) -> None:
    calls: list[int] = []

    async def pay(amount: int) -> dict[str, int]:
        calls.append(amount)
        await asyncio.sleep(0)
        return {"paid": amount}

    async def main() -> None:
        run = await local.astart_run("r")
        await run.acheckpoint({"step": 1})
        held = Held(local)
        got, _ = await asyncio.gather(run.aeffect("pay", pay, 5, key="k"), held.heartbeat())
        assert got == {"paid": 5} and not held.escaped
        again = await local.aresume("r")
        assert await again.aeffect("pay", pay, 5, key="k") == {"paid": 5}

    asyncio.run(main())
    assert calls == [5]


def test_acheckpoints_of_one_run_commit_in_the_order_awaited(local: ckptfs.Store) -> None:
    async def main() -> None:
        run = await local.astart_run("r")
        snaps = await asyncio.gather(*(run.acheckpoint({"i": i}) for i in range(12)))
        assert [s.seq for s in snaps] == list(range(1, 13))
        await run.acheckpoint({"i": 12, "log": []})
        a, b = await asyncio.gather(run.aappend("log", "x"), run.aappend("log", "y"))
        assert (a.seq, b.seq) == (14, 15)
        assert (await local.aread("r"))["log"] == ["x", "y"]

    asyncio.run(main())


def test_two_handles_race_one_wins_the_other_is_fenced(local: ckptfs.Store, tmp_path: Path
                                                       ) -> None:
    local.start_run("r").checkpoint({"n": 0})
    other = ckptfs.open_store(str(tmp_path / "s"))

    async def main() -> None:
        r1, r2 = await asyncio.gather(local.aresume("r"), other.aresume("r"))
        got = await asyncio.gather(r1.acheckpoint({"n": 1}), r2.acheckpoint({"n": 2}),
                                   return_exceptions=True)
        lost = [g for g in got if isinstance(g, ConflictError)]
        assert len(lost) == 1 and sum(isinstance(g, ckptfs.Snapshot) for g in got) == 1
        loser = r1 if isinstance(got[0], ConflictError) else r2
        with pytest.raises(ConflictError):
            await loser.acheckpoint({"n": 3})

    asyncio.run(main())
    assert local.head("r").seq == 2


def test_the_same_effect_from_two_handles_happens_once(local: ckptfs.Store,
                                                       tmp_path: Path) -> None:
    local.start_run("r").checkpoint({"n": 0})
    other = ckptfs.open_store(str(tmp_path / "s"))
    calls: list[str] = []

    async def send(to: str) -> str:
        calls.append(to)
        await asyncio.sleep(0)
        return f"sent to {to}"

    async def main() -> None:
        r1, r2 = await asyncio.gather(local.aresume("r"), other.aresume("r"))
        got = await asyncio.gather(r1.aeffect("send", send, "bob", key="mail-1"),
                                   r2.aeffect("send", send, "bob", key="mail-1"),
                                   return_exceptions=True)
        assert got.count("sent to bob") == 1
        assert sum(isinstance(g, ConflictError) for g in got) == 1

    asyncio.run(main())
    assert calls == ["bob"]
    assert ckptfs.open_store(str(tmp_path / "s")).ledger("r").effects["mail-1"].status == \
        "completed"


def test_effects_of_one_run_do_not_overlap_and_all_happen(local: ckptfs.Store) -> None:
    order: list[str] = []

    async def tool(name: str) -> str:
        order.append(f"start {name}")
        await asyncio.sleep(0)
        order.append(f"end {name}")
        return name

    def blocking(name: str) -> str:  # a plain function: called in a worker thread
        order.append(f"plain {name}")
        return name

    async def main() -> None:
        run = await local.astart_run("r")
        await run.acheckpoint({})
        got = await asyncio.gather(run.aeffect("t", tool, "a", key="a"),
                                   run.aeffect("t", tool, "b", key="b"),
                                   run.aeffect("p", blocking, "c", key="c"))
        assert got == ["a", "b", "c"]

    asyncio.run(main())
    assert order == ["start a", "end a", "start b", "end b", "plain c"]
    assert [e.key for e in local.ledger("r").effects.values()] == ["a", "b", "c"]


def test_a_failed_async_effect_is_recorded_and_replayed_as_failed(local: ckptfs.Store) -> None:
    async def boom() -> None:
        raise ValueError("card declined")

    async def main() -> None:
        run = await local.astart_run("r")
        await run.acheckpoint({})
        with pytest.raises(ValueError):
            await run.aeffect("charge", boom, key="c")
        again = await local.aresume("r")
        with pytest.raises(EffectFailed):
            await again.aeffect("charge", boom, key="c")

    asyncio.run(main())


def test_a_cancelled_effect_is_in_doubt_and_reconciles(local: ckptfs.Store) -> None:
    started = asyncio.Event

    async def main() -> None:
        run = await local.astart_run("r")
        await run.acheckpoint({})
        begun = started()

        async def slow() -> str:
            begun.set()
            await asyncio.Event().wait()  # never returns: cancelled
            return "never"

        task = asyncio.create_task(run.aeffect("slow", slow, key="s"))
        await begun.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert run._open_effect is None  # the run is usable again
        again = await local.aresume("r")
        with pytest.raises(EffectInDoubt):
            await again.aeffect("slow", slow, key="s")

        async def fast() -> str:
            return "done"

        assert await again.aeffect("slow", fast, key="s",
                                   reconcile=lambda e: NOT_DONE) == "done"

    asyncio.run(main())


def test_a_cancelled_acheckpoint_returns_after_its_commit_ended(local: ckptfs.Store) -> None:
    async def main() -> None:
        run = await local.astart_run("r")
        held = Held(local)
        task = asyncio.create_task(run.acheckpoint({"n": 1}))
        while not held.entered.is_set():
            await asyncio.sleep(0.001)
        task.cancel()
        beat = asyncio.create_task(held.heartbeat())
        with pytest.raises(asyncio.CancelledError):
            await task
        await beat
        assert run.seq == 1  # the commit it started has ended before the cancellation
        assert (await run.acheckpoint({"n": 2})).seq == 2

    asyncio.run(main())
