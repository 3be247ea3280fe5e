"""Vectors of storage format version 2 (spec/v2.md): valid v2 stores, damaged ones, lookups.

Every vector needs the capabilities ``reader`` and ``v2``. Stores are written by ckptfs with
the generator's fixed clock (packs carry it as ``created``), then damaged one rule at a time.
The README's "Format version 2" section maps each rule of spec/v2.md to its vectors.
"""

from __future__ import annotations

import io
import shutil
import time
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import blake3
import cbor2
import zstandard

import ckptfs
from ckptfs.errors import CkptfsError
from ckptfs.format import cbor, framing
from ckptfs.format.cbor_parts import array_head, map_bytes
from ckptfs.format import containers as ct
from ckptfs.format.digest import Digest
from ckptfs.format.lifecycle import Retired
from ckptfs.format.models import COMPRESSED_HEADERS
from ckptfs.format.names import chunk_path, forward_path, head_hint_path, record_path
from ckptfs.ops.gc import gc
from ckptfs.ops.retention import forget_snapshots
from ckptfs.store import containers as store_containers
from ckptfs.store.lifecycle import write_retired

V2 = ["reader", "v2"]
#: every vector name starts with this (the README's traceability table lists them)
P = "v2-"
REC2 = record_path("r1", 2)
REC1 = record_path("r1", 1)


@contextmanager
def layout_v2(t0: int) -> Iterator[None]:
    """Packs carry the fixed clock (reproducible pack names)."""
    real = getattr(store_containers, "time")
    setattr(store_containers, "time", types.SimpleNamespace(time=lambda: t0 / 1000))
    try:
        yield
    finally:
        setattr(store_containers, "time", real)


# -- container surgery -------------------------------------------------------------------------
def split(data: bytes) -> tuple[dict[str, Any], bytes]:
    """A container's header map (inflated first in form 0x03) and its body area."""
    hlen = int.from_bytes(data[9:13], "big")
    stored = data[13:13 + hlen]
    if data[8] == ct.CONTAINER_COMPRESSED:
        stored = framing.inflate_declared(memoryview(stored), ct.MAX_HEADER_SIZE, what="header")
    return cbor2.loads(stored), data[13 + hlen + 32:]


def form(data: bytes) -> int:
    """A container's form byte: 2 (header as is) or 3 (header a zstd frame, spec/v2.md 3.1)."""
    return data[8]


def join(header: dict[str, Any] | bytes, area: bytes, *, version: int = 2,
         hlen: int | None = None, digest: bytes | None = None) -> bytes:
    """A container from a header (a map, encoded canonically, or raw bytes) and a body area;
    ``version`` 3: the header bytes are stored as one zstd frame (form 0x03)."""
    h = cbor.encode(header) if isinstance(header, dict) else header
    if version == ct.CONTAINER_COMPRESSED:
        h = framing.deflate(h)
    return b"".join([ct.MAGIC, bytes([version]), (len(h) if hlen is None else hlen).to_bytes(
        4, "big"), h, blake3.blake3(h).digest() if digest is None else digest, area])


def edit(f: Path, change: Callable[[dict[str, Any], bytes], bytes | None]) -> None:
    """Rewrite container ``f``: ``change`` edits its header map in place and may return a new
    body area; the header digest is recomputed (so only the edited rule is broken) and the
    header keeps its form (a compressed header is compressed again)."""
    data = f.read_bytes()
    h, area = split(data)
    new = change(h, area)
    f.write_bytes(join(h, area if new is None else new, version=form(data)))


def flip(f: Path, at: int) -> None:
    b = bytearray(f.read_bytes())
    b[at] ^= 0x01
    f.write_bytes(bytes(b))


def body_at(f: Path, i: int = 0) -> tuple[int, int]:
    """Absolute start and stored length of body ``i`` of container ``f``."""
    c = ct.decode(f.read_bytes(), what=str(f))
    b = c.header.bodies[i]
    return c.body_start + b.offset, b.stored


