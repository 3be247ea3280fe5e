"""CkptfsSaver beyond the conformance suite: sync methods, any ids, reopening the store, real
StateGraph runs with interrupt/resume, dedup of appended messages, strict serde, concurrency."""

from __future__ import annotations

import dataclasses
import operator
import os
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest

pytest.importorskip("langgraph")

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage  # noqa: E402
from langgraph.checkpoint.base import empty_checkpoint  # noqa: E402
from langgraph.checkpoint.base.id import uuid6  # noqa: E402
from langgraph.graph import END, START, StateGraph  # noqa: E402
from langgraph.graph.message import add_messages  # noqa: E402
from langgraph.types import Command, interrupt  # noqa: E402

import ckptfs  # noqa: E402
from ckptfs.errors import CorruptSnapshot  # noqa: E402
from ckptfs.format.models import Captured  # noqa: E402
from ckptfs.format.names import RUN_ID  # noqa: E402
from ckptfs.integrations.langgraph import (  # noqa: E402
    CkptfsSaver,
    effects_run_id,
    run_id_for,
)


def cfg(tid: str, ns: str = "", cid: str | None = None) -> dict[str, Any]:
    c: dict[str, Any] = {"thread_id": tid, "checkpoint_ns": ns}
    if cid:
        c["checkpoint_id"] = cid
    return {"configurable": c}


def ckpt(values: dict[str, Any], versions: dict[str, int]) -> Any:
    cp = empty_checkpoint()
    cp["id"] = str(uuid6(clock_seq=-1))
    cp["channel_values"] = values
    cp["channel_versions"] = versions
    return cp


def chunk_files(root: Path) -> set[str]:
    return {p.name for p in (root / "chunks").rglob("*") if p.is_file()}


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ckptfs.cli", *args], capture_output=True,
                          text=True, timeout=120)


# -- sync API -------------------------------------------------------------------------------------
def test_sync_methods_roundtrip_plain_bytes_none_and_big(store_url: str) -> None:
    saver = CkptfsSaver(store_url)
    big = ["m" * 3000, {"k": b"\x00\xff" * 2000}]  # above the inline limit: real chunks
    c1 = saver.put(cfg("t"), ckpt({"a": b"raw", "n": None, "big": big}, {"a": 1, "n": 1, "big": 1}),
                   {"source": "input", "step": -1, "parents": {}}, {"a": 1, "n": 1, "big": 1})
    saver.put_writes(c1, [("a", b"w"), ("big", ["x" * 5000])], "task-1", task_path="p")
    c2 = saver.put(cfg("t", cid=c1["configurable"]["checkpoint_id"]),
                   ckpt({"a": b"raw2", "big": big}, {"a": 2, "big": 1}),
                   {"source": "loop", "step": 0, "parents": {}}, {"a": 2})
    t1 = saver.get_tuple(c1)
    assert t1 is not None
    assert t1.checkpoint["channel_values"] == {"a": b"raw", "n": None, "big": big}
    assert t1.pending_writes == [("task-1", "a", b"w"), ("task-1", "big", ["x" * 5000])]
    t2 = saver.get_tuple(cfg("t"))  # no id: the latest
    assert t2 is not None and t2.config == c2
    assert t2.checkpoint["channel_values"] == {"a": b"raw2", "big": big}
    assert t2.parent_config == c1 and t2.pending_writes == []
    assert t2.metadata == {"source": "loop", "step": 0, "parents": {}}
    # list: all threads, a thread without namespace, filters, before, limit
    saver.put(cfg("t", "sub:1"), ckpt({"s": 1}, {"s": 1}), {"source": "loop", "step": 5}, {"s": 1})
    saver.put(cfg("other"), ckpt({}, {}), {"source": "input", "step": -1}, {})
    assert len(list(saver.list(None))) == 4
    in_t = list(saver.list({"configurable": {"thread_id": "t"}}))
    assert [x.config["configurable"]["checkpoint_ns"] for x in in_t] == ["sub:1", "", ""]
    assert len(list(saver.list(cfg("t")))) == 2
    assert [x.config for x in saver.list(cfg("t"), filter={"source": "input"})] == [c1]
    assert [x.config for x in saver.list(None, filter={"step": 5})][0]["configurable"][
        "checkpoint_ns"] == "sub:1"
    assert [x.config for x in saver.list(cfg("t"), before=c2)] == [c1]
    assert [x.config for x in saver.list(cfg("t"), limit=1)] == [c2]
    saver.delete_thread("t")
    assert saver.get_tuple(cfg("t")) is None and saver.get_tuple(cfg("t", "sub:1")) is None
    assert [x.config["configurable"]["thread_id"] for x in saver.list(None)] == ["other"]
    assert ckptfs.open_store(store_url).snapshots(run_id_for("other", ""))


