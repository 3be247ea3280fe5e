"""CkptfsSaver folding the writes that come ahead of their checkpoint into its record
(fold.py): one record per superstep, held writes visible to the saver at once and durable as
documented (README "LangGraph", RELIABILITY.md), across processes killed with SIGKILL,
interrupts and resumes in another process, a failed task in a parallel superstep, and
LangGraph's own conformance suite with folding off (tests/test_langgraph_conformance.py runs
it with it on)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langgraph")

from langgraph.checkpoint.base import empty_checkpoint  # noqa: E402
from langgraph.checkpoint.base.id import uuid6  # noqa: E402

from ckptfs.integrations.langgraph import CkptfsSaver, run_id_for  # noqa: E402
from ckptfs.integrations.langgraph.fold import L_WRITES_OF  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def cfg(tid: str, cid: str | None = None) -> dict[str, Any]:
    c: dict[str, Any] = {"thread_id": tid, "checkpoint_ns": ""}
    if cid:
        c["checkpoint_id"] = cid
    return {"configurable": c}


def ckpt(values: dict[str, Any]) -> Any:
    cp = empty_checkpoint()
    cp["id"] = str(uuid6(clock_seq=-1))
    cp["channel_values"] = values
    cp["channel_versions"] = {k: 1 for k in values}
    return cp


def records(saver: CkptfsSaver, tid: str) -> list[int]:
    return saver.store.repo.record_seqs(run_id_for(tid, ""))


@pytest.mark.parametrize("fold", [True, False])
def test_early_writes_go_into_their_checkpoints_record_and_another_saver_reads_them(
        tmp_path: Path, fold: bool) -> None:
    """put, put_writes of the next checkpoint ahead of it (async durability), its put: with
    folding two records, the second holding its own writes; without, three. A second saver
    (folding on, reading either layout) finds the writes in both, while the first saver is
    still open."""
    url = str(tmp_path / "s")
    a = CkptfsSaver(url, fold_writes=fold)
    c1 = a.put(cfg("t"), ckpt({"i": 0}), {"step": 0}, {"i": 1})
    cp2 = ckpt({"i": 1})
    a.put_writes(cfg("t", cp2["id"]), [("i", 1), ("x", "y")], "task")
    assert len(records(a, "t")) == (1 if fold else 2)
    c2 = a.put(c1, cp2, {"step": 1}, {"i": 2})
    assert a.get_tuple(c2).pending_writes == [  # type: ignore[union-attr]
        ("task", "i", 1), ("task", "x", "y")]
    assert len(records(a, "t")) == (2 if fold else 3)
    b = CkptfsSaver(url)
    t1, t2 = b.get_tuple(c1), b.get_tuple(c2)
    assert t2 is not None and t2.pending_writes == [("task", "i", 1), ("task", "x", "y")]
    assert t1 is not None and t1.pending_writes == [] and t2.checkpoint["channel_values"] == {
        "i": 1}
    assert [t.config for t in b.list(cfg("t"))] == [c2, c1]
    head = a.store.repo.snapshot_at(run_id_for("t", ""), records(a, "t")[-1])
    assert (head.manifest.labels.get(L_WRITES_OF) == cp2["id"]) is fold
    a.close()
    b.close()


@pytest.mark.parametrize("fold", [True, False])
def test_writes_of_a_committed_checkpoint_are_durable_when_put_writes_returns(
        tmp_path: Path, fold: bool) -> None:
    """Issue 30: writes of a committed checkpoint are a record of their own when put_writes
    returns, as SqliteSaver commits them (they used to wait up to 50 ms for the child's put,
    and a crash meanwhile ran the task again); a second saver finds them at once."""
    url = str(tmp_path / "s")
    a = CkptfsSaver(url, fold_writes=fold)
    c1 = a.put(cfg("t"), ckpt({"i": 0}), {}, {"i": 1})
    a.put_writes(c1, [("i", 1)], "task")
    assert len(records(a, "t")) == 2
    assert a._fold is None or not a._fold.held()
    got = CkptfsSaver(url).get_tuple(c1)
    assert got is not None and got.pending_writes == [("task", "i", 1)]
    a.close()


def test_writes_of_several_checkpoints_each_go_to_their_own_record(tmp_path: Path) -> None:
    """LangGraph's async durability hands over writes ahead of their checkpoints, and writes
    of an older checkpoint late: writes ahead wait, each checkpoint's for its own put; writes
    of a committed checkpoint are committed at once. A second saver finds every row."""
    url = str(tmp_path / "s")
    a = CkptfsSaver(url)
    c1 = a.put(cfg("t"), ckpt({"i": 0}), {}, {"i": 1})
    cp2, cp3 = ckpt({"i": 1}), ckpt({"i": 2})
    a.put_writes(c1, [("i", "w1")], "t1")  # committed at once
    a.put_writes(cfg("t", cp2["id"]), [("i", "w2")], "t2")  # ahead of its checkpoint
    a.put_writes(cfg("t", cp3["id"]), [("i", "w3")], "t3")
    assert len(records(a, "t")) == 2  # the two ahead are held
    c2 = a.put(c1, cp2, {}, {"i": 2})  # holds its own writes
    a.put_writes(c1, [("i", "late")], "t1b")  # c1 has a child: committed at once
    assert len(records(a, "t")) == 4
    c3 = a.put(c2, cp3, {}, {"i": 3})  # holds its own
    c4 = a.put(c3, ckpt({"i": 3}), {}, {"i": 4})
    assert len(records(a, "t")) == 6
    assert a._fold is not None and not a._fold.held()
    b = CkptfsSaver(url)
    assert sorted(b.get_tuple(c1).pending_writes) == [  # type: ignore[union-attr]
        ("t1", "i", "w1"), ("t1b", "i", "late")]
    assert b.get_tuple(c2).pending_writes == [("t2", "i", "w2")]  # type: ignore[union-attr]
    assert b.get_tuple(c3).pending_writes == [("t3", "i", "w3")]  # type: ignore[union-attr]
    assert b.get_tuple(c4).pending_writes == []  # type: ignore[union-attr]
    a.close()


def test_at_most_max_held_checkpoints_per_run_wait(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Writes of more than MAX_HELD checkpoints of a run (ahead of their puts): the oldest go
    to a snapshot of their own at once (the bound lowered to 16 here: at its 4,096 the
    close() below commits 4,096 records)."""
    from ckptfs.integrations.langgraph import fold as fold_mod

    MAX_HELD = 16
    monkeypatch.setattr(fold_mod, "MAX_HELD", MAX_HELD)
    url = str(tmp_path / "s")
    a = CkptfsSaver(url)
    a.put(cfg("t"), ckpt({"i": 0}), {}, {"i": 1})
    ids = [ckpt({})["id"] for _ in range(MAX_HELD + 2)]
    for n, cid in enumerate(ids):
        a.put_writes(cfg("t", cid), [("i", n)], f"task-{n}")
    assert len(records(a, "t")) == 1 + 2
    b = CkptfsSaver(url)
    assert a._fold is not None and len(a._fold.held()) == MAX_HELD
    a.close()
    assert len(records(b, "t")) == 1 + len(ids)