def _noncanonical(m: dict[str, Any]) -> bytes:
    items = sorted(m.items(), key=lambda kv: cbor.encode(kv[0]), reverse=True)
    return bytes([0xa0 + len(items)]) + b"".join(cbor.encode(k) + cbor.encode(v)
                                                 for k, v in items)


def _gap(h: dict[str, Any], area: bytes) -> bytes:
    """One pad byte after body 0; later bodies and body_length shifted: readable, but a gap."""
    b0 = h["bodies"][0]
    for b in h["bodies"][1:]:
        b[1] += 1
    h["body_length"] += 1
    cut = b0[1] + b0[2]
    return area[:cut] + b"\x00" + area[cut:]


def _duplicate(h: dict[str, Any], area: bytes) -> bytes:
    """Body 0 again at the end of the area, with its own row: the same digest twice."""
    b0 = h["bodies"][0]
    h["bodies"].append([b0[0], h["body_length"], b0[2], b0[3]])
    h["body_length"] += b0[2]
    return area + area[b0[1]:b0[1] + b0[2]]


def _overlap(h: dict[str, Any], area: bytes) -> None:
    h["bodies"][1][1] -= 1


def _padded(h: dict[str, Any], area: bytes) -> bytes:
    h["body_length"] += 1
    return area + b"\x00"


def _stored_one(h: dict[str, Any], area: bytes) -> bytes:
    last = h["bodies"][-1]
    cut = last[2] - 1
    last[2] = 1
    h["body_length"] -= cut
    return area[:len(area) - cut]


def _stored_over_max(h: dict[str, Any], area: bytes) -> bytes:
    last = h["bodies"][-1]
    extra = ct.MAX_STORED_SIZE + 1 - last[2]
    last[2] += extra
    h["body_length"] += extra
    return area + bytes(extra)


def _manifest_flip(h: dict[str, Any], area: bytes) -> None:
    m = bytearray(h["manifest"])
    at = bytes(m).index(b"ckptfs-conformance") + 7
    m[at] ^= 1
    h["manifest"] = bytes(m)


def _loose(p: Path, f: Path, i: int) -> None:
    """Store body ``i`` of container ``f`` also as a version 1 loose object."""
    c = ct.decode(f.read_bytes(), what=str(f))
    b = c.header.bodies[i]
    stored = c.body_bytes(f.read_bytes(), b)
    out = p / chunk_path(b.digest)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(framing.frame(framing.unframe(stored, b.size, what="body")))


# -- stores ------------------------------------------------------------------------------------
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
    assert all(form(f.read_bytes()) == ct.CONTAINER_VERSION for f in _packs(p))  # 3.1


def _packs(p: Path) -> list[Path]:
    return sorted(f for f in (p / "packs").rglob("*") if f.is_file())


def _hint(p: Path, run: str, seq: int, snapshot: bytes, *, written: int, at: str | None = None
          ) -> bytes:
    data = ct.HeadHint(run, seq, Digest(snapshot), written).to_bytes()
    f = p / head_hint_path(at or run)
    f.write_bytes(data)
    return data


def _snap_id(p: Path, run: str, seq: int) -> bytes:
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
    _hint(p, "stale", 1, _snap_id(p, "stale", 1), written=w)
    _hint(p, "ahead", 9, _snap_id(p, "ahead", 2), written=w)
    torn = _hint(p, "torn", 2, _snap_id(p, "torn", 2), written=w)
    (p / head_hint_path("torn")).write_bytes(torn[:-3])
    (p / head_hint_path("garbage")).write_bytes(prng("hint-garbage", 60))
    _hint(p, "stale", 3, _snap_id(p, "stale", 3), written=w, at="other")  # names run 'stale'
    _hint(p, "forgot", 3, _snap_id(p, "forgot", 3), written=w)
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


def _chain(p: Path, hops: int) -> None:
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