def test_any_thread_id_and_namespace_become_safe_run_ids(tmp_path: Path) -> None:
    saver = CkptfsSaver(str(tmp_path / "s"))
    ids = ["../../etc", "a/b\\c", "ünï cødé", "", "x" * 1000, "con", "-", "."]
    for i, tid in enumerate(ids):
        for ns in ("", "node:1|sub:2", "../"):
            saver.put(cfg(tid, ns), ckpt({"v": i}, {"v": 1}), {"step": i}, {"v": 1})
    store = ckptfs.open_store(str(tmp_path / "s"))
    runs = store.runs()
    assert len(runs) == len(ids) * 3 and all(RUN_ID.match(r) for r in runs)
    assert os.listdir(tmp_path) == ["s"]  # nothing escaped the store
    assert sorted(os.listdir(tmp_path / "s" / "runs")) == sorted(runs)
    for i, tid in enumerate(ids):
        for ns in ("", "node:1|sub:2", "../"):
            t = saver.get_tuple(cfg(tid, ns))
            assert t is not None and t.checkpoint["channel_values"] == {"v": i}
            head = store.head(run_id_for(tid, ns))
            assert head.labels["lg.thread_id"] == tid and head.labels["lg.checkpoint_ns"] == ns
    with pytest.raises(ValueError, match="at most 1024"):
        saver.put(cfg("y" * 1025), ckpt({}, {}), {}, {})


def test_channel_names_with_any_characters_roundtrip(tmp_path: Path) -> None:
    saver = CkptfsSaver(str(tmp_path / "s"))
    values = {"branch:to:a": None, "__start__": {"x": 1}, "a/b": 2, "..": 3, "ünï": "é" * 3000}
    c = saver.put(cfg("t"), ckpt(values, dict.fromkeys(values, 1)), {}, dict.fromkeys(values, 1))
    t = saver.get_tuple(c)
    assert t is not None and t.checkpoint["channel_values"] == values


def test_unchanged_channel_reuses_parent_entry_and_writes_no_chunk(tmp_path: Path) -> None:
    root = tmp_path / "s"
    saver = CkptfsSaver(str(root))
    big = {"doc": "z" * 50_000}
    c1 = saver.put(cfg("t"), ckpt({"big": big, "n": 1}, {"big": 1, "n": 1}), {}, {"big": 1, "n": 1})
    before = chunk_files(root)
    c2 = saver.put(cfg("t", cid=c1["configurable"]["checkpoint_id"]),
                   ckpt({"big": big, "n": 2}, {"big": 1, "n": 2}), {}, {"n": 2})
    assert chunk_files(root) == before
    store = ckptfs.open_store(str(root))
    snaps = list(store.snapshots(run_id_for("t", "")))
    assert snaps[1].parent == snaps[0].id  # the LangGraph parent is the ckptfs parent
    e1, e2 = (s.manifest.entries["channels/big"] for s in snaps)
    assert e1 == e2 and isinstance(e1, Captured) and e1.chunks
    t = saver.get_tuple(c2)
    assert t is not None and t.checkpoint["channel_values"] == {"big": big, "n": 2}