def test_writes_far_ahead_of_their_puts_still_fold_into_them(tmp_path: Path) -> None:
    """Under async durability with the async API, LangGraph's steps run ahead of its queued
    puts (each waits for the previous one): the writes of 200 checkpoints arrive before any
    of their puts. Each put still takes its own writes into its record: one record per
    checkpoint. Before (issue 36), only 64 were held per run and the older ones each went to
    a record of their own: 3.6 fsyncs a superstep at N = 1000 instead of 2."""
    url = str(tmp_path / "s")
    a = CkptfsSaver(url)
    c = a.put(cfg("t"), ckpt({"i": 0}), {}, {"i": 1})
    cps = [ckpt({"i": n}) for n in range(1, 201)]
    for n, cp in enumerate(cps):
        a.put_writes(cfg("t", cp["id"]), [("i", n)], f"task-{n}")
    assert len(records(a, "t")) == 1
    for n, cp in enumerate(cps):
        c = a.put(c, cp, {}, {"i": n + 2})
    assert len(records(a, "t")) == 1 + len(cps)
    assert a._fold is not None and not a._fold.held()
    a.close()
    b = CkptfsSaver(url)
    for n, cp in enumerate(cps):
        got = b.get_tuple(cfg("t", cp["id"]))
        assert got is not None and got.pending_writes == [(f"task-{n}", "i", n)]
    b.close()