def _required(p: Path, change: Callable[[set[str]], set[str]]) -> None:
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
    _required(p, lambda f: f - {COMPRESSED_HEADERS})
    s, c = new_store(p)
    shared = prng("mixed-shared", 3000).hex()
    s.start_run("r1").checkpoint({"shared": shared, "n": 1})
    s.close()
    _required(p, lambda f: f | {COMPRESSED_HEADERS})
    s, c = new_store(p)
    c.tick()
    s.resume("r1").checkpoint({"shared": shared, "n": 2, "notes": prng("mixed-n", 800).hex()})
    s.start_run("r2").checkpoint({"x": prng("mixed-x", 900).hex()})
    s.close()
    assert form((p / REC1).read_bytes()) == ct.CONTAINER_VERSION
    assert form((p / REC2).read_bytes()) == ct.CONTAINER_COMPRESSED


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
        assert _packs(p)

    vector("streamed-blob", "A blob streamed from a file object: its chunks were written into "
           "packs before the record that locates them (spec/v2.md 3.4, 3.5)", streamed)
    vector("forwards", "After forget and gc: the container the locators of seqs 2 and 3 name "
           "is gone; the reader follows moved/runs/r1/<seq 1> to the pack that now holds the "
           "bodies (spec/v2.md 6 step 3, 8, 9)", lambda p: forwards(p, new_store, prng, t0))

    def four_hops(p: Path) -> None:
        forwards(p, new_store, prng, t0)
        _chain(p, 4)

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


