"""Bugs the reliability tests found, each pinned by the smallest test that shows it."""

from __future__ import annotations

import ckptfs


def test_small_inline_blob_restored_then_checkpointed_again(store: ckptfs.Store) -> None:
    """A restored small blob (inlined in its manifest) goes into the next checkpoint as is
    (found by crash-point enumeration: a fork that carried its state forward raised TypeError)."""
    run = store.start_run("a")
    run.checkpoint({"b": ckptfs.Blob(b"x" * 100), "big": ckptfs.Blob(bytes(range(256)) * 400)})
    again = store.resume("a")
    again.checkpoint(dict(again.state))
    fork = store.fork("a@1", "f")
    fork.checkpoint({**fork.state, "n": 1})
    for ref in ("a", "f"):
        state = store.read(ref)
        assert state["b"].read() == b"x" * 100
        assert state["big"].read() == bytes(range(256)) * 400