def test_special_writes_are_committed_at_once_with_what_was_held(tmp_path: Path) -> None:
    url = str(tmp_path / "s")
    a = CkptfsSaver(url)
    a.put(cfg("t"), ckpt({"i": 0}), {}, {"i": 1})
    cp2 = ckpt({"i": 1})
    c2 = cfg("t", cp2["id"])
    a.put_writes(c2, [("i", 1)], "ok-task")
    assert len(records(a, "t")) == 1  # held: ahead of its checkpoint
    a.put_writes(c2, [("__error__", "boom")], "bad-task")
    assert len(records(a, "t")) == 2
    assert a._fold is not None and not a._fold.held()
    a.close()
    b = CkptfsSaver(url)
    b.put(cfg("t", a.get_tuple(cfg("t")).config["configurable"]["checkpoint_id"]),  # type: ignore[union-attr]
          cp2, {}, {"i": 2})
    got = b.get_tuple(c2)
    assert got is not None and sorted(got.pending_writes) == [
        ("bad-task", "__error__", "boom"), ("ok-task", "i", 1)]


def test_close_and_thread_operations_commit_held_writes(tmp_path: Path) -> None:
    """Writes held for a checkpoint not committed yet are committed before copy_thread acts,
    and at close(); a later put of that checkpoint (another saver) finds them."""
    url = str(tmp_path / "s")
    a = CkptfsSaver(url)
    c1 = a.put(cfg("t"), ckpt({"i": 0}), {}, {"i": 1})
    cp2 = ckpt({"i": 1})
    a.put_writes(cfg("t", cp2["id"]), [("i", 1)], "task")
    assert a._fold is not None and a._fold.held()
    a.copy_thread("t", "u")  # committed first
    assert not a._fold.held()
    cp3 = ckpt({"i": 2})
    a.put_writes(cfg("t", cp3["id"]), [("i", 2)], "task-2")
    assert a._fold.held()
    a.close()
    assert not a._fold.held()
    b = CkptfsSaver(url)
    c2 = b.put(c1, cp2, {}, {"i": 2})
    b.put(c2, cp3, {}, {"i": 3})
    got2, got3 = b.get_tuple(cfg("t", cp2["id"])), b.get_tuple(cfg("t", cp3["id"]))
    assert got2 is not None and got2.pending_writes == [("task", "i", 1)]
    assert got3 is not None and got3.pending_writes == [("task-2", "i", 2)]
    b.close()