INVALID: dict[str, tuple[str, str, Callable[[Path], Any]]] = {
    # name: (category, description, damage of the base store); spec/v2.md 3.1
    "record-bad-magic": ("corrupt", "the head record's magic has one byte changed",
                         lambda p: flip(p / REC2, 1)),
    "record-form-4": ("corrupt", "container form byte 0x04 (only 0x02 and 0x03 exist)",
                      lambda p: (p / REC2).write_bytes(
                          (p / REC2).read_bytes()[:8] + b"\x04" + (p / REC2).read_bytes()[9:])),
    "record-hlen-zero": ("corrupt", "hlen 0 (out of range 1..83886080)",
                         lambda p: _hlen(p, 0)),
    "record-hlen-over-max": ("corrupt", "hlen 83886081 (out of range)",
                             lambda p: _hlen(p, 83886081)),
    "record-hlen-past-end": ("corrupt", "hlen in range but past the end of the file",
                             lambda p: _hlen(p, (p / REC2).stat().st_size + 100)),
    "record-header-digest": ("corrupt", "a byte of the header digest flipped",
                             lambda p: flip(p / REC2, 13 + _hl(p) + 5)),
    "record-header-flipped": ("corrupt", "the head record rewritten with its header as is "
                              "(form 0x02), then a byte of the nonce flipped, digest not "
                              "updated (a damaged header is never interpreted)",
                              lambda p: _flip_nonce(p)),
    "record-noncanonical": ("non-canonical", "the header's keys out of canonical order (its "
                            "digest matches those bytes)",
                            lambda p: (p / REC2).write_bytes(join(_noncanonical(split(
                                (p / REC2).read_bytes())[0]), split((p / REC2).read_bytes())[1]))),
    # 3.1 compressed headers (form 0x03; the header digest matches the stored bytes each time)
    "zheader-digest-stale": ("corrupt", "a form 0x03 header whose nonce was changed and "
                             "compressed again, the digest of the old stored bytes kept (never "
                             "inflated: the digest covers the stored bytes)",
                             lambda p: _zheader(p, lambda raw, h: framing.deflate(cbor.encode(
                                 {**h, "nonce": bytes(16)})), digest_of=True)),
    "zheader-noncanonical": ("non-canonical", "a form 0x03 header whose zstd frame inflates to "
                             "a map with its keys out of canonical order",
                             lambda p: _zheader(p, lambda raw, h: framing.deflate(
                                 _noncanonical(h)))),
    "zheader-not-zstd": ("corrupt", "form byte 0x03 before a header stored as plain CBOR (not a "
                         "zstd frame)", lambda p: _zheader(p, lambda raw, h: raw)),
    "zheader-no-content-size": ("corrupt", "a form 0x03 header whose zstd frame does not "
                                "declare its content size", lambda p: _zheader(
                                    p, lambda raw, h: zstandard.ZstdCompressor(
                                        write_content_size=False).compress(raw))),
    "zheader-trailing-bytes": ("corrupt", "one byte after the header's zstd frame (inside hlen)",
                               lambda p: _zheader(p, lambda raw, h: framing.deflate(raw)
                                                  + b"\x00")),
    "zheader-bomb": ("corrupt", "a form 0x03 header of a few KiB whose frame declares (and "
                     "holds) a valid header padded past the 80 MiB limit by an unknown key of "
                     "zeros: never inflated", lambda p: _zheader(p, lambda raw, h: framing.deflate(
                         _padded_header(h, ct.MAX_HEADER_SIZE + 1)))),
    "zheader-item-bomb": ("corrupt", "a form 0x03 header of a few KiB whose unknown key "
                          "x-ignored holds 4,194,304 empty arrays: with the header's own items, "
                          "more than the 4,194,304 data items a header may hold (format.md 5.3; "
                          "refused before they are built)", lambda p: _zheader(
                              p, lambda raw, h: framing.deflate(_item_bomb(h)))),
    "zheader-empty": ("corrupt", "a form 0x03 header whose frame declares 0 bytes",
                      lambda p: _zheader(p, lambda raw, h: framing.deflate(b""))),
    "record-kind-unknown": ("corrupt", "header kind 'future'",
                            lambda p: edit(p / REC2, lambda h, a: h.update(kind="future"))),
    "record-kind-pack": ("corrupt", "a run record path holding a header of kind 'pack'",
                         lambda p: edit(p / REC2, lambda h, a: h.update(kind="pack"))),
    "record-torn": ("corrupt", "the head record cut 5 bytes short of body_start + body_length "
                    "(no fallback to seq 1)", lambda p: (p / REC2).write_bytes(
                        (p / REC2).read_bytes()[:-5])),
    "record-appended": ("corrupt", "one byte appended to the head record",
                        lambda p: (p / REC2).write_bytes((p / REC2).read_bytes() + b"\x00")),
    # 3.2 the body table
    "bodies-gap": ("corrupt", "a pad byte between bodies 0 and 1 (offsets and body_length "
                   "shifted to match: readable, but not back to back)",
                   lambda p: edit(p / REC2, _gap)),
    "bodies-overlap": ("corrupt", "body 1 starts one byte before body 0 ends",
                       lambda p: edit(p / REC2, _overlap)),
    "bodies-duplicate-digest": ("corrupt", "body 0 twice in one container (its bytes repeated at "
                                "the end, body_length matching)",
                                lambda p: edit(p / REC2, _duplicate)),
    "bodies-size-zero": ("corrupt", "a body of size 0 (range 1..16777216)",
                         lambda p: edit(p / REC2, lambda h, a: h["bodies"][0].__setitem__(3, 0))),
    "bodies-stored-one": ("corrupt", "the last body stored in 1 byte (range 2..16908289; "
                          "body_length and the file cut to match)",
                          lambda p: edit(p / REC2, _stored_one)),
    "bodies-stored-over-max": ("corrupt", "a body stored in 16908290 bytes (over the limit; the "
                               "file and body_length match)", lambda p: edit(p / REC2,
                                                                            _stored_over_max)),
    "body-length-lies": ("corrupt", "body_length one past the last body, one byte appended to "
                         "match", lambda p: edit(p / REC2, _padded)),
    # 3.3 run records
    "record-run-mismatch": ("corrupt", "runs/r1/<2> whose header names run r2",
                            lambda p: edit(p / REC2, lambda h, a: h.update(run="r2"))),
    "record-seq-mismatch": ("corrupt", "runs/r1/<2> whose header names seq 3",
                            lambda p: edit(p / REC2, lambda h, a: h.update(seq=3))),
    "record-size-lies": ("corrupt", "size is one more than the manifest's length",
                         lambda p: edit(p / REC2, lambda h, a: h.update(size=h["size"] + 1))),
    "record-manifest-not-snapshot": ("corrupt", "one bit of the carried manifest flipped (still "
                                     "canonical CBOR; not the bytes the snapshot id names)",
                                     lambda p: edit(p / REC2, _manifest_flip)),
    "record-snapshot-lies": ("corrupt", "snapshot names seq 1's id, the manifest is seq 2's",
                             lambda p: edit(p / REC2, lambda h, a: h.update(
                                 snapshot=split((p / REC1).read_bytes())[0]["snapshot"]))),
    # 6 reading a chunk
    "body-flipped": ("corrupt", "a bit of a body of the head record flipped; no other copy "
                     "(found, but never with the right digest)",
                     lambda p: flip(p / REC2, sum(body_at(p / REC2, 0)) - 1)),
    "locator-container-absent": ("missing", "r1@1, which holds the bodies r1@2 locates, is "
                                 "gone: no forward, no loose object", lambda p: _unlink(p / REC1)),
    "locator-index-out-of-range": ("corrupt", "a locator whose container index is past the "
                                   "container list", lambda p: edit(p / REC2, lambda h, a: h[
                                       "locators"]["chunks"][0].__setitem__(1, len(
                                           h["locators"]["containers"])))),
    "locator-prefix-short": ("corrupt", "a locator prefix of 7 bytes (must be 8)",
                             lambda p: edit(p / REC2, lambda h, a: h["locators"]["chunks"][
                                 0].__setitem__(0, h["locators"]["chunks"][0][0][:7]))),
    # 8 forwards
    "forward-damaged": ("missing", "r1@1 is gone and its forward is damaged (treated as absent), "
                        "no loose object: nothing holds the chunk",
                        lambda p: _torn_forward(p)),
}