# -- persistence -----------------------------------------------------------------------------------
def test_reopened_store_sees_everything_and_continues(store_url: str) -> None:
    a = CkptfsSaver(store_url)
    c1 = a.put(cfg("t"), ckpt({"msgs": ["hi"] * 500}, {"msgs": 1}), {"source": "input", "step": -1},
               {"msgs": 1})
    a.put_writes(c1, [("msgs", "w1"), ("__interrupt__", {"q": "ok?"})], "task")
    b = CkptfsSaver(store_url)  # another process, in effect
    tb = b.get_tuple(cfg("t"))
    ta = a.get_tuple(cfg("t"))
    assert tb is not None and ta is not None and tb == ta
    assert tb.pending_writes == [("task", "__interrupt__", {"q": "ok?"}), ("task", "msgs", "w1")]
    b.put_writes(c1, [("__interrupt__", {"q": "again?"})], "task")  # special channel: overwrite
    c2 = b.put(c1, ckpt({"msgs": ["hi"] * 501}, {"msgs": 2}), {"source": "loop", "step": 0},
               {"msgs": 2})
    t1 = a.get_tuple(c1)
    assert t1 is not None and ("task", "__interrupt__", {"q": "again?"}) in t1.pending_writes
    t2 = a.get_tuple(cfg("t"))
    assert t2 is not None and t2.config == c2 and t2.parent_config == c1
    a.put(c2, ckpt({"msgs": []}, {"msgs": 3}), {"source": "loop", "step": 1}, {"msgs": 3})
    assert len(list(b.list(cfg("t")))) == 3


# -- serde ----------------------------------------------------------------------------------------
class Opaque:
    """A class msgpack cannot encode: it must be refused, never pickled."""


@dataclasses.dataclass
class Point:
    x: int
    y: int


def test_serde_refuses_pickle_and_constructs_only_registered_types(tmp_path: Path) -> None:
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    with pytest.raises(ValueError, match="pickle"):
        CkptfsSaver(str(tmp_path / "s"), serde=JsonPlusSerializer(pickle_fallback=True))
    saver = CkptfsSaver(str(tmp_path / "s"))
    with pytest.raises(TypeError):
        saver.put(cfg("t"), ckpt({"o": Opaque()}, {"o": 1}), {}, {"o": 1})
    assert ckptfs.open_store(str(tmp_path / "s")).runs() == []  # nothing committed
    with pytest.raises(CorruptSnapshot, match="pickle"):
        saver._unpack({"__lg__": "pickle", "data": b"cos\nsystem\n."})
    # a plain dict that looks like the wrapper survives as itself
    lookalike = {"__lg__": "pickle", "data": b"x"}
    c = saver.put(cfg("t"), ckpt({"d": lookalike, "l": [lookalike]}, {"d": 1, "l": 1}), {},
                  {"d": 1, "l": 1})
    t = saver.get_tuple(c)
    assert t is not None and t.checkpoint["channel_values"] == {"d": lookalike, "l": [lookalike]}
    # an unregistered dataclass is not constructed on load; a registered one is
    c = saver.put(cfg("p"), ckpt({"p": Point(1, 2)}, {"p": 1}), {}, {"p": 1})
    t = saver.get_tuple(c)
    assert t is not None and not isinstance(t.checkpoint["channel_values"]["p"], Point)
    allowed = CkptfsSaver(str(tmp_path / "s"), allowed_types=[Point])
    t = allowed.get_tuple(c)
    assert t is not None and t.checkpoint["channel_values"]["p"] == Point(1, 2)


# -- concurrency -----------------------------------------------------------------------------------
def test_concurrent_writes_and_puts_from_worker_threads(tmp_path: Path) -> None:
    saver = CkptfsSaver(str(tmp_path / "s"))
    c = saver.put(cfg("t"), ckpt({}, {}), {}, {})
    barrier = threading.Barrier(8)

    def task(i: int) -> None:
        barrier.wait()
        for j in range(5):
            saver.put_writes(c, [("ch", f"{i}-{j}-{k}") for k in range(3)], f"task-{i}-{j}")
            saver.put(cfg(f"other-{i}"), ckpt({"i": [i] * 800}, {"i": j + 1}), {}, {"i": j + 1})

    with ThreadPoolExecutor(8) as ex:
        list(ex.map(task, range(8)))
    t = saver.get_tuple(c)
    assert t is not None and len(t.pending_writes) == 8 * 5 * 3
    assert {w[2] for w in t.pending_writes} == {f"{i}-{j}-{k}" for i in range(8) for j in range(5)
                                                for k in range(3)}
    for i in range(8):
        assert len(list(saver.list(cfg(f"other-{i}")))) == 5
    assert cli("verify", "--read-data", str(tmp_path / "s")).returncode == 0


