"""Vectors of storage format version 2 (spec/v2.md): valid v2 stores, damaged ones, lookups.

Every vector needs the capabilities ``reader`` and ``v2``. Stores are written by ckptfs with
the generator's fixed clock (packs carry it as ``created``), then damaged one rule at a time.
The README's "Format version 2" section maps each rule of spec/v2.md to its vectors.

This module holds the fixed clock for packs (``layout_v2``) and the valid stores
(``store-valid/v2-*``); beside it: ``gen_v2_containers`` (container surgery),
``gen_v2_stores`` (the stores the vectors start from), ``gen_v2_invalid`` (the damaged stores)
and ``gen_v2_lookups`` (lookups by id, prefix and head).
"""

from __future__ import annotations

import io
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import ckptfs
from ckptfs.format import containers as ct
from ckptfs.format import framing
from ckptfs.format.names import chunk_path, forward_path
from ckptfs.store import containers as store_containers
from ckptfs_conformance.gen_v2_containers import body_at, edit, flip
from ckptfs_conformance.gen_v2_stores import (
    P, REC1, REC2, V2, base, chain, forwards, hints, mixed_forms, pack_base, packs, upgraded)


@contextmanager
def layout_v2(t0: int) -> Iterator[None]:
    """Packs carry the fixed clock (reproducible pack names)."""
    real = getattr(store_containers, "time")
    setattr(store_containers, "time", types.SimpleNamespace(time=lambda: t0 / 1000))
    try:
        yield
    finally:
        setattr(store_containers, "time", real)


def _loose(p: Path, f: Path, i: int) -> None:
    """Store body ``i`` of container ``f`` also as a version 1 loose object."""
    c = ct.decode(f.read_bytes(), what=str(f))
    b = c.header.bodies[i]
    stored = c.body_bytes(f.read_bytes(), b)
    out = p / chunk_path(b.digest)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(framing.frame(framing.unframe(stored, b.size, what="body")))


def valid(g: Any, new_store: Any, prng: Any, render_store: Callable[[str, int], Any],
          now: int, t0: int) -> None:
    def vector(name: str, desc: str, build: Callable[[Path], Any],
               requires: list[str] = V2) -> None:
        d = g.store_dir("store-valid", P + name)
        beyond = build(d) or []
        g.vector("store-valid", P + name, desc, ["read", "{store}", str(now)],
                 {"output": render_store(str(d), now), "compare": "json"}, requires,
                 store=f"{P}{name}.store", beyond_cddl=beyond)

    def records(p: Path) -> None:
        s, c = new_store(p)
        r = s.start_run("main")
        r.checkpoint({"doc": ckptfs.Blob(prng("v2-doc", 5000)), "n": 1}, "start")
        c.tick()
        r.checkpoint({"doc": ckptfs.Blob(prng("v2-doc", 5000)), "n": 2,
                      "log": [prng(f"v2-log{i}", 100).hex() for i in range(20)]})
        c.tick()
        r = s.resume("main")
        r.checkpoint({"doc": ckptfs.Blob(prng("v2-doc", 5000)), "n": 3})
        c.tick()
        f = s.fork("main@2", "branch")
        f.checkpoint({"doc": ckptfs.Blob(prng("v2-doc", 5000)), "n": 20})
        s.close()

    vector("records", "Version 2 run records only (one object per commit): each carries its "
           "manifest and the bodies it added; later snapshots, a resume and a fork into another "
           "run locate shared chunks in earlier records (spec/v2.md 3, 5, 6 steps 1-2)", records)
    vector("packs", "Bulk content over record_bulk_max went into packs; records locate it "
           "there (spec/v2.md 3.4, 5.1)", lambda p: pack_base(p, new_store, prng))
    vector("mixed-forms", "Records of both container forms in one run: r1@1 with its header "
           "as is (0x02, written before the store required compressed-headers), r1@2 with its "
           "header as a zstd frame (0x03) locating chunks in r1@1 (spec/v2.md 2, 3.1)",
           lambda p: mixed_forms(p, new_store, prng))

    def streamed(p: Path) -> None:
        s, c = new_store(p)
        s.start_run("r1").checkpoint({"file": ckptfs.Blob(io.BytesIO(prng("v2-stream", 20000)),
                                                           type="text/plain")})
        s.close()
        assert packs(p)

    vector("streamed-blob", "A blob streamed from a file object: its chunks were written into "
           "packs before the record that locates them (spec/v2.md 3.4, 3.5)", streamed)
    vector("forwards", "After forget and gc: the container the locators of seqs 2 and 3 name "
           "is gone; the reader follows moved/runs/r1/<seq 1> to the pack that now holds the "
           "bodies (spec/v2.md 6 step 3, 8, 9)", lambda p: forwards(p, new_store, prng, t0))

    def four_hops(p: Path) -> None:
        forwards(p, new_store, prng, t0)
        chain(p, 4)

    vector("forward-four-hops", "A stale locator followed through a chain of 4 forwards (the "
           "most a reader must follow, spec/v2.md 8)", four_hops)

    def damaged_forward_loose(p: Path) -> list[str]:
        base(p, new_store, prng)
        for i in range(len(ct.decode((p / REC1).read_bytes(), what="r").header.bodies)):
            _loose(p, p / REC1, i)
        (p / REC1).unlink()  # r1@1 is gone, r1@2 locates into it
        (p / forward_path(REC1)).parent.mkdir(parents=True, exist_ok=True)
        (p / forward_path(REC1)).write_bytes(b"\xa1\x66bodies")  # torn forward
        return [forward_path(REC1)]

    def stale_locator_loose(p: Path) -> None:
        damaged_forward_loose(p)
        (p / forward_path(REC1)).unlink()

    vector("stale-locator-loose", "Locators name a container that is gone and no forward "
           "exists: the version 1 loose object is read (spec/v2.md 6 step 4; the store's "
           "r1@1 is absent, so r1 has one snapshot)", stale_locator_loose)
    vector("forward-damaged-loose", "A damaged forward is treated as absent: the loose object "
           "is still tried (spec/v2.md 8)", damaged_forward_loose)

    def body_damaged_loose(p: Path) -> None:
        base(p, new_store, prng)
        _loose(p, p / REC2, 0)
        start, stored = body_at(p / REC2, 0)
        flip(p / REC2, start + stored - 1)

    vector("body-damaged-loose", "A body of the head record is damaged but the chunk is also a "
           "loose object: read from there (spec/v2.md 6 steps 1, 4)", body_damaged_loose)
    vector("upgraded", "A version 1 store upgraded in place: v1 records, manifests and loose "
           "chunks beside v2 records that reuse them (spec/v2.md 2, 10)",
           lambda p: upgraded(p, new_store, prng))
    vector("hints", "Head hints that are stale, ahead, torn, garbage, name another run, or "
           "name a forgotten seq whose record stays as a stray: every head is the true one "
           "(spec/v2.md 4; the stray needs retention.md 3)", lambda p: hints(p, new_store, prng, t0),
           V2 + ["lifecycle"])

    def unknown_keys(p: Path) -> list[str]:
        pack_base(p, new_store, prng)
        for f in [p / REC1, p / REC2]:
            edit(f, lambda h, a: h.update({"x-future": [1, 2]}))
        return [REC1, REC2]  # the CDDL describes what writers write: no unknown keys

    vector("unknown-header-keys", "Record header keys a reader does not know are ignored "
           "(spec/v2.md 3.3)", unknown_keys)