def _zheader(p: Path, stored: Callable[[bytes, dict[str, Any]], bytes], *,
             digest_of: bool = False) -> None:
    """Replace the head record's header by ``stored(canonical header bytes, header map)`` in
    form 0x03, with the header digest of those stored bytes (only the compression is wrong);
    ``digest_of``: keep the digest of the bytes stored before instead."""
    data = (p / REC2).read_bytes()
    h, area = split(data)
    old = data[13 + _hl(p):13 + _hl(p) + 32]
    out = join(stored(cbor.encode(h), h), area, digest=old if digest_of else None)
    (p / REC2).write_bytes(out[:8] + bytes([ct.CONTAINER_COMPRESSED]) + out[9:])


def _padded_header(h: dict[str, Any], size: int) -> bytes:
    """``h`` with an unknown key ``x-pad`` of zeros, canonical, ``size`` bytes or a few more."""
    raw = cbor.encode({**h, "x-pad": b""})
    return cbor.encode({**h, "x-pad": bytes(size - len(raw))})


def _item_bomb(h: dict[str, Any]) -> bytes:
    """``h`` with an unknown key ``x-ignored`` holding MAX_ITEMS empty arrays, canonical (built
    as bytes: the arrays are never Python lists)."""
    parts = {k: cbor.encode(v) for k, v in h.items()}
    parts["x-ignored"] = array_head(cbor.MAX_ITEMS) + b"\x80" * cbor.MAX_ITEMS
    return map_bytes(parts)


def _flip_nonce(p: Path) -> None:
    h, area = split((p / REC2).read_bytes())
    (p / REC2).write_bytes(join(h, area))  # form 0x02
    flip(p / REC2, 13 + (p / REC2).read_bytes()[13:13 + _hl(p)].index(b"nonce") + 7)


