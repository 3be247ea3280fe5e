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


def test_manifest_with_an_empty_ledger_map_round_trips() -> None:
    """An accepted manifest re-encodes to what was read (found by fuzzing: an empty ledger map
    was read as {} but written back as null, so re-encoding changed the snapshot id; the
    ledger format now refuses an empty map outright)."""
    import cbor2

    from ckptfs.errors import FormatError
    from ckptfs.format.models import Manifest

    doc = {"format": 1, "run": "r", "seq": 1, "boundary": "step", "created": 1, "writer": "w",
           "schema": {"name": "s", "version": 1}, "entries": {}, "parent": None,
           "resumed_from": None, "attempt": 1, "ledger": {}, "labels": {}, "expires": None}
    data = cbor2.dumps(doc, canonical=True)
    try:
        m = Manifest.from_bytes(data)
    except FormatError:
        return
    assert m.to_bytes() == data