# -- deleting and copying ------------------------------------------------------------------------
def test_delete_keeps_data_shared_with_other_threads_and_copy_writes_no_chunks(
        tmp_path: Path) -> None:
    root = tmp_path / "s"
    saver = CkptfsSaver(str(root))
    shared = ["same content " * 400]
    for tid in ("a", "b"):
        c = saver.put(cfg(tid), ckpt({"s": shared}, {"s": 1}), {"run_id": tid}, {"s": 1})
        saver.put_writes(c, [("s", shared)], "t1")
    before = chunk_files(root)
    saver.copy_thread("a", "c")
    assert chunk_files(root) == before
    saver.delete_thread("a")
    saver.delete_for_runs(["b"])
    assert saver.get_tuple(cfg("a")) is None and saver.get_tuple(cfg("b")) is None
    t = saver.get_tuple(cfg("c"))
    assert t is not None and t.checkpoint["channel_values"] == {"s": shared}
    assert t.pending_writes == [("t1", "s", shared)] and t.metadata["run_id"] == "a"
    assert cli("verify", "--read-data", str(root)).returncode == 0


# -- real graphs -----------------------------------------------------------------------------------
class State(TypedDict):
    messages: Annotated[list[Any], add_messages]
    done: Annotated[list[str], operator.add]


def approval_graph() -> StateGraph[State]:
    def agent(state: State) -> dict[str, Any]:
        return {"messages": [AIMessage("calling the tool " + "x" * 3000)]}

    def approve(state: State) -> dict[str, Any]:
        return {"messages": [HumanMessage(f"approved: {interrupt({'question': 'ok?'})}")]}

    def tool(state: State) -> dict[str, Any]:
        return {"messages": [ToolMessage("result", tool_call_id="t1")], "done": ["t1"]}

    g = StateGraph(State)
    g.add_node("agent", agent)
    g.add_node("approve", approve)
    g.add_node("tool", tool)
    g.add_edge(START, "agent")
    g.add_edge("agent", "approve")
    g.add_edge("approve", "tool")
    g.add_edge("tool", END)
    return g


def test_stategraph_interrupt_then_resume_from_a_reopened_store(tmp_path: Path) -> None:
    url = str(tmp_path / "s")
    config: Any = {"configurable": {"thread_id": "user/42"}}
    app = approval_graph().compile(checkpointer=CkptfsSaver(url))
    out = app.invoke({"messages": [HumanMessage("hi")]}, config)
    assert out["__interrupt__"][0].value == {"question": "ok?"}
    assert app.get_state(config).next == ("approve",)
    # a new process: a fresh saver on the same store resumes the interrupted run
    app2 = approval_graph().compile(checkpointer=CkptfsSaver(url))
    assert app2.get_state(config).next == ("approve",)
    out = app2.invoke(Command(resume="yes"), config)
    assert [type(m).__name__ for m in out["messages"]] == [
        "HumanMessage", "AIMessage", "HumanMessage", "ToolMessage"]
    assert out["messages"][2].content == "approved: yes" and out["done"] == ["t1"]
    history = list(app2.get_state_history(config))
    assert len(history) == 5 and history[0].next == ()
    # the newest checkpoint snapshot (with async durability a pending-writes snapshot, boundary
    # "writes", may be committed after it and be the run's head)
    snaps = list(ckptfs.open_store(url).snapshots(run_id_for("user/42", "")))
    newest = next(s for s in reversed(snaps) if s.boundary == "step")
    msgs = newest.manifest.entries["channels/messages"]
    assert isinstance(msgs, Captured) and msgs.encoding == "cbor-seq"
    assert cli("verify", "--read-data", url).returncode == 0