def _torn_forward(p: Path) -> None:
    (p / REC1).unlink()
    f = p / forward_path(REC1)
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_bytes(b"\xa1\x66bodies")


def _unlink(f: Path) -> None:
    f.unlink()


def _unlink_all(fs: list[Path]) -> None:
    for f in fs:
        f.unlink()


def _hl(p: Path) -> int:
    return int.from_bytes((p / REC2).read_bytes()[9:13], "big")


def _hlen(p: Path, n: int) -> None:
    data = (p / REC2).read_bytes()
    (p / REC2).write_bytes(data[:9] + n.to_bytes(4, "big") + data[13:])


def _first_pack_of(p: Path) -> Path:
    """The pack r1@1's record locates first."""
    h, _ = split((p / REC1).read_bytes())
    name = bytes(h["locators"]["containers"][0]).hex()
    return p / "packs" / name[:2] / name


PACK_INVALID: dict[str, tuple[str, str, Callable[[Path], Any]]] = {
    "pack-body-flipped": ("corrupt", "a bit of a pack body flipped (no other copy)",
                          lambda p: flip(_first_pack_of(p), sum(body_at(_first_pack_of(p))) - 1)),
    "pack-absent": ("missing", "a pack the records locate is gone (no forward, no loose object)",
                    lambda p: _unlink(_first_pack_of(p))),
    "pack-truncated": ("corrupt", "a pack cut inside its first body (found, but short)",
                       lambda p: _first_pack_of(p).write_bytes(_first_pack_of(p).read_bytes()[
                           :sum(body_at(_first_pack_of(p))) - 10])),
}

FORWARD_INVALID: dict[str, tuple[str, str, Callable[[Path], Any]]] = {
    "forward-five-hops": ("missing", "a chain of 5 forwards to the pack that holds the bodies: "
                          "a reader follows at most 4 (spec/v2.md 8)", lambda p: _chain(p, 5)),
    "forward-to-absent": ("missing", "the forward names a pack that is gone",
                          lambda p: _unlink_all(_packs(p))),
    "forward-wrong-bytes": ("corrupt", "the forward's rows point one byte off in the pack "
                            "(found, never with the right digest)",
                            lambda p: _shift_forward(p)),
}


def _shift_forward(p: Path) -> None:
    f = p / forward_path(REC1)
    m = cbor2.loads(f.read_bytes())
    for row in m["bodies"]:
        row[2] += 1
    f.write_bytes(cbor.encode(m))


def invalid(g: Any, new_store: Any, prng: Any, invalid_stores: Any, t0: int) -> None:
    builds: list[tuple[Callable[[Path], Any], dict[str, Any]]] = [
        (lambda p: base(p, new_store, prng), INVALID),
        (lambda p: pack_base(p, new_store, prng), PACK_INVALID),
        (lambda p: forwards(p, new_store, prng, t0), FORWARD_INVALID)]
    for build, cases in builds:
        tmp = g.out / "_v2base"
        build(tmp)
        invalid_stores(g, tmp, cases, prefix=P, requires=V2)
        shutil.rmtree(tmp)