CHILD = """
import os, signal, sys
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.base.id import uuid6
from ckptfs.integrations.langgraph import CkptfsSaver, run_id_for
url, mode = sys.argv[1], sys.argv[2]
saver = CkptfsSaver(url)
cp = empty_checkpoint()
cp["id"] = str(uuid6(clock_seq=-1))
cp["channel_values"] = {"i": 0}
cp["channel_versions"] = {"i": 1}
c = saver.put({"configurable": {"thread_id": "t", "checkpoint_ns": ""}}, cp, {}, {"i": 1})
print(c["configurable"]["checkpoint_id"], flush=True)
if mode == "interrupt":
    saver.put_writes(c, [("__interrupt__", {"q": "ok?"})], "task")
    os.kill(os.getpid(), signal.SIGKILL)
saver.put_writes(c, [("i", 1)], "task")
# no put follows, no close, no atexit: the writes of a committed checkpoint are not held
print("still held" if saver._fold.held() else "committed", flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def _killed_child(url: str, mode: str) -> list[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", CHILD, url, mode], capture_output=True,
                         text=True, timeout=120, env=env)
    assert out.returncode == -signal.SIGKILL, out.stderr
    return out.stdout.split()


def test_sigkill_right_after_put_writes_keeps_the_writes(tmp_path: Path) -> None:
    """A process that put_writes on its committed checkpoint and then no put dies by SIGKILL
    at once (no close, no atexit): a new one finds the writes."""
    url = str(tmp_path / "s")
    cid, state = _killed_child(url, "writes")
    assert state == "committed"
    got = CkptfsSaver(url).get_tuple(cfg("t", cid))
    assert got is not None and got.pending_writes == [("task", "i", 1)]


def test_sigkill_right_after_an_interrupt_keeps_it(tmp_path: Path) -> None:
    """An interrupt's writes are durable when put_writes returns: SIGKILL at once loses none."""
    url = str(tmp_path / "s")
    (cid,) = _killed_child(url, "interrupt")
    got = CkptfsSaver(url).get_tuple(cfg("t", cid))
    assert got is not None and got.pending_writes == [("task", "__interrupt__", {"q": "ok?"})]


GRAPHS = """
import os, sys, json
from typing import Annotated, Any, TypedDict
import operator
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt
from ckptfs.integrations.langgraph import CkptfsSaver

class S(TypedDict):
    log: Annotated[list[str], operator.add]

url, kind, step, marks = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
saver = CkptfsSaver(url)
conf = {"configurable": {"thread_id": "t"}}

def mark(name):
    with open(marks, "a") as f:
        f.write(name + "\\n")

if kind == "approval":
    def ask(s):
        mark("ask")
        return {"log": [f"approved: {interrupt('ok?')}"]}
    def done(s):
        mark("done")
        return {"log": ["done"]}
    g = StateGraph(S)
    g.add_node("ask", ask)
    g.add_node("done", done)
    g.add_edge(START, "ask")
    g.add_edge("ask", "done")
    g.add_edge("done", END)
    app = g.compile(checkpointer=saver)
    if step == "1":
        out = app.invoke({"log": []}, conf)
        print(json.dumps(out["__interrupt__"][0].value), flush=True)
        os.kill(os.getpid(), 9)  # no close: the interrupt must already be durable
    state = app.get_state(conf)
    print(json.dumps([i.value for t in state.tasks for i in t.interrupts]), flush=True)
    out = app.invoke(Command(resume="yes"), conf)
    print(json.dumps(out["log"]), flush=True)
else:  # a parallel superstep: "ok" succeeds, "flaky" fails on the first run
    def ok(s):
        mark("ok")
        return {"log": ["ok"]}
    def flaky(s):
        mark("flaky")
        if step == "1":
            raise RuntimeError("flaky failed")
        return {"log": ["flaky"]}
    g = StateGraph(S)
    g.add_node("ok", ok)
    g.add_node("flaky", flaky)
    g.add_edge(START, "ok")
    g.add_edge(START, "flaky")
    g.add_edge("ok", END)
    g.add_edge("flaky", END)
    app = g.compile(checkpointer=saver)
    if step == "1":
        try:
            app.invoke({"log": []}, conf)
        except RuntimeError:
            print("failed", flush=True)
        sys.exit(0)  # no close(): the atexit flush commits what is held
    out = app.invoke(None, conf)
    print(json.dumps(sorted(out["log"])), flush=True)
"""


def _graph(url: str, kind: str, step: str, marks: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-c", GRAPHS, url, kind, step, str(marks)],
                          capture_output=True, text=True, timeout=120, env=env)


