"""CkptfsSaver's O(change) list channels (issue 14, ``integrations/langgraph/appends.py``): a
message history that grew packs only the new messages, and every other change (a message
replaced, removed, edited in place, a dict item changed) still reaches the store: the state
restored (in this process and in a fresh one) equals what LangGraph holds, step by step."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest

pytest.importorskip("langgraph")

from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage  # noqa: E402
from langgraph.checkpoint.base import empty_checkpoint  # noqa: E402
from langgraph.checkpoint.base.id import uuid6  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402
from langgraph.graph import END, START, StateGraph  # noqa: E402
from langgraph.graph.message import add_messages  # noqa: E402

from ckptfs.integrations.langgraph import CkptfsSaver  # noqa: E402


class State(TypedDict):
    messages: Annotated[list[Any], add_messages]
    n: int


#: whether the node also changes committed messages in place. Not under async durability:
#: there LangGraph serialises a checkpoint in the background while the next step runs, so
#: any saver (this one with appends=False too) may store a change made after the checkpoint
INPLACE = [True]
#: what the node does at step i (beside appending one message); every 4th step appends only
EDITS = ("append", "replace", "remove", "inplace", "append", "inplace-field", "append2",
         "replace-first", "append")


def step(state: State) -> dict[str, Any]:
    i = state["n"]
    msgs = state["messages"]
    out: list[Any] = [AIMessage(f"reply {i}", id=f"a{i}")]
    op = EDITS[i % len(EDITS)]
    if op.startswith("inplace") and not INPLACE[0]:
        op = "append"
    if op == "replace" and len(msgs) > 2:  # an edit through add_messages: same id, new object
        out.append(HumanMessage(f"edited at {i}", id=msgs[1].id))
    elif op == "replace-first":
        out.append(AIMessage(f"first edited at {i}", id=msgs[0].id))
    elif op == "remove" and len(msgs) > 3:
        out.append(RemoveMessage(id=msgs[2].id))
    elif op == "inplace":  # a committed message changed in place (not a LangGraph idiom)
        msgs[0].content = f"mutated in place at {i}"
    elif op == "inplace-field" and len(msgs) > 1:
        msgs[-1].name = f"named at {i}"
    elif op == "append2":
        out.append(AIMessage(f"second reply {i}", id=f"b{i}"))
    return {"messages": out, "n": i + 1}


def build(n: int) -> Any:
    g = StateGraph(State)
    g.add_node("step", step)
    g.add_edge(START, "step")
    g.add_conditional_edges("step", lambda s: "step" if s["n"] < n else END)
    return g


def dump(values: dict[str, Any]) -> list[Any]:
    return [[type(m).__name__, m.id, m.content, m.name] for m in values["messages"]]


APPENDS = [True]


def run_both(tmp_path: Path, n: int, durability: str = "sync") -> tuple[Any, Any, CkptfsSaver]:
    """The same graph run with InMemorySaver and CkptfsSaver; (memory app, ckptfs app, saver)."""
    saver = CkptfsSaver(str(tmp_path / "store"), appends=APPENDS[0])
    apps = [build(n).compile(checkpointer=InMemorySaver()), build(n).compile(checkpointer=saver)]
    for app in apps:
        app.invoke({"messages": [HumanMessage("hi", id="h0")], "n": 0},
                   {"configurable": {"thread_id": "t"}, "recursion_limit": n + 10},
                   durability=durability)
    return apps[0], apps[1], saver


@pytest.mark.parametrize("durability", ["sync", "async"])
def test_every_checkpoint_restores_what_langgraph_holds(tmp_path: Path, durability: str) -> None:
    INPLACE[0] = durability == "sync"
    try:
        mem, ck, saver = run_both(tmp_path, 30, durability)
    finally:
        INPLACE[0] = True
    conf = {"configurable": {"thread_id": "t"}}
    want = [dump(s.values) for s in mem.get_state_history(conf)]
    got = [dump(s.values) for s in ck.get_state_history(conf)]
    assert got == want and len(want) > 30
    fresh = build(30).compile(checkpointer=CkptfsSaver(str(tmp_path / "store")))
    assert [dump(s.values) for s in fresh.get_state_history(conf)] == want
    saver.close()


def test_fresh_process_restores_the_head(tmp_path: Path) -> None:
    mem, _, saver = run_both(tmp_path, 20)
    saver.close()
    code = ("import json, sys; from tests.test_langgraph_appends import build, dump; "
            "from ckptfs.integrations.langgraph import CkptfsSaver; "
            "app = build(20).compile(checkpointer=CkptfsSaver(sys.argv[1])); "
            "print(json.dumps(dump(app.get_state({'configurable': {'thread_id': 't'}}).values)))")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "store")], check=True,
                         capture_output=True, text=True, timeout=120,
                         cwd=Path(__file__).parent.parent)
    assert json.loads(out.stdout) == dump(mem.get_state({"configurable": {"thread_id": "t"}}
                                                        ).values)


def counting(saver: CkptfsSaver) -> list[int]:
    """Count the values the saver packs (its Packer.pack calls)."""
    calls = [0]
    pack = saver._packer.pack

    def counted(value: Any) -> Any:
        calls[0] += 1
        return pack(value)

    saver._packer.pack = counted  # type: ignore[method-assign]
    return calls


def cfg(cid: str | None = None) -> dict[str, Any]:
    c: dict[str, Any] = {"thread_id": "t", "checkpoint_ns": ""}
    if cid:
        c["checkpoint_id"] = cid
    return {"configurable": c}


def put(saver: CkptfsSaver, parent: str | None, msgs: list[Any], v: int) -> str:
    cp = empty_checkpoint()
    cp["id"] = str(uuid6(clock_seq=-1))
    cp["channel_values"] = {"messages": msgs}
    cp["channel_versions"] = {"messages": v}
    saver.put(cfg(parent), cp, {"step": v}, {"messages": v})
    return cp["id"]


def test_a_grown_list_packs_only_its_new_items(tmp_path: Path) -> None:
    saver = CkptfsSaver(str(tmp_path / "s"))
    calls = counting(saver)
    msgs = [AIMessage(f"m{i}", id=f"m{i}") for i in range(50)]
    cid = put(saver, None, msgs, 1)
    for v in range(2, 8):  # step after step (the memo stays consistent with itself)
        before = calls[0]
        msgs = [*msgs, AIMessage(f"new {v}", id=f"new{v}")]  # as add_messages: a new list
        cid = put(saver, cid, msgs, v)
        assert calls[0] - before <= 3, v  # the new message, the checkpoint doc, the metadata
        got = saver.get_tuple(cfg(cid))
        assert got is not None and got.checkpoint["channel_values"]["messages"] == msgs


@pytest.mark.parametrize("change", ["replace", "remove", "content", "extra-field", "dict-key",
                                    "dict-value", "reorder"])
def test_a_change_in_the_prefix_is_never_dropped(tmp_path: Path, change: str) -> None:
    saver = CkptfsSaver(str(tmp_path / "s"))
    msgs: list[Any] = [AIMessage(f"m{i}", id=f"m{i}") for i in range(10)] + [{"k": 1}]
    cid = put(saver, None, msgs, 1)
    msgs = list(msgs)
    if change == "replace":
        msgs[3] = AIMessage("other", id="m3")
    elif change == "remove":
        del msgs[3]
    elif change == "content":
        msgs[3].content = "edited in place"
    elif change == "extra-field":  # a pydantic extra: outside the message's __dict__
        msgs[3].foo = 1
    elif change == "dict-key":
        msgs[10]["j"] = 2
    elif change == "dict-value":
        msgs[10]["k"] = 5
    else:
        msgs[2], msgs[3] = msgs[3], msgs[2]
    msgs.append(AIMessage("new", id="new"))
    cid = put(saver, cid, msgs, 2)
    for s in (saver, CkptfsSaver(str(tmp_path / "s"))):
        got = s.get_tuple(cfg(cid))
        assert got is not None and got.checkpoint["channel_values"]["messages"] == msgs


def test_appends_false_packs_everything(tmp_path: Path) -> None:
    saver = CkptfsSaver(str(tmp_path / "s"), appends=False)
    calls = counting(saver)
    msgs = [AIMessage(f"m{i}", id=f"m{i}") for i in range(20)]
    cid = put(saver, None, msgs, 1)
    before = calls[0]
    put(saver, cid, [*msgs, AIMessage("new", id="new")], 2)
    assert calls[0] - before >= 21


class _Obj:
    def __init__(self, v: Any) -> None:
        self.v = v


def _mutate(x: Any, op: str) -> None:
    """One change to an item made in place (some are no change at all)."""
    if op == "field":
        if isinstance(x, AIMessage):
            x.content = "edited"
        elif isinstance(x, _Obj):
            x.v = "edited"
        elif isinstance(x, dict):
            x["a"] = "edited"
    elif op == "same-object":
        if isinstance(x, AIMessage):
            x.content = x.content
        elif isinstance(x, _Obj):
            x.v = x.v
    elif op == "equal-copy":  # an equal but new object: stored bytes could differ
        if isinstance(x, AIMessage):
            x.additional_kwargs = dict(x.additional_kwargs)
        elif isinstance(x, dict):
            x["b"] = list(x["b"])
    elif op == "extra" and isinstance(x, AIMessage):
        x.foo = 1  # type: ignore[attr-defined]
    elif op == "add-field":
        if isinstance(x, _Obj):
            x.w = 1  # type: ignore[attr-defined]
        elif isinstance(x, dict):
            x["z"] = 1
    elif op == "del-field":
        if isinstance(x, _Obj):
            del x.v
        elif isinstance(x, dict):
            x.pop("a")
    elif op == "rename-last" and isinstance(x, dict):
        x["c"] = x.pop("b")
    elif op == "nested":  # a change inside a field (issue 36)
        if isinstance(x, AIMessage):
            x.additional_kwargs["k"] = "v"
        elif isinstance(x, _Obj):
            x.v = [x.v]
        elif isinstance(x, dict):
            x["b"].append(1)


def _deep(x: Any) -> Any:
    """Everything an item holds, with every leaf's type and repr: two items with equal
    ``_deep`` are stored as the same bytes."""
    if type(x) in (dict, list, tuple):
        pairs = x.items() if type(x) is dict else enumerate(x)
        return (type(x).__name__, [(_deep(k), _deep(v)) for k, v in pairs])
    if hasattr(x, "__dict__"):
        return (type(x).__name__, _deep(vars(x)),
                _deep(getattr(x, "__pydantic_extra__", None)))
    return (type(x).__name__, repr(x))


def test_the_prefix_check_sees_exactly_the_changes_that_alter_an_item() -> None:
    """``appends.unchanged`` (the per-step check of the committed prefix against the copies
    taken when it was packed) says "unchanged" exactly when every item still holds what it
    held, leaf types included, whatever changed in place: a field assigned, a change inside
    a field (issue 36), an equal copy, an extra field, a field added or removed; messages,
    plain objects, dicts, scalars and mixes of them."""
    import random

    from ckptfs.integrations.langgraph import appends as ap

    rng = random.Random(14)
    makers = {"msg": lambda i: AIMessage(f"m{i}", id=f"id{i}"),
              "dict": lambda i: {"a": i, "b": [i]}, "obj": lambda i: _Obj(i),
              "scalar": lambda i: rng.choice([i, f"s{i}", None, 1.5])}
    ops = ("none", "field", "same-object", "equal-copy", "extra", "add-field", "del-field",
           "rename-last", "nested")
    changed = 0
    for _ in range(400):
        kind = rng.choice([*makers, "mixed"])
        items = [makers[kind if kind != "mixed" else rng.choice(list(makers))](i)
                 for i in range(rng.randint(0, 8))]
        copies = ap._freeze_all(items)
        assert copies is not None
        memo = ap.ListMemo(list(items), copies[0], copies[1], [], False)
        before = _deep(items)
        if items:
            _mutate(rng.choice(items), rng.choice(ops))
        want = _deep(items) == before
        assert ap.unchanged(items, memo) is want
        changed += not want
    assert changed > 50  # the changes were seen often enough to mean something


def test_a_field_the_copy_cannot_see_into_takes_the_full_path(tmp_path: Path) -> None:
    """An item whose field holds a mutable object the saver cannot copy (a set here) is
    never taken as unchanged: the channel is packed whole every step, so a change made in
    place to that object still reaches the store."""
    saver = CkptfsSaver(str(tmp_path / "s"))
    msgs: list[Any] = [AIMessage(f"m{i}", id=f"m{i}") for i in range(5)]
    msgs[1].additional_kwargs["tags"] = {"a"}
    cid = put(saver, None, msgs, 1)
    msgs[1].additional_kwargs["tags"].add("b")
    msgs = [*msgs, AIMessage("new", id="new")]
    calls = counting(saver)
    cid = put(saver, cid, msgs, 2)
    assert calls[0] >= len(msgs)
    got = CkptfsSaver(str(tmp_path / "s")).get_tuple(cfg(cid))
    assert got is not None
    assert got.checkpoint["channel_values"]["messages"][1].additional_kwargs["tags"] == {
        "a", "b"}


def test_a_long_run_keeps_a_bounded_number_of_snapshots_read(tmp_path: Path) -> None:
    """The saver's run index keeps at most LOADED_MAX snapshots (and META_MAX metadata) read:
    before, every committed and every listed snapshot stayed in memory for the run's life
    (its manifest grows with the state). History, lookups and deletes still see them all."""
    from ckptfs.integrations.langgraph.layout import LOADED_MAX, META_MAX

    n = LOADED_MAX + 40
    mem, ck, saver = run_both(tmp_path, n)
    conf = {"configurable": {"thread_id": "t"}}
    idx = next(iter(saver._runs.values()))
    assert len(idx.seqs) > n and len(idx.loaded) <= LOADED_MAX
    want = [dump(s.values) for s in mem.get_state_history(conf)]
    assert [dump(s.values) for s in ck.get_state_history(conf)] == want
    assert len(idx.loaded) <= LOADED_MAX and len(idx.meta) <= META_MAX
    first = list(saver.list(conf))[-1]  # the oldest checkpoint, read again after eviction
    assert saver.get_tuple(first.config) is not None
    assert dump(ck.get_state(conf).values) == want[0]
    saver.close()


def test_appends_identity_packs_new_items_without_walking_the_old_ones(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """appends="identity" (issue 36): a list holding the same objects plus new ones packs the
    new ones only, and never walks the committed items' fields (appends._unchanged, O(all
    items) a step); a replaced, removed or reordered item is still seen (identity), and the
    thread reads back as LangGraph held it."""
    from ckptfs.integrations.langgraph import appends as appends_mod

    def walked(*args: Any) -> bool:
        raise AssertionError("the committed items' fields were walked")

    monkeypatch.setattr(appends_mod, "unchanged", walked)
    monkeypatch.setattr(appends_mod, "_freeze_all", walked)
    saver = CkptfsSaver(str(tmp_path / "s"), appends="identity")
    calls = counting(saver)
    msgs: list[Any] = [AIMessage(f"m{i}", id=f"m{i}") for i in range(30)]
    cid = put(saver, None, msgs, 1)
    for v in range(2, 6):
        before = calls[0]
        msgs = [*msgs, AIMessage(f"new {v}", id=f"new{v}")]
        cid = put(saver, cid, msgs, v)
        assert calls[0] - before <= 3, v
    msgs = list(msgs)
    msgs[3] = AIMessage("other", id="m3")  # replaced: not the same object
    del msgs[5]
    cid = put(saver, cid, msgs, 9)
    for s in (saver, CkptfsSaver(str(tmp_path / "s"))):
        got = s.get_tuple(cfg(cid))
        assert got is not None and got.checkpoint["channel_values"]["messages"] == msgs
    with pytest.raises(ValueError, match="appends"):
        CkptfsSaver(str(tmp_path / "s"), appends="sometimes")


@pytest.mark.parametrize("change", ["nested-dict", "nested-list", "nested-extra",
                                    "dict-item-nested"])
def test_a_change_inside_a_field_of_a_committed_item_is_stored(tmp_path: Path,
                                                               change: str) -> None:
    """A change made in place *inside* a field of a committed item (a key added to a
    message's ``additional_kwargs``, a tool call appended, a pydantic extra's list grown, a
    dict item's nested list changed) reaches the store: the default saver compares each
    committed item's fields with a deep copy taken when it was packed (issue 36; before, it
    compared the fields' objects only, so these were dropped)."""
    saver = CkptfsSaver(str(tmp_path / "s"))
    msgs: list[Any] = [AIMessage(f"m{i}", id=f"m{i}") for i in range(10)] + [{"k": [1]}]
    msgs[4].foo = [1]
    cid = put(saver, None, msgs, 1)
    for v in range(2, 5):
        msgs = list(msgs)
        if v == 3:
            if change == "nested-dict":
                msgs[3].additional_kwargs["k"] = "v"
            elif change == "nested-list":
                msgs[3].tool_calls.append({"name": "f", "args": {}, "id": "c1",
                                           "type": "tool_call"})
            elif change == "nested-extra":
                msgs[4].foo.append(2)
            else:
                msgs[10]["k"].append(2)
        msgs.append(AIMessage(f"new {v}", id=f"new{v}"))
        cid = put(saver, cid, msgs, v)
        for s in (saver, CkptfsSaver(str(tmp_path / "s"))):
            got = s.get_tuple(cfg(cid))
            assert got is not None
            assert got.checkpoint["channel_values"]["messages"] == msgs
            if change == "nested-extra":
                assert got.checkpoint["channel_values"]["messages"][4].foo == msgs[4].foo