def lookups(g: Any, new_store: Any, prng: Any, now: int, t0: int) -> None:
    """Lookups by id, hex prefix and run head in version 2 stores (spec/v2.md 4, 7)."""
    from ckptfs_conformance.render import render_ref

    d = g.store_dir("lookup", P + "store")
    base(d, new_store, prng)
    ids = {f"r1-{n}": Digest(_snap_id(d, "r1", n)) for n in (1, 2)}
    ids["r2-1"] = Digest(_snap_id(d, "r2", 1))
    _ambiguous(d, new_store, ids)
    amb = ids["amb-1"].hex[:6]
    ok = {"by-id": (ids["r1-1"].text, "an id that is not a head: found by reading record "
                    "headers (no manifest objects in a v2 store)"),
          "by-id-head": (ids["r1-2"].text, "the id of a head"),
          "by-prefix": (ids["r1-1"].hex[:10], "a hex prefix of 10 digits"),
          "by-prefix-6": (ids["r2-1"].hex[:6], "a hex prefix of 6 digits (the shortest)"),
          "by-prefix-longer-than-ambiguity": (ids["amb-1"].hex[:12], "a prefix that is unique "
                                               "although its first 6 digits are not"),
          "run-head": ("r1", "the head of r1"), "run-seq": ("r1@1", "r1@1")}
    for name, (ref, desc) in ok.items():
        g.vector("lookup", P + name, desc, ["snapshot", "{store}", str(now), ref],
                 {"output": render_ref(str(d), ref, now), "compare": "json"}, V2,
                 store=f"{P}store.store")
    bad = {"by-prefix-ambiguous": (amb, "not-found", "a 6-digit prefix two snapshot ids share "
                                   "(spec/v2.md 7: an ambiguity the reader reports)"),
           "absent-id": (Digest.of(b"nothing").text, "not-found", "no record has this id"),
           "absent-prefix": (_absent_prefix(ids), "not-found", "a prefix no id has")}
    for name, (ref, cat, desc) in bad.items():
        try:
            render_ref(str(d), ref, now)
            raise AssertionError(f"{ref}: ckptfs accepts it")
        except CkptfsError as e:
            assert e.category == cat, (ref, e.category)
        g.vector("lookup", P + name, desc, ["snapshot", "{store}", str(now), ref],
                 {"error": cat}, V2, store=f"{P}store.store")
    h = g.store_dir("lookup", P + "hints")
    beyond = hints(h, new_store, prng, t0)
    hint_desc = {"stale": "hint at seq 1, head 3", "ahead": "hint at seq 9 (absent), head 2",
                 "torn": "hint cut short", "garbage": "hint of random bytes",
                 "other": "hint that names another run", "forgot": "hint at seq 3, a stray "
                 "record in a retired range (a withdrawn commit), head 2"}
    for run, text in hint_desc.items():
        g.vector("lookup", f"{P}hint-{run}", f"the head of run {run!r}: {text} (spec/v2.md 4)",
                 ["snapshot", "{store}", str(now), run],
                 {"output": render_ref(str(h), run, now), "compare": "json"},
                 V2 + ["lifecycle"] if run == "forgot" else V2, store=f"{P}hints.store",
                 beyond_cddl=beyond)


def _absent_prefix(ids: dict[str, Digest]) -> str:
    n = 0
    while any(d.hex.startswith(f"{n:06x}") for d in ids.values()):
        n += 1
    return f"{n:06x}"


def _ambiguous(d: Path, new_store: Any, ids: dict[str, Digest]) -> None:
    """Commit run 'amb' with a salt label chosen (deterministic search) so that its id shares
    its first 6 hex digits with one of ``ids``."""
    from ckptfs.format.models import Manifest

    s, c = new_store(d)
    c.tick(100_000)
    r = s.start_run("amb")
    targets = {x.raw[:3] for x in ids.values()}
    seen: dict[str, Any] = {}
    # the bytes of the manifest with salt 00000000 (then committed for real below), as the
    # probe's record carries them
    r2 = s.start_run("amb-probe")
    r2.checkpoint({"k": 1}, labels={"salt": "00000000"})
    seen["data"] = s.repo.record("amb-probe", 1).manifest
    shutil.rmtree(d / "runs" / "amb-probe")
    template = seen["data"].replace(b"\x69amb-probe", b"\x63amb")
    at = template.index(b"00000000")
    n = 0
    while True:
        salt = f"{n:08d}".encode()
        if blake3.blake3(template[:at] + salt + template[at + 8:]).digest()[:3] in targets:
            break
        n += 1
    snap = r.checkpoint({"k": 1}, labels={"salt": salt.decode()})
    s.close()
    ids["amb-1"] = snap.digest
    assert snap.digest.raw[:3] in targets, "the salt search and the commit disagree"