def test_interrupt_then_resume_in_another_process(tmp_path: Path) -> None:
    """Human approval: process 1 runs to the interrupt and dies by SIGKILL; process 2 sees
    the pending interrupt and resumes with the answer; the node asked once more, as LangGraph
    re-runs an interrupted node on resume, and the graph finished."""
    url, marks = str(tmp_path / "s"), tmp_path / "marks"
    first = _graph(url, "approval", "1", marks)
    assert first.returncode == -signal.SIGKILL and json.loads(first.stdout) == "ok?", first.stderr
    second = _graph(url, "approval", "2", marks)
    assert second.returncode == 0, second.stderr
    lines = second.stdout.split("\n")
    assert json.loads(lines[0]) == ["ok?"]
    assert json.loads(lines[1]) == ["approved: yes", "done"]
    assert marks.read_text().split() == ["ask", "ask", "done"]


def test_a_failed_task_in_a_parallel_superstep_keeps_the_other_tasks_writes(
        tmp_path: Path) -> None:
    """One task of a superstep fails: the error and the other task's writes are kept (the
    error is committed at once with what was held; writes that came after it at exit), so
    resuming in another process runs only the failed task again."""
    url, marks = str(tmp_path / "s"), tmp_path / "marks"
    first = _graph(url, "parallel", "1", marks)
    assert first.returncode == 0 and first.stdout.strip() == "failed", first.stderr
    second = _graph(url, "parallel", "2", marks)
    assert second.returncode == 0, second.stderr
    assert json.loads(second.stdout) == ["flaky", "ok"]
    assert sorted(marks.read_text().split()) == ["flaky", "flaky", "ok"]


def test_conformance_with_folding_off() -> None:
    """LangGraph's checkpointer conformance suite, every capability, with fold_writes=False
    (tests/test_langgraph_conformance.py runs it with the default, folding on)."""
    pytest.importorskip("langgraph.checkpoint.conformance")
    from langgraph.checkpoint.conformance import checkpointer_test, validate
    from langgraph.checkpoint.conformance.report import ProgressCallbacks

    @checkpointer_test(name="ckptfs-nofold")
    async def unfolded() -> AsyncIterator[CkptfsSaver]:
        root = tempfile.mkdtemp(prefix="ckptfs-lg-nofold-")
        saver = CkptfsSaver(f"{root}/store", fold_writes=False)
        try:
            yield saver
        finally:
            saver.close()
            shutil.rmtree(root, ignore_errors=True)

    report = asyncio.run(validate(unfolded, progress=ProgressCallbacks.verbose()))
    failed = {cap: r.failures for cap, r in report.results.items() if not r.passed}
    assert report.passed_all_base() and report.passed_all(), failed


def test_a_saver_nobody_holds_is_collected(tmp_path: Path) -> None:
    """A saver dropped unclosed, holding nothing, is garbage collected (the holder keeps
    only a weak reference to it)."""
    import gc
    import weakref

    a = CkptfsSaver(str(tmp_path / "s"))
    c1 = a.put(cfg("t"), ckpt({"i": 0}), {}, {"i": 1})
    a.put_writes(c1, [("i", 1)], "task")
    assert a._fold is not None and not a._fold.held()
    ref = weakref.ref(a)
    del a
    gc.collect()
    assert ref() is None
    got = CkptfsSaver(str(tmp_path / "s")).get_tuple(c1)
    assert got is not None and got.pending_writes == [("task", "i", 1)]


def test_writes_before_their_checkpoint_wait_for_its_put_and_go_into_its_record(
        tmp_path: Path) -> None:
    """Async durability: a task's writes reach the saver before their checkpoint's put. They
    have no deadline (no resume can use them before that put), and that put commits them in
    the checkpoint's own record: durable exactly when the checkpoint is; a fresh saver then
    finds them (here no child put follows). Holding starts no thread."""
    import threading

    url = str(tmp_path / "s")
    a = CkptfsSaver(url)
    c1 = a.put(cfg("t"), ckpt({"i": 0}), {}, {"i": 1})
    cp2 = ckpt({"i": 1})
    threads = threading.active_count()
    a.put_writes(cfg("t", cp2["id"]), [("i", "early")], "task")
    assert a._fold is not None and a._fold.get(run_id_for("t", ""), cp2["id"]) is not None
    assert threading.active_count() == threads
    c2 = a.put(c1, cp2, {}, {"i": 2})
    assert not a._fold.held() and len(records(a, "t")) == 2
    got = CkptfsSaver(url).get_tuple(c2)
    assert got is not None and got.pending_writes == [("task", "i", "early")]
    a.close()