def test_stategraph_appended_messages_dedup(tmp_path: Path) -> None:
    """40 steps appending a 2 KB message each: the store holds about the messages once (and the
    records' manifests), not the 40 growing copies a per-step full snapshot would (about 20x
    the payload)."""
    root = tmp_path / "s"

    def step(state: State) -> dict[str, Any]:
        n = len(state["messages"])
        return {"messages": [AIMessage(f"{n:05d} " + os.urandom(1000).hex(), id=f"m{n}")]}

    g = StateGraph(State)
    g.add_node("step", step)
    g.add_edge(START, "step")
    g.add_edge("step", END)
    app = g.compile(checkpointer=CkptfsSaver(str(root)))
    config: Any = {"configurable": {"thread_id": "w1"}}
    for _ in range(40):
        app.invoke({"messages": []}, config)
    final = app.get_state(config).values["messages"]
    assert len(final) == 40 and final[-1].id == "m39"
    payload = 40 * 2000
    # records (manifests, new chunk bodies) and packs: everything the checkpoints wrote
    stored = sum(p.stat().st_size for top in ("runs", "packs") if (root / top).exists()
                 for p in (root / top).rglob("*") if p.is_file())
    # each of LangGraph's checkpoints is a record with its manifest and header (4.4x payload
    # measured); full copies: ~20x payload
    assert payload <= stored < 6 * payload, stored


def test_readme_example_runs_and_sends_once(tmp_path: Path) -> None:
    store = tmp_path / "demo"
    example = Path(__file__).parent.parent / "examples" / "langgraph_agent.py"
    done = subprocess.run([sys.executable, str(example), str(store)], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "AIMessage: Done: sent to ops@example.com" in done.stdout
    assert "call-1 send_email completed" in done.stdout and "0 problem(s)" in done.stdout
    assert len(Path(f"{store}.outbox").read_text().splitlines()) == 1  # replay sent nothing


def test_effect_in_a_tool_node_runs_once_across_a_crash_and_a_new_saver(tmp_path: Path) -> None:
    """The node crashes after its side effect but before LangGraph checkpoints the step; the
    retried step (in a new saver, as after a restart) gets the recorded result, no second call."""
    from langchain_core.runnables import RunnableConfig

    url = str(tmp_path / "s")
    calls: list[str] = []
    crash = [True]

    def charge(amount: int) -> str:
        calls.append(f"charged {amount}")
        return f"receipt-{amount}"

    def build(saver: CkptfsSaver) -> Any:
        def pay(state: State, config: RunnableConfig) -> dict[str, Any]:
            receipt = saver.effect(config, "charge", charge, 120, key="invoice-7")
            if crash[0]:
                raise RuntimeError("process died after the charge")
            return {"messages": [AIMessage(receipt)], "done": [receipt]}

        g = StateGraph(State)
        g.add_node("pay", pay)
        g.add_edge(START, "pay")
        g.add_edge("pay", END)
        return g.compile(checkpointer=saver)

    config: Any = {"configurable": {"thread_id": "order-7"}}
    with pytest.raises(RuntimeError, match="process died"):
        build(CkptfsSaver(url)).invoke({"messages": [HumanMessage("pay")]}, config)
    crash[0] = False
    saver = CkptfsSaver(url)
    out = build(saver).invoke(None, config)  # resume the failed step
    assert out["done"] == ["receipt-120"] and calls == ["charged 120"]
    ledger = ckptfs.open_store(url).resume(effects_run_id("order-7")).effects()
    assert [(e.key, e.status, e.result) for e in ledger] == [
        ("invoice-7", "completed", "receipt-120")]
    saver.delete_thread("order-7")  # forgets the ledger too: a new order-7 charges again
    build(saver).invoke({"messages": [HumanMessage("pay")]}, config)
    assert calls == ["charged 120", "charged 120"]
