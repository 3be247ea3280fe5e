"""CkptfsSaver's own ``get_delta_channel_history``: what LangGraph's default gives (the
DeltaChannel's writes along the parent chain and the nearest stored value as the seed), read
in one walk down the run instead of one ``get_tuple`` (a refresh of the run and a search) per
ancestor. Checked against the default on real graphs with a small snapshot frequency, under
both durabilities, through the sync and async saver, and counted: a fresh ``get_state`` lists
the run a bounded number of times, not once per ancestor."""

from __future__ import annotations

import asyncio
import collections
import operator
from pathlib import Path
from typing import Annotated, Any

import pytest

pytest.importorskip("langgraph.channels.delta")

from langgraph.channels.delta import DeltaChannel  # noqa: E402
from langgraph.checkpoint.base import BaseCheckpointSaver  # noqa: E402
from langgraph.graph import END, START, StateGraph  # noqa: E402
from typing_extensions import TypedDict  # noqa: E402

from ckptfs.integrations.langgraph import CkptfsSaver  # noqa: E402
from ckptfs.storage.local import LocalStorage  # noqa: E402

EVERY = 4  # the DeltaChannel stores its whole value every 4 updates


def _concat(old: Any, writes: Any) -> list[str]:
    out = list(old or [])
    for w in writes:
        out.extend(w)
    return out


class State(TypedDict):
    log: Annotated[list[str], DeltaChannel(_concat, snapshot_frequency=EVERY)]
    n: Annotated[int, operator.add]


def graph(steps: int) -> Any:
    def step(state: Any) -> dict[str, Any]:
        return {"log": [f"line {state['n']}"], "n": 1}

    g = StateGraph(State)
    g.add_node("step", step)
    g.add_edge(START, "step")
    g.add_conditional_edges("step", lambda s: "step" if s["n"] < steps else END)
    return g


def _run(url: str, steps: int, durability: str) -> dict[str, Any]:
    saver = CkptfsSaver(url)
    config: Any = {"configurable": {"thread_id": "t"}, "recursion_limit": steps + 10}
    graph(steps).compile(checkpointer=saver).invoke({"log": [], "n": 0}, config,
                                                    durability=durability)
    saver.close()
    return config


@pytest.mark.parametrize("durability", ["sync", "async", "exit"])
def test_every_checkpoints_history_equals_langgraphs_default(tmp_path: Path,
                                                             durability: str) -> None:
    """For every checkpoint of the thread (past snapshots and between them), a fresh saver's
    history equals what the default walk through ``get_tuple`` returns, and ``get_state``
    rebuilds the log."""
    url = str(tmp_path / "s")
    config = _run(url, 11, durability)
    saver = CkptfsSaver(url)
    checkpoints = [t.config for t in saver.list(config)]
    assert len(checkpoints) >= (1 if durability == "exit" else 12)
    for c in checkpoints:
        mine = saver.get_delta_channel_history(config=c, channels=["log", "absent"])
        default = BaseCheckpointSaver.get_delta_channel_history(saver, config=c,
                                                                channels=["log", "absent"])
        assert mine == default, c
    assert saver.get_delta_channel_history(config=config, channels=[]) == {}
    state = graph(11).compile(checkpointer=CkptfsSaver(url)).get_state(config)
    assert state.values["log"] == [f"line {i}" for i in range(11)]
    saver.close()


def test_the_async_saver_gives_the_same_history(tmp_path: Path) -> None:
    url = str(tmp_path / "s")
    config = _run(url, 7, "sync")
    sync = CkptfsSaver(url).get_delta_channel_history(config=config, channels=["log"])

    async def go() -> Any:
        async with CkptfsSaver.from_url(url) as saver:
            return await saver.aget_delta_channel_history(config=config, channels=["log"])

    got = asyncio.run(go())
    assert got == sync and len(got["log"]["writes"]) >= 1


def test_a_fresh_get_state_lists_the_run_a_bounded_number_of_times(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ten steps with a value stored every 4 updates: the walk passes 3 ancestors, each a
    checkpoint record and its writes. The default refreshed the run per ancestor (here 7
    listings, 4 existence checks and 21 reads; at N = 250 with LangGraph's default frequency
    of 100, 55 listings and 219 reads); one walk refreshes it once and reads each ancestor's
    writes without its state (4 listings, 1 check, 14 reads)."""
    url = str(tmp_path / "s")
    config = _run(url, 10, "sync")
    counts: collections.Counter[str] = collections.Counter()
    for name in ("listing", "exists", "read"):
        real = getattr(LocalStorage, name)

        def counted(self: LocalStorage, *args: Any, _real: Any = real, _name: str = name,
                    **kwargs: Any) -> Any:
            counts[_name] += 1
            return _real(self, *args, **kwargs)
        monkeypatch.setattr(LocalStorage, name, counted)
    state = graph(10).compile(checkpointer=CkptfsSaver(url)).get_state(config)
    assert state.values["log"] == [f"line {i}" for i in range(10)]
    assert counts["listing"] <= 4 and counts["exists"] <= 1 and counts["read"] <= 14, counts
