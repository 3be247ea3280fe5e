"""End-to-end round trips through the public API on every backend."""

from __future__ import annotations

import pytest

import ckptfs
from ckptfs.errors import ConflictError


def test_checkpoint_and_resume_round_trip(store: ckptfs.Store) -> None:
    run = store.start_run("r1", schema=("agent", 3))
    msgs: list[dict[str, object]] = []
    for i in range(20):
        msgs.append({"role": "user", "content": f"message {i} " * 50, "n": i, "f": i / 3})
        snap = run.checkpoint({"messages": msgs, "plan": {"step": i, "done": None}})
    assert snap.seq == 20
    resumed = store.resume("r1")
    assert resumed.state == {"messages": msgs, "plan": {"step": 19, "done": None}}
    assert resumed.snapshot is not None and resumed.snapshot.id == snap.id
    assert resumed.schema == ckptfs.Schema("agent", 3)
    nxt = resumed.checkpoint({"messages": msgs, "plan": {"step": 20}})
    assert nxt.resumed_from == snap.id and nxt.parent == snap.id and nxt.attempt == 2
    later = resumed.checkpoint({"messages": msgs, "plan": {"step": 21}})
    assert later.resumed_from is None and later.attempt == 2 and later.parent == nxt.id


def test_two_resumes_of_one_head_exactly_one_commits(store: ckptfs.Store) -> None:
    run = store.start_run("r")
    run.checkpoint({"x": 1})
    a, b = store.resume("r"), store.resume("r")
    a.checkpoint({"x": 2})
    with pytest.raises(ConflictError):
        b.checkpoint({"x": 3})
    assert store.read("r") == {"x": 2}
    with pytest.raises(ConflictError):  # a fenced run stays fenced
        b.checkpoint({"x": 4})
