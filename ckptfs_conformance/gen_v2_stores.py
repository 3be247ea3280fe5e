"""The version 2 stores the vectors start from (written by ckptfs at the generator's clock, a
version 1 part built object by object where needed) and the names every v2 vector module
shares: the capabilities ``V2``, the name prefix ``P`` and the records ``REC1``/``REC2`` of run
r1 that most damages aim at.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cbor2

import ckptfs
from ckptfs.format import cbor
from ckptfs.format import containers as ct
from ckptfs.format.digest import Digest
from ckptfs.format.lifecycle import Retired
from ckptfs.format.models import COMPRESSED_HEADERS
from ckptfs.format.names import forward_path, head_hint_path, record_path
from ckptfs.ops.gc import gc
from ckptfs.ops.retention import forget_snapshots
from ckptfs.store.lifecycle import write_retired
from ckptfs_conformance.gen_v2_containers import form, split

V2 = ["reader", "v2"]
#: every vector name starts with this (the README's traceability table lists them)
P = "v2-"
REC2 = record_path("r1", 2)
REC1 = record_path("r1", 1)


def base(p: Path, new_store: Any, prng: Any) -> None:
    """Run r1: seq 1 carries the bodies of 'big' and 'blob'; seq 2 carries new bodies
    ('notes') and locates the shared ones in seq 1. Run r2: one small snapshot."""
    s, c = new_store(p)
    r = s.start_run("r1")
    big = "z" * 3000 + prng("b", 500).hex()
    r.checkpoint({"small": {"a": 1}, "big": big, "blob": ckptfs.Blob(prng("blob", 3000))},
                 "start")
    c.tick()
    r.checkpoint({"small": {"a": 2}, "big": big, "blob": ckptfs.Blob(prng("blob", 3000)),
                  "notes": prng("notes", 1500).hex()})
    c.tick()
    s.start_run("r2").checkpoint({"x": 1})
    s.close()
    assert form((p / REC2).read_bytes()) == ct.CONTAINER_COMPRESSED  # the vectors damage 0x03


def pack_base(p: Path, new_store: Any, prng: Any) -> None:
    """Bulk content beyond record_bulk_max (2 KiB) goes into packs of about 4 KiB."""
    s, c = new_store(p)
    s.init(settings={"record_bulk_max": 2048, "pack_target": 4096})
    r = s.start_run("r1")
    r.checkpoint({"blob": ckptfs.Blob(prng("pack-blob", 12000)), "n": 1})
    c.tick()
    r.checkpoint({"blob": ckptfs.Blob(prng("pack-blob", 12000)), "n": 2})
    s.close()
    assert all(form(f.read_bytes()) == ct.CONTAINER_VERSION for f in packs(p))  # 3.1


def packs(p: Path) -> list[Path]:
    """The pack files of store ``p``, in name order."""
    return sorted(f for f in (p / "packs").rglob("*") if f.is_file())


def _hint(p: Path, run: str, seq: int, snapshot: bytes, *, written: int, at: str | None = None
          ) -> bytes:
    """Write a head hint for ``run`` (at the hint path of run ``at``, default ``run``)."""
    data = ct.HeadHint(run, seq, Digest(snapshot), written).to_bytes()
    f = p / head_hint_path(at or run)
    f.write_bytes(data)
    return data


def snap_id(p: Path, run: str, seq: int) -> bytes:
    """The snapshot id record ``run``@``seq`` of store ``p`` names in its header."""
    h, _ = split((p / record_path(run, seq)).read_bytes())
    return bytes(h["snapshot"])


def hints(p: Path, new_store: Any, prng: Any, t0: int) -> list[str]:
    """Runs whose head hints lie in every way a reader must survive: stale (seq 1 of 3), ahead
    (seq 9, no such record), torn, garbage, naming another run, and naming a forgotten seq."""
    s, c = new_store(p)
    for run, n in (("stale", 3), ("ahead", 2), ("torn", 2), ("garbage", 2), ("other", 2),
                   ("forgot", 3)):
        r = s.start_run(run)
        for i in range(1, n + 1):
            c.tick()
            r.checkpoint({"run": run, "step": i})
    # seq 3 retired as a withdrawn commit leaves it (spec/retention.md 3): record 3 stays, a
    # stray, and the run's head is 2
    write_retired(s.storage, Retired(run="forgot", through=3, kept=(1, 2), created=c.tick()))
    s.close()
    w = t0 + 500_000
    _hint(p, "stale", 1, snap_id(p, "stale", 1), written=w)
    _hint(p, "ahead", 9, snap_id(p, "ahead", 2), written=w)
    torn = _hint(p, "torn", 2, snap_id(p, "torn", 2), written=w)
    (p / head_hint_path("torn")).write_bytes(torn[:-3])
    (p / head_hint_path("garbage")).write_bytes(prng("hint-garbage", 60))
    _hint(p, "stale", 3, snap_id(p, "stale", 3), written=w, at="other")  # names run 'stale'
    _hint(p, "forgot", 3, snap_id(p, "forgot", 3), written=w)
    return [head_hint_path("torn"), head_hint_path("garbage")]


def forwards(p: Path, new_store: Any, prng: Any, t0: int) -> None:
    """r1@1 carried the bodies r1@2 and r1@3 locate; r1@1 was forgotten and gc repacked its
    live bodies into a pack, left the forward moved/runs/r1/<1> and deleted the record."""
    s, c = new_store(p)
    r = s.start_run("r1")
    data = prng("fwd-blob", 4000)
    for i in range(1, 4):
        c.tick()
        r.checkpoint({"blob": ckptfs.Blob(data), "step": i})
    forget_snapshots(s.repo, {"r1": {1}}, now=c.tick())
    gc(s.repo, grace_ms=0, now=int(time.time() * 1000) + 3_600_000)
    s.close()
    assert not (p / REC1).exists() and (p / forward_path(REC1)).exists()


def chain(p: Path, hops: int) -> None:
    """Replace the forward of r1@1 (store ``forwards``) by a chain of ``hops`` forwards through
    records that never existed, the last one naming the pack."""
    rows = cbor2.loads((p / forward_path(REC1)).read_bytes())["bodies"]
    (p / forward_path(REC1)).unlink()
    names = [REC1] + [record_path("ghost", 100 + i) for i in range(hops - 1)]
    for i, name in enumerate(names):
        f = p / forward_path(name)
        f.parent.mkdir(parents=True, exist_ok=True)
        if i + 1 < len(names):
            nxt = ["ghost", 100 + i]
            f.write_bytes(cbor.encode({"bodies": [[d, nxt, start, stored]
                                                  for d, _, start, stored in rows]}))
        else:
            f.write_bytes(cbor.encode({"bodies": rows}))


def upgraded(p: Path, new_store: Any, prng: Any) -> None:
    """A version 1 store upgraded in place (config version 2, optional v1-objects): loose
    chunks and manifests of seqs 1-2, a v2 record at seq 3 that reuses them, a new v2 run.
    The version 1 part is built object by object (ckptfs writes no version 1 store)."""
    from ckptfs_conformance import generate as G  # it imports this module

    G.init_store(p)
    parent = None
    for i in (1, 2):
        step = cbor.encode(i)
        entries = {"blob": G.content_entry(p, "blob", prng("up-blob", 3000), inline=False),
                   "step": G.content_entry(p, "value", step, encoding="cbor")}
        parent = G.commit_raw(p, G.manifest_map("r1", i, entries, parent=(
            None if parent is None else parent.raw)))
    cfg = cbor2.loads((p / "ckptfs.cbor").read_bytes())
    cfg.update(version=2, optional=sorted(set(cfg["optional"]) | {"v1-objects"}))
    (p / "ckptfs.cbor").write_bytes(cbor.encode(cfg))
    s, c = new_store(p)
    c.tick(10_000)
    r = s.resume("r1")
    r.checkpoint({"blob": ckptfs.Blob(prng("up-blob", 3000)), "step": 3,
                  "more": prng("up-more", 1200).hex()})
    c.tick()
    s.start_run("r2").checkpoint({"new": prng("up-new", 1500).hex()})
    s.close()
    assert (p / REC1).read_bytes()[:1] != b"\x89"
    assert (p / record_path("r1", 3)).read_bytes()[:1] == b"\x89"


def set_required(p: Path, change: Callable[[set[str]], set[str]]) -> None:
    """Rewrite the store config's required features (what an upgrade does)."""
    cfg = cbor2.loads((p / "ckptfs.cbor").read_bytes())
    cfg["required"] = sorted(change(set(cfg["required"])))
    (p / "ckptfs.cbor").write_bytes(cbor.encode(cfg))


def mixed_forms(p: Path, new_store: Any, prng: Any) -> None:
    """r1@1 written before the store required compressed-headers (form 0x02), r1@2 after
    (form 0x03), locating the shared chunks in r1@1; r2@1 also form 0x03."""
    s, c = new_store(p)
    s.init()
    s.close()
    set_required(p, lambda f: f - {COMPRESSED_HEADERS})
    s, c = new_store(p)
    shared = prng("mixed-shared", 3000).hex()
    s.start_run("r1").checkpoint({"shared": shared, "n": 1})
    s.close()
    set_required(p, lambda f: f | {COMPRESSED_HEADERS})
    s, c = new_store(p)
    c.tick()
    s.resume("r1").checkpoint({"shared": shared, "n": 2, "notes": prng("mixed-n", 800).hex()})
    s.start_run("r2").checkpoint({"x": prng("mixed-x", 900).hex()})
    s.close()
    assert form((p / REC1).read_bytes()) == ct.CONTAINER_VERSION
    assert form((p / REC2).read_bytes()) == ct.CONTAINER_COMPRESSED
