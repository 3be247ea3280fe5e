"""The LangGraph rules of tests/test_ops_stateful.py (a mixin of its state machine ``Ops``):
CkptfsSaver ``put`` of a thread's next checkpoint, ``prune`` (keep_latest) and
``delete_thread``, on a long-lived saver per store beside every other operation."""

from __future__ import annotations

from typing import Any

import hypothesis.strategies as st
from hypothesis.stateful import rule

from tests import ops_model as om


class LangGraphRules:
    """Needs the attributes and helpers of ``Ops`` (stores, models, tip, _count, _commits)."""

    stores: list[Any]
    models: list[om.StoreModel]
    tip: dict[str, int]
    home: dict[str, int]
    lg_cid: dict[str, str | None]
    lg_msgs: dict[str, list[str]]
    lg_runs: set[str]
    savers: dict[int, Any]
    dirty: set[int]

    def _saver(self, i: int) -> Any:
        if i not in self.savers:
            from ckptfs.integrations.langgraph import CkptfsSaver

            self.savers[i] = CkptfsSaver(self.stores[i], fold_writes=False)
        return self.savers[i]

    @rule(i=st.integers(0, 2), t=st.integers(0, 3))
    def lg_put(self, i: int, t: int) -> None:
        from langgraph.checkpoint.base import empty_checkpoint
        from langgraph.checkpoint.base.id import uuid6

        from ckptfs.integrations.langgraph import thread_prefix

        i %= len(self.stores)
        tid = f"t{t}"
        if self.home.setdefault(tid, i) != i:
            return
        m = self.models[i]
        runs = [x for x in m.held if x.startswith(thread_prefix(tid))]
        if any(m.head(x) != self.tip.get(x) for x in runs):
            return  # behind another store's copy
        self._count("lg put")
        u = self._next()
        msgs = [*self.lg_msgs.get(tid, []), f"lg message {om.token(u)} " * 10]
        self.lg_msgs[tid] = msgs
        cp = empty_checkpoint()
        cp["id"] = str(uuid6(clock_seq=-1))
        cp["channel_values"] = {"messages": list(msgs)}
        cp["channel_versions"] = {"messages": len(msgs)}
        cfg: dict[str, Any] = {"thread_id": tid, "checkpoint_ns": ""}
        if self.lg_cid.get(tid):
            cfg["checkpoint_id"] = self.lg_cid[tid]
        out = self._saver(i).put({"configurable": cfg}, cp, {"step": len(msgs)},
                                 {"messages": len(msgs)})
        self.lg_cid[tid] = out["configurable"]["checkpoint_id"]
        for run in self.stores[i].runs():
            if run.startswith(thread_prefix(tid)):
                self.lg_runs.add(run)
                self._commits(i, run, m.head(run))
        got = self._saver(i).get_tuple({"configurable": {"thread_id": tid, "checkpoint_ns": ""}})
        assert got is not None and got.checkpoint["channel_values"]["messages"] == msgs

    @rule(i=st.integers(0, 2), t=st.integers(0, 3), delete=st.booleans())
    def lg_prune(self, i: int, t: int, delete: bool) -> None:
        from ckptfs.integrations.langgraph import thread_prefix

        i %= len(self.stores)
        tid = f"t{t}"
        m = self.models[i]
        runs = [x for x in m.runs() if x.startswith(thread_prefix(tid))]
        if not runs:
            return
        self._count("lg delete_thread" if delete else "lg prune")
        if delete:
            self._saver(i).delete_thread(tid)
            for run in runs:
                m.erase_run(run)
            if self.home.get(tid) == i:
                self.lg_msgs[tid] = []
                self.lg_cid[tid] = None
                self.home[tid] = -1  # the thread is not written again
        else:
            self._saver(i).prune([tid])
            m.prune_keep_latest(runs)
        self.dirty.add(i)