DROPPED = """
import gc, json, sys
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.base.id import uuid6
from ckptfs.integrations.langgraph import CkptfsSaver
def ckpt(i):
    cp = empty_checkpoint()
    cp["id"] = str(uuid6(clock_seq=-1))
    cp["channel_values"] = {"i": i}
    cp["channel_versions"] = {"i": i + 1}
    return cp
saver = CkptfsSaver(sys.argv[1])
c1 = saver.put({"configurable": {"thread_id": "t", "checkpoint_ns": ""}}, ckpt(0), {}, {"i": 1})
cp2 = ckpt(1)
saver.put_writes({"configurable": {**c1["configurable"], "checkpoint_id": cp2["id"]}},
                 [("i", "early")], "task")  # ahead of cp2's put, which never comes: held
print(json.dumps([c1, cp2]), flush=True)
del saver  # dropped unclosed: kept (fold._PINNED) until interpreter exit commits the writes
gc.collect()
"""


def test_a_saver_dropped_unclosed_still_commits_held_writes(tmp_path: Path) -> None:
    """A saver dropped without close() while it holds writes (ahead of their checkpoint) is
    kept, and its writes are committed at interpreter exit; the checkpoint's put in a later
    process finds them."""
    url = str(tmp_path / "s")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", DROPPED, url], capture_output=True, text=True,
                         timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    c1, cp2 = json.loads(out.stdout)
    b = CkptfsSaver(url)
    c2 = b.put(c1, cp2, {}, {"i": 2})
    got = b.get_tuple(c2)
    assert got is not None and got.pending_writes == [("task", "i", "early")]
    b.close()


def test_fold_delay_is_ignored_with_a_deprecation_warning(tmp_path: Path) -> None:
    """fold_delay is accepted for compatibility: a DeprecationWarning, and the saver does
    what it does without it (early writes held for their put, others committed at once);
    without it, no warning."""
    import warnings

    url = str(tmp_path / "s")
    with pytest.warns(DeprecationWarning, match="fold_delay"):
        a = CkptfsSaver(url, fold_delay=0.05)
    c1 = a.put(cfg("t"), ckpt({"i": 0}), {}, {"i": 1})
    a.put_writes(c1, [("i", 1)], "task")
    cp2 = ckpt({"i": 1})
    a.put_writes(cfg("t", cp2["id"]), [("i", 2)], "task")
    assert len(records(a, "t")) == 2
    assert a._fold is not None and a._fold.held() == [(run_id_for("t", ""), cp2["id"])]
    a.close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        CkptfsSaver(url).close()


