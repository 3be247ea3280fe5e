"""Generate the conformance vectors into ckptfs_conformance/vectors/ (deterministic; never edit
the output by hand: change the generator and run ``python -m ckptfs_conformance.generate``).

The format version 1 vectors are frozen data (``FROZEN``: ckptfs writes no version 1 store, so
they cannot be made again) and left as they are. Written afresh: the writer cases
(``writer_cases``) and the vectors of format version 2 (``gen_v2``, ``gen_locators``): stores
written by ckptfs with a fixed clock and writer name, the invalid ones then damaged one defect
at a time. This module holds what they share: the clock, the ``Gen`` collector, stores built
object by object (``init_store``, ``commit_raw``: what no writer makes) and the damage loop.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import blake3
import cbor2

import ckptfs
from ckptfs.format import cbor, framing
from ckptfs.format.cdc import ChunkerParams, cut_lengths
from ckptfs.format.digest import Digest
from ckptfs.format.names import chunk_path, record_path, snapshot_path
from ckptfs_conformance.gen_commit import reproducible_nonces
from ckptfs_conformance.render import render_store

ROOT = Path(__file__).resolve().parent
OUT = ROOT / "vectors"
SPEC_CDDL = ROOT.parent / "spec" / "ckptfs.cddl"
T0 = 1_700_000_000_000          # the fixed clock: every vector's times are T0 + offsets
NOW = T0 + 86_400_000           # the reader's "now" for every read vector
WRITER = "ckptfs-conformance/1"
SMALL = ChunkerParams(min_size=64, avg_size=256, max_size=1024)
SMALL_CBOR = SMALL.to_cbor()


def prng(seed: str, length: int) -> bytes:
    """The documented input generator: the BLAKE3 extendable output of the UTF-8 seed."""
    return blake3.blake3(seed.encode()).digest(length=length)


class Gen:
    """Collects vectors; each is a JSON file, optionally with a store directory beside it."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.count: dict[str, int] = {}

    def vector(self, category: str, name: str, description: str, argv: list[str],
               expect: dict[str, Any], requires: list[str],
               files: dict[str, Any] | None = None, **extra: Any) -> None:
        path = self.out / category / f"{name}.json"
        assert not path.exists(), path
        path.parent.mkdir(parents=True, exist_ok=True)
        v = {"id": f"{category}/{name}", "category": category, "description": description,
             "requires": requires, "argv": argv, "files": files or {}, "expect": expect, **extra}
        path.write_text(json.dumps(v, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
        self.count[category] = self.count.get(category, 0) + 1

    def store_dir(self, category: str, name: str) -> Path:
        return self.out / category / f"{name}.store"


def materialize(src: dict[str, Any]) -> bytes:
    """The bytes of a vector input file (README "Inputs")."""
    if "hex" in src:
        return bytes.fromhex(src["hex"])
    if "text" in src:
        return str(src["text"]).encode()
    if "zeros" in src:
        return bytes(src["zeros"])
    return prng(src["prng"]["seed"], src["prng"]["length"])


# -- building stores ---------------------------------------------------------------------------
class Clock:
    """The fixed clock: a time that only changes when the generator says so."""

    def __init__(self) -> None:
        self.t = T0

    def __call__(self) -> int:
        return self.t

    def tick(self, ms: int = 1000) -> int:
        self.t += ms
        return self.t


def new_store(path: Path, chunker: ChunkerParams | None = SMALL) -> tuple[ckptfs.Store, Clock]:
    clock = Clock()
    store = ckptfs.open_store(str(path), chunker=chunker, clock=clock, writer=WRITER)
    store.repo.nonce = reproducible_nonces()  # record nonces (8.1), the same every generation
    return store, clock


def put_file(root: Path, rel: str, data: bytes) -> None:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data)


def content_entry(root: Path, kind: str, content: bytes, *, encoding: str | None = None,
                  inline: bool = True, typ: str | None = None) -> dict[str, Any]:
    """A captured entry map for ``content``, writing its chunks (reference chunking)."""
    m: dict[str, Any] = {"kind": kind, "size": len(content), "digest": Digest.of(content).raw,
                         "type": typ or ({"cbor": "application/cbor",
                                          "cbor-seq": "application/cbor-seq"}.get(
                                              encoding or "", "application/octet-stream"))}
    if encoding:
        m["encoding"] = encoding
    if inline:
        m["inline"] = content
        return m
    chunks, pos = [], 0
    for n in cut_lengths(content, SMALL):
        piece = content[pos:pos + n]
        put_file(root, chunk_path(Digest.of(piece)), framing.frame(piece))
        chunks.append([Digest.of(piece).raw, n])
        pos += n
    m["chunks"] = chunks
    return m


def manifest_map(run: str, seq: int, entries: dict[str, Any], **kw: Any) -> dict[str, Any]:
    m = {"format": 1, "run": run, "seq": seq, "boundary": "step", "created": T0 + seq,
         "writer": WRITER, "schema": {"name": "state", "version": 1}, "entries": entries,
         "parent": None, "resumed_from": None, "attempt": 1, "ledger": None, "labels": {},
         "expires": None}
    m.update(kw)
    return m


def commit_raw(root: Path, m: dict[str, Any], *, data: bytes | None = None,
               record_extra: dict[str, Any] | None = None, record_run: str | None = None,
               record_seq: int | None = None) -> Digest:
    """Write a manifest object (``data`` or the canonical bytes of ``m``) and its run record,
    bypassing the writer's checks: for vectors the reference writer refuses to produce."""
    data = cbor.encode(m) if data is None else data
    d = Digest.of(data)
    put_file(root, snapshot_path(d), framing.frame(data))
    run, seq = record_run or m["run"], record_seq or m["seq"]
    rec = {"run": run, "seq": seq, "snapshot": d.raw, "size": len(data), "created": m["created"]}
    rec.update(record_extra or {})
    put_file(root, record_path(run, seq), cbor.encode(rec))
    return d


def init_store(root: Path, **config: Any) -> None:
    cfg = {"format": "ckptfs", "version": 1, "hash": "blake3", "chunker": SMALL_CBOR,
           "created": T0, "required": [], "optional": [], "settings": {}}
    cfg.update(config)
    put_file(root, "ckptfs.cbor", cbor.encode(cfg))


# -- invalid stores ----------------------------------------------------------------------------
def _base(p: Path) -> None:
    """The store the invalid vectors damage: run r1 with two snapshots, inline and chunked
    values, a chunked blob; run r2 with one snapshot. A version 1 store, built object by
    object (ckptfs writes no version 1 store; the frozen vectors were damaged from the one the
    version 1 writer made, whose bytes differ)."""
    init_store(p)
    big = cbor.encode("z" * 3000 + prng("b", 500).hex())
    parent = None
    for seq in (1, 2):
        entries = {"small": content_entry(p, "value", cbor.encode({"a": seq}), encoding="cbor"),
                   "big": content_entry(p, "value", big, encoding="cbor", inline=False),
                   "blob": content_entry(p, "blob", prng("blob", 3000), inline=False)}
        parent = commit_raw(p, manifest_map("r1", seq, entries, parent=(
            None if parent is None else parent.raw), boundary="start" if seq == 1 else "step"))
    commit_raw(p, manifest_map("r2", 1, {"x": content_entry(p, "value", cbor.encode(1),
                                                            encoding="cbor")}))


def _feature(name: str) -> list[str]:
    """The capability a store vector needs beyond ``reader``, from its name's prefix."""
    return [f for f in ("ledger", "lifecycle") if name.startswith(f + "-")]


def _record(p: Path, seq: int = 2, run: str = "r1") -> dict[str, Any]:
    rec: dict[str, Any] = cbor2.loads((p / record_path(run, seq)).read_bytes())
    return rec


def _patch_record(p: Path, **kw: Any) -> None:
    rec = _record(p)
    rec.update(kw)
    (p / record_path("r1", 2)).write_bytes(cbor.encode(rec))


def invalid_stores(g: Gen, base: Path, cases: dict[str, tuple[str, str, Callable[[Path], Any]]],
                   prefix: str = "", requires: list[str] | None = None) -> None:
    """A store-invalid vector per case: a copy of ``base`` damaged by the case."""
    for name, (cat, desc, damage) in cases.items():
        name = prefix + name
        d = g.store_dir("store-invalid", name)
        shutil.copytree(base, d)
        before = _snapshot_files(d)
        damage(d)
        broken = sorted(f for f, b in _snapshot_files(d).items() if before.get(f) != b
                        and (f.startswith(("snapshots/", "runs/", "tombstones/", "packs/",
                                           "moved/"))
                             or f == "ckptfs.cbor"))
        g.vector("store-invalid", name, desc, ["read", "{store}", str(NOW)], {"error": cat},
                 requires or ["reader", *_feature(name)], store=f"{name}.store",
                 damaged=broken)


def _snapshot_files(p: Path) -> dict[str, bytes]:
    return {f.relative_to(p).as_posix(): f.read_bytes() for f in p.rglob("*") if f.is_file()}


# -- main --------------------------------------------------------------------------------------
#: the vectors the generator leaves as they are: one ``<sha256 hex>  <path>`` line each, paths
#: relative to vectors/. They are the format version 1 stores and the reader vectors built on
#: them (and the vectors of the format's primitives), written by the version 1 writer that
#: ckptfs no longer has: frozen data (tests/test_conformance.py checks every digest).
FROZEN = ROOT / "frozen_vectors.sha256"


def frozen() -> dict[str, str]:
    """The frozen vector files: path (relative to vectors/) -> SHA-256 hex."""
    out = {}
    for line in FROZEN.read_text().splitlines():
        digest, _, path = line.partition("  ")
        out[path] = digest
    return out


def generate(out: Path = OUT) -> dict[str, int]:
    """Write every vector into ``out``: the frozen ones (``FROZEN``) as they are (copied from
    this package's vectors/ unless ``out`` is that folder), the others afresh with today's
    writer: the writer cases and the vectors of spec/v2.md."""
    # s3req14: new stores' configs must not take a check window from the environment
    window = os.environ.pop("CKPTFS_CHECK_WINDOW_MS", None)
    try:
        return _generate(out)
    finally:
        if window is not None:
            os.environ["CKPTFS_CHECK_WINDOW_MS"] = window


def _generate(out: Path) -> dict[str, int]:
    keep = frozen()
    out.mkdir(parents=True, exist_ok=True)
    for f in sorted(out.rglob("*"), reverse=True):  # files first, then emptied folders
        rel = f.relative_to(out).as_posix()
        if f.is_file() and rel not in keep:
            f.unlink()
        elif f.is_dir() and not any(f.iterdir()):
            f.rmdir()
    if out.resolve() != OUT.resolve():
        for rel in keep:
            (out / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(OUT / rel, out / rel)
    from ckptfs_conformance.writer_cases import fixed_owner, writer_vectors  # they import this

    g = Gen(out)
    with fixed_owner():  # effect intents name a fixed owner (spec/ledger.md 4.1)
        writer_vectors(g)  # format 2 stores, written by today's writer
        _v2_vectors(g)  # ckptfs_conformance/gen_v2.py: spec/v2.md
    shutil.copyfile(SPEC_CDDL, out / "ckptfs.cddl")  # the wheel carries no spec/
    for tmp in out.rglob("tmp"):
        if tmp.is_dir() and not any(tmp.iterdir()):
            tmp.rmdir()
    _drop_leases(out)
    from ckptfs_conformance.coverage import annotate  # issue 32: requirement ids

    annotate(out, frozenset(keep))
    return g.count


def _v2_vectors(g: Gen) -> None:
    """The vectors of spec/v2.md: version 2 stores (ckptfs_conformance/gen_v2*.py)."""
    from ckptfs_conformance import gen_v2, gen_v2_invalid, gen_v2_lookups

    with gen_v2.layout_v2(T0):
        gen_v2.valid(g, new_store, prng, render_store, NOW, T0)
        gen_v2_invalid.invalid(g, new_store, prng, invalid_stores, T0)
        gen_v2_lookups.lookups(g, new_store, prng, NOW, T0)
        _locator_vectors(g)
        _spec32_vectors(g)
        _spec32b_vectors(g)
        _delta_vectors(g)


def _delta_vectors(g: Gen) -> None:
    """Headers by reference (spec/v2.md 3.1.2, ckptfs_conformance/gen_delta.py)."""
    from ckptfs_conformance import gen_delta

    gen_delta.vectors(g, new_store, prng, invalid_stores, render_store, NOW)


def _spec32_vectors(g: Gen) -> None:
    """Issue 32: reader vectors of spec/v2.md rules no vector isolated before
    (ckptfs_conformance/gen_spec32.py)."""
    from ckptfs_conformance import gen_spec32

    gen_spec32.vectors(g, new_store, prng, invalid_stores, render_store, NOW, T0)
    gen_spec32.writer_vectors(g, prng, WRITER, NOW, T0)
    from ckptfs_conformance import gen_spec32c  # spec32c: format, ledger, migrations

    gen_spec32c.vectors(g, new_store, prng, invalid_stores, render_store, NOW)
    gen_spec32c.writer_vectors(g, WRITER, NOW, T0)
    gen_spec32c.refusal_vectors(g, new_store, prng, WRITER, NOW, T0)
    from ckptfs_conformance import gen_maintenance  # spec32c: erase and copy

    gen_maintenance.vectors(g, new_store, prng, render_store, NOW)
    gen_maintenance.gc_vectors(g, new_store, prng)


def _spec32b_vectors(g: Gen) -> None:
    """Issue 32, gaps 24-26 (ckptfs_conformance/gen_spec32b.py)."""
    from ckptfs_conformance import gen_spec32b
    from ckptfs_conformance.render import render_ref

    gen_spec32b.vectors(g, new_store, prng, render_ref, NOW)
    gen_spec32b.typed_vectors(g)
    gen_spec32b.store_vectors(g, new_store, prng, render_store, NOW)
    from ckptfs_conformance import gen_enc_layouts, gen_enc_vectors  # capability encryption

    gen_enc_vectors.primitives(g)
    gen_enc_vectors.stores(g, new_store, NOW)
    gen_enc_vectors.writer(g, NOW)
    gen_enc_layouts.vectors(g, NOW)


def _locator_vectors(g: Gen) -> None:
    """Complete locators (ckptfs_conformance/gen_locators.py, spec/v2.md 3.5, 9.2)."""
    from ckptfs_conformance import gen_locators

    gen_locators.vectors(g, new_store, prng, render_store, NOW)


def _drop_leases(out: Path) -> None:
    """Released maintenance leases stay in a store (their generations only grow, see
    spec/retention.md section 6) but hold a time, host and pid: not vector content."""
    for leases in sorted(out.rglob("leases"), reverse=True):
        if leases.is_dir() and leases.parent.name.endswith(".store"):
            shutil.rmtree(leases)


if __name__ == "__main__":
    counts = generate(Path(sys.argv[1]) if len(sys.argv) > 1 else OUT)
    print(" ".join(f"{k}={v}" for k, v in counts.items()), f"total={sum(counts.values())}")
