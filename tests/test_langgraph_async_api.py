"""The saver's API as async and pathlib users write it (issue 35 item 9): a ``Path`` opens a
store, ``async with CkptfsSaver.from_url(...)`` works as with AsyncSqliteSaver, ``aeffect``
keeps the loop running while the ledger commits, ``alist`` yields its first item before it
has read the rest."""

from __future__ import annotations

import asyncio
import operator
import pathlib
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest

pytest.importorskip("langgraph")

from langchain_core.runnables import RunnableConfig  # noqa: E402
from langgraph.checkpoint.base import empty_checkpoint  # noqa: E402

from ckptfs.integrations.langgraph import CkptfsSaver  # noqa: E402
from tests.test_async_api import Held  # noqa: E402


class State(TypedDict):
    done: Annotated[list[str], operator.add]


def cfg(tid: str, cid: str | None = None) -> Any:
    c: Any = {"configurable": {"thread_id": tid, "checkpoint_ns": ""}}
    if cid is not None:
        c["configurable"]["checkpoint_id"] = cid
    return c


def put_steps(saver: CkptfsSaver, tid: str, n: int) -> list[Any]:
    configs = []
    parent = cfg(tid)
    for i in range(n):
        cp = empty_checkpoint()
        cp["id"] = f"1ef-{i:04d}"
        cp["channel_values"] = {"step": i}
        cp["channel_versions"] = {"step": i + 1}
        parent = saver.put(parent, cp, {"source": "loop", "step": i}, {"step": i + 1})
        configs.append(parent)
    return configs


def test_a_pathlib_path_opens_the_store(tmp_path: Path) -> None:
    saver = CkptfsSaver(pathlib.Path(tmp_path / "s"))
    put_steps(saver, "t", 2)
    saver.close()
    with CkptfsSaver.from_url(tmp_path / "s") as again:
        got = again.get_tuple(cfg("t"))
        assert got is not None and got.checkpoint["channel_values"] == {"step": 1}
    with pytest.raises(TypeError, match="a ckptfs Store, a URL or a path"):
        CkptfsSaver(42)  # type: ignore[arg-type]


def test_async_with_from_url_opens_and_closes(tmp_path: Path) -> None:
    url = str(tmp_path / "s")

    async def main() -> None:
        async with CkptfsSaver.from_url(url) as saver:
            await saver.aput(cfg("t"), {**empty_checkpoint(), "id": "1ef-1"},
                             {"source": "input", "step": -1}, {})
            got = await saver.aget_tuple(cfg("t"))
            assert got is not None and got.checkpoint["id"] == "1ef-1"
        async with CkptfsSaver.from_conn_string(url) as again:
            assert [t.checkpoint["id"] async for t in again.alist(cfg("t"))] == ["1ef-1"]

    asyncio.run(main())


def test_aeffect_keeps_the_loop_running_and_happens_once(tmp_path: Path) -> None:
    calls: list[str] = []

    async def send(to: str) -> str:
        calls.append(to)
        await asyncio.sleep(0)
        return f"sent to {to}"

    async def main() -> None:
        async with CkptfsSaver.from_url(str(tmp_path / "s")) as saver:
            held = Held(saver.store)
            got, _ = await asyncio.gather(
                saver.aeffect(cfg("t"), "send", send, "bob", key="mail-1"), held.heartbeat())
            assert got == "sent to bob" and not held.escaped and held.beats == 3
            assert await saver.aeffect(cfg("t"), "send", send, "bob", key="mail-1") == \
                "sent to bob"
        async with CkptfsSaver.from_url(str(tmp_path / "s")) as fresh:
            assert await fresh.aeffect(cfg("t"), "send", send, "bob", key="mail-1") == \
                "sent to bob"
            assert fresh.effect(cfg("t"), "send", send, "bob", key="mail-1") == "sent to bob"

    asyncio.run(main())
    assert calls == ["bob"]


def test_alist_streams_its_first_item_before_reading_the_rest(tmp_path: Path) -> None:
    with CkptfsSaver.from_url(str(tmp_path / "s")) as saver:
        put_steps(saver, "t", 10)
    fresh = CkptfsSaver(str(tmp_path / "s"))
    built: list[str] = []
    real = fresh._tuple

    def counting(idx: Any, snap: Any, thread_id: Any) -> Any:
        built.append(snap.manifest.labels["lg.checkpoint_id"])
        return real(idx, snap, thread_id)

    fresh._tuple = counting  # type: ignore[method-assign]

    async def main() -> list[str]:
        items = fresh.alist(cfg("t"))
        first = await items.__anext__()
        assert built == ["1ef-0009"]  # only the first has been read
        rest = [t.checkpoint["id"] async for t in items]
        return [first.checkpoint["id"], *rest]

    ids = asyncio.run(main())
    assert ids == [f"1ef-{i:04d}" for i in reversed(range(10))]
    assert len(built) == 10


def test_list_still_filters_and_limits_lazily(tmp_path: Path) -> None:
    with CkptfsSaver.from_url(str(tmp_path / "s")) as saver:
        configs = put_steps(saver, "t", 5)
        assert [t.config for t in saver.list(cfg("t"), limit=2)] == configs[:-3:-1]
        assert [t.metadata["step"] for t in saver.list(cfg("t"), filter={"step": 3})] == [3]
        assert [t.config for t in saver.list(cfg("t"), before=configs[2])] == configs[1::-1]


def test_a_real_graph_with_async_tools_performs_each_effect_once(tmp_path: Path) -> None:
    """LangGraph's own async runner: two tool calls of one step in parallel (a fan-out), each
    an ``aeffect`` of the same thread; a second ``ainvoke`` of the thread replays them."""
    from langgraph.graph import END, START, StateGraph

    sent: list[str] = []

    async def send(to: str) -> str:
        sent.append(to)
        await asyncio.sleep(0)
        return f"sent to {to}"

    async def main() -> list[str]:
        async with CkptfsSaver.from_url(str(tmp_path / "s")) as saver:
            def tool(to: str) -> Any:
                async def node(state: State, config: RunnableConfig) -> dict[str, list[str]]:
                    return {"done": [await saver.aeffect(config, "send", send, to,
                                                         key=f"mail-{to}")]}
                return node

            g = StateGraph(State)
            g.add_node("a", tool("ann"))
            g.add_node("b", tool("bob"))
            g.add_edge(START, "a")
            g.add_edge(START, "b")
            g.add_edge("a", END)
            g.add_edge("b", END)
            app = g.compile(checkpointer=saver)
            conf = {"configurable": {"thread_id": "t"}}
            first = await app.ainvoke({"done": []}, conf)
            second = await app.ainvoke({"done": []}, conf)
            return sorted(first["done"]) + sorted(second["done"])

    got = asyncio.run(main())
    assert sorted(sent) == ["ann", "bob"]
    assert got.count("sent to ann") == 3 and got.count("sent to bob") == 3