def test_writes_of_the_newest_checkpoint_go_into_its_childs_record(tmp_path: Path) -> None:
    """Issue 36: under sync durability LangGraph saves a task's writes against the newest
    committed checkpoint and then, at once, the child checkpoint. put_writes holds them and
    returns only once they are durable: here in the child's record (label lg.writes_of naming
    the parent), one record per superstep instead of two. A fresh saver finds them."""
    import threading

    url = str(tmp_path / "s")
    a = CkptfsSaver(url, fold_wait=600.0)  # the child's put below always comes first
    c1 = a.put(cfg("t"), ckpt({"i": 0}), {}, {"i": 1})
    done: list[bool] = []
    t = threading.Thread(target=lambda: done.append(
        a.put_writes(c1, [("i", 1), ("x", "y")], "task") is None))
    t.start()
    while a._fold is None or not a._fold.held():  # put_writes holds them and waits
        t.join(0.001)
    assert not done and len(records(a, "t")) == 1  # not durable yet: put_writes has not returned
    cp2 = ckpt({"i": 1})
    c2 = a.put(c1, cp2, {}, {"i": 2})
    t.join()
    assert done == [True] and not a._fold.held()
    assert len(records(a, "t")) == 2
    head = a.store.repo.snapshot_at(run_id_for("t", ""), records(a, "t")[-1])
    assert head.manifest.labels.get(L_WRITES_OF) == c1["configurable"]["checkpoint_id"]
    b = CkptfsSaver(url)
    t1, t2 = b.get_tuple(c1), b.get_tuple(c2)
    assert t1 is not None and t1.pending_writes == [("task", "i", 1), ("task", "x", "y")]
    assert t2 is not None and t2.pending_writes == []
    assert [x.config for x in b.list(cfg("t"))] == [c2, c1]
    a.close()
    b.close()


def test_writes_langgraph_waits_for_are_not_held_for_the_child(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A graph with a DeltaChannel (its checkpoints' metadata counts updates since the last
    snapshot): LangGraph's put of the child waits for the parent's writes, so put_writes must
    not wait for that put; nor for the source-node write of a failed task LangGraph waits for
    before its error handler runs. Both are committed at once."""
    from ckptfs.integrations.langgraph.fold import DELTA_META

    url = str(tmp_path / "s")
    a = CkptfsSaver(url, fold_wait=600.0)
    assert a._fold is not None

    def never(*args: Any) -> bool:
        raise AssertionError("put_writes waited for the child's put")

    monkeypatch.setattr(a._fold, "wait_taken", never)
    c1 = a.put(cfg("t"), ckpt({"i": 0}), {"step": -1}, {"i": 1})
    a.put_writes(c1, [("__error_source_node__", "n")], "failed")
    assert len(records(a, "t")) == 2
    d1 = a.put(cfg("d"), ckpt({"i": 0}), {DELTA_META: {"messages": [1, 1]}}, {"i": 1})
    a.put_writes(d1, [("i", 1)], "task")
    assert len(records(a, "d")) == 2
    a.close()


def test_one_record_per_superstep_under_sync_durability(tmp_path: Path) -> None:
    """A real graph under durability="sync": each superstep's writes go into the next
    checkpoint's record (before issue 36: a writes record of their own, two per superstep),
    and the thread reads back whole."""
    from bench.langgraph_w1 import build

    n = 20
    saver = CkptfsSaver(str(tmp_path / "s"), fold_wait=600.0)
    app = build(n, []).compile(checkpointer=saver)
    config: Any = {"configurable": {"thread_id": "w1"}, "recursion_limit": n + 10}
    app.invoke({"messages": [], "n": 0}, config, durability="sync")
    rid = run_id_for("w1", "")
    snaps = [saver.store.repo.snapshot_at(rid, q) for q in records(saver, "w1")]
    kinds = [(s.manifest.labels["lg.kind"], s.manifest.labels.get("lg.meta.step"),
              s.manifest.labels.get("lg.checkpoint_id")) for s in snaps]
    steps = {cid: step for kind, step, cid in kinds if kind == "checkpoint"}
    assert len(steps) == n + 2  # the input checkpoint (step -1), then one per superstep
    # the input step's writes may come after its child's put (LangGraph saves them in the
    # background: 1 run in 16 on a loaded machine), then they take a record of their own;
    # every superstep's writes fold into the next checkpoint's record
    alone = [steps[cid] for kind, _, cid in kinds if kind == "writes"]
    assert alone in ([], ["-1"]), kinds
    saver.close()
    fresh = CkptfsSaver(str(tmp_path / "s"))
    state = build(n, []).compile(checkpointer=fresh).get_state(config)
    assert len(state.values["messages"]) == n and state.values["n"] == n
    fresh.close()
