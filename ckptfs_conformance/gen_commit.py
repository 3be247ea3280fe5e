"""Vectors for the object-store commit path (spec 8.1 ``nonce``, 9.2 "Lost answers").

A run record MAY carry a ``nonce`` (16 random bytes, so that two writers never create
byte-identical records and a writer that lost the answer to its create can recognise its own
record). Readers ignore it entirely: a record with a nonce, a malformed one or none reads the
same. Writers of the reference profile draw nonces from ``reproducible_nonces`` so that the
generated stores are byte-identical on every generation; exact writer comparison ignores the
nonce (it is the writer's choice, like framing).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ckptfs.format import cbor
from ckptfs.format.digest import Digest
from ckptfs.format.models import NONCE_SIZE
from ckptfs.format.names import record_path

if TYPE_CHECKING:
    from ckptfs_conformance.generate import Gen


def reproducible_nonces(seed: str = "ckptfs-conformance") -> Callable[[], bytes]:
    """Distinct record nonces that are the same on every run (real writers draw them at
    random; see ckptfs.store.repository.random_nonce)."""
    counter = itertools.count()
    return lambda: Digest.of(f"{seed}:{next(counter)}".encode()).raw[:NONCE_SIZE]


def record_nonce_store(p: Path) -> list[str]:
    """Records with a nonce, with a malformed nonce (text; 4 bytes) and without one: readers
    ignore the nonce, all three snapshots read as committed. Returns the paths beyond the CDDL."""
    from ckptfs_conformance.generate import commit_raw, content_entry, init_store, manifest_map

    init_store(p)
    nonces: list[object] = [bytes(range(NONCE_SIZE)), "not bytes", b"\x00\x01\x02\x03"]
    parent = None
    for seq, nonce in enumerate(nonces, start=1):
        e = content_entry(p, "value", cbor.encode({"seq": seq}), encoding="cbor")
        kw: dict[str, object] = {"parent": parent.raw} if parent else {}
        parent = commit_raw(p, manifest_map("r1", seq, {"v": e}, **kw),
                            record_extra={"nonce": nonce})
    e = content_entry(p, "value", cbor.encode({"seq": 4}), encoding="cbor")
    commit_raw(p, manifest_map("r1", 4, {"v": e}, parent=parent.raw if parent else None))
    return [record_path("r1", 2), record_path("r1", 3)]


def commit_vectors(g: Gen) -> None:
    """store-valid/record-nonce."""
    from ckptfs_conformance.generate import NOW
    from ckptfs_conformance.render import render_store

    name = "record-nonce"
    d = g.store_dir("store-valid", name)
    beyond = record_nonce_store(d)
    g.vector("store-valid", name, " ".join((record_nonce_store.__doc__ or "").split()[:19]),
             ["read", "{store}", str(NOW)],
             {"output": render_store(str(d), NOW), "compare": "json"}, ["reader"],
             store=f"{name}.store", beyond_cddl=beyond)
