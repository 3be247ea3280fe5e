"""Generate every conformance vector into ckptfs_conformance/vectors/ (deterministic; never edit the
output by hand: change this script and run ``python -m ckptfs_conformance.generate``).

Stores are written by ckptfs itself with a fixed clock and writer name, then (for the invalid
ones) damaged one defect at a time. Adding vectors for a new feature (retention, migrations)
means adding a function to ``CASES``.
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
import zstandard

import ckptfs
from ckptfs.errors import CkptfsError
from ckptfs.format import cbor, framing
from ckptfs.format.cdc import ChunkerParams, cut_lengths, cut_lengths_py
from ckptfs.format.digest import Digest
from ckptfs.format.lifecycle import FENCE_ALL, Retired, Tombstone
from ckptfs.format.names import chunk_path, record_path, snapshot_path, tombstone_path
from ckptfs.ops.erase import erase
from ckptfs.ops.expire import set_expiry
from ckptfs.ops.retention import forget_snapshots
from ckptfs.runtime.migrations import Migrations
from ckptfs.store.lifecycle import write_retired
from ckptfs_conformance.gen_commit import commit_vectors, reproducible_nonces
from ckptfs_conformance import gen_hostile, gen_typed
from ckptfs_conformance.gen_leases import lease_vectors
from ckptfs_conformance.render import canonical_json, render_store, symbolic, tagged

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


# -- primitives --------------------------------------------------------------------------------
def digests(g: Gen) -> None:
    inputs = {"empty": b"", "abc": b"abc", "one-zero-byte": b"\x00",
              "1023-bytes": prng("digest-1023", 1023), "1024-bytes": prng("digest-1024", 1024),
              "1025-bytes": prng("digest-1025", 1025), "2049-bytes": prng("digest-2049", 2049),
              "65537-bytes": prng("digest-65537", 65537)}
    for name, data in inputs.items():
        g.vector("digest", name, f"BLAKE3-256 text form of {len(data)} bytes",
                 ["digest", "{file:input}"], {"output": Digest.of(data).text, "compare": "text"},
                 ["digest"], {"input": {"hex": data.hex()}})
    good = Digest.of(b"abc").text
    g.vector("digest", "parse-valid", "the text form parses to itself", ["parse-digest", good],
             {"output": good, "compare": "text"}, ["digest"])
    bad = {"parse-uppercase": "blake3:" + Digest.of(b"abc").hex.upper(),
           "parse-other-algorithm": good.replace("blake3", "sha256"),
           "parse-leading-space": " " + good, "parse-trailing-newline": good + "\n",
           "parse-short": good[:-1], "parse-no-prefix-colon": good.replace(":", "")}
    for name, text in bad.items():
        g.vector("digest", name, "not a digest text (format.md 3.3): reject",
                 ["parse-digest", text], {"error": "path"}, ["digest"])


def _hexs(*parts: str) -> str:
    return "".join(parts)


CBOR_VALID = {
    "uint-0": "00", "uint-23": "17", "uint-24": "1818", "uint-255": "18ff", "uint-256": "190100",
    "uint-65535": "19ffff", "uint-65536": "1a00010000", "uint-2p32": "1b0000000100000000",
    "uint-max": "1bffffffffffffffff", "nint-1": "20", "nint-min": "3bffffffffffffffff",
    "float-half-1.0": "f93c00", "float-half-1.5": "f93e00", "float-single": "fa47c35000",
    "float-double-1.1": "fb3ff199999999999a", "float-nan": "f97e00", "float-inf": "f97c00",
    "float-neg-inf": "f9fc00", "float-neg-zero": "f98000", "text-ascii": "6161",
    "text-utf8": "63e282ac", "bytes": "43010203", "array-empty": "80", "map-empty": "a0",
    "true": "f5", "false": "f4", "null": "f6",
    "map-length-first": _hexs("a2", "6162", "01", "626161", "02"),
    "map-nested": _hexs("a2", "6161", "01", "626262", "82", "02", "a1", "6163", "f6"),
    "map-dollar-key": _hexs("a1", "6224", "61", "f5"),
}
CBOR_REJECT = {
    "duplicate-key": (_hexs("a2", "6161", "01", "6161", "02"), "corrupt"),
    "nonminimal-int-1byte": ("1817", "non-canonical"),
    "nonminimal-int-2byte": ("190017", "non-canonical"),
    "nonminimal-int-8byte": ("1b00000000ffffffff", "non-canonical"),
    "nonminimal-text-length": ("780161", "non-canonical"),
    "nonminimal-array-length": ("980100", "non-canonical"),
    "nonminimal-float-double-1.0": ("fb3ff0000000000000", "non-canonical"),
    "nonminimal-float-single-1.0": ("fa3f800000", "non-canonical"),
    "nonminimal-nan-double": ("fb7ff8000000000000", "non-canonical"),
    "indefinite-array": ("9f01ff", "corrupt"),
    "indefinite-map": (_hexs("bf", "6161", "01", "ff"), "corrupt"),
    "indefinite-text": (_hexs("7f", "6161", "ff"), "corrupt"),
    "indefinite-bytes": (_hexs("5f", "4101", "ff"), "corrupt"),
    "tag-epoch-time": ("c11a514b67b0", "corrupt"),
    "tag-bignum-in-structure": ("c249010000000000000000", "corrupt"),
    "tag-self-describe": ("d9d9f700", "corrupt"),
    "key-order-bytewise": (_hexs("a2", "6162", "01", "6161", "02"), "non-canonical"),
    "key-order-length-first": (_hexs("a2", "626161", "01", "6162", "02"), "non-canonical"),
    "undefined": ("f7", "corrupt"),
    "simple-16": ("f0", "corrupt"),
    "simple-255": ("f8ff", "corrupt"),
    "int-key": (_hexs("a1", "01", "02"), "corrupt"),
    "bytes-key": (_hexs("a1", "4161", "01"), "corrupt"),
    "trailing-bytes": ("0000", "corrupt"),
    "truncated-int": ("1901", "corrupt"),
    "truncated-text": ("6261", "corrupt"),
    "invalid-utf8": ("62c328", "corrupt"),
    "depth-257": ("81" * 257 + "00", "corrupt"),
}
VALUE_VALID = {
    "bignum-2p64": "c249010000000000000000",
    "neg-bignum": "c349010000000000000000",
    "array-of-bignums": "82c249010000000000000000c349010000000000000000",
}
VALUE_REJECT = {
    "tag-epoch-time": "c11a514b67b0", "duplicate-key": _hexs("a2", "6161", "01", "6161", "02"),
    "indefinite-array": "9f01ff", "undefined": "f7", "int-key": "a10102",
    "trailing-bytes": "0000", "truncated": "1901",
}


def cbor_vectors(g: Gen) -> None:
    for name, h in CBOR_VALID.items():
        value = cbor2.loads(bytes.fromhex(h))
        assert cbor.encode(value).hex() == h, name
        g.vector("cbor", f"decode-{name}", "canonical CBOR: decodes to this value",
                 ["cbor-decode", "{file:input}"],
                 {"output": tagged(value), "compare": "json"}, ["cbor"], {"input": {"hex": h}})
    for name, (h, cat) in CBOR_REJECT.items():
        g.vector("cbor", f"reject-{name}", f"format.md 5.3: config/manifest/record CBOR like "
                 f"this MUST be rejected as {cat}", ["cbor-decode", "{file:input}"],
                 {"error": cat}, ["cbor"], {"input": {"hex": h}})
    for name, h in VALUE_VALID.items():
        g.vector("cbor", f"value-{name}", "value content: bignums (tags 2, 3) are allowed",
                 ["value-decode", "{file:input}"],
                 {"output": tagged(cbor2.loads(bytes.fromhex(h))), "compare": "json"}, ["cbor"],
                 {"input": {"hex": h}})
    for name, h in VALUE_REJECT.items():
        g.vector("cbor", f"value-reject-{name}", "value content: MUST be rejected (corrupt)",
                 ["value-decode", "{file:input}"], {"error": "corrupt"}, ["cbor"],
                 {"input": {"hex": h}})
    encode = {"map-order": {"b": 1, "aa": 2, "a": 3}, "float-1.0": 1.0, "float-1.5": 1.5,
              "float-0.1": 0.1, "float-100000": 100000.0, "float-nan": float("nan"),
              "float-inf": float("inf"), "int-2p64-bignum": 1 << 64,
              "int-neg-bignum": -(1 << 64) - 1, "int-max-u64": (1 << 64) - 1,
              "bytes-and-text": [b"\x00\xff", "h\u00e9llo"], "dollar-keys": {"$x": 1, "$$y": 2},
              "nested": {"list": [1, [2, [3, {}]]], "n": None, "t": True}}
    for name, value in encode.items():
        g.vector("cbor", f"encode-{name}", "canonical encoding of a value (writers)",
                 ["cbor-encode", "{file:input}"],
                 {"output": cbor.encode(value).hex(), "compare": "text"}, ["cbor-encode"],
                 {"input": {"text": canonical_json(tagged(value))}})


def _zstd(data: bytes, *, content_size: bool = True) -> bytes:
    return zstandard.ZstdCompressor(level=3, write_content_size=content_size,
                                    write_checksum=False).compress(data)


def _patch_content_size(frame: bytes, size: int) -> bytes:
    """Rewrite the frame content size field of a zstd frame header (RFC 8878 3.1.1.1)."""
    fhd = frame[4]
    fcs_flag, single = fhd >> 6, (fhd >> 5) & 1
    did = [0, 1, 2, 4][fhd & 3]
    width = [1 if single else 0, 2, 4, 8][fcs_flag]
    at = 5 + (0 if single else 1) + did
    value = size - 256 if width == 2 else size
    return frame[:at] + value.to_bytes(width, "little") + frame[at + width:]


def framing_vectors(g: Gen) -> None:
    text = b"ckptfs framing vector " * 200
    cases: dict[str, tuple[bytes, int, Any, str]] = {
        "raw": (b"\x00" + b"hello", 5, b"hello", "codec 0x00: the payload as is"),
        "raw-empty": (b"\x00", 0, b"", "an empty raw object"),
        "zstd": (b"\x01" + _zstd(text), len(text), text, "codec 0x01: one zstd frame"),
        "unknown-codec": (b"\x02" + text, len(text), "corrupt", "codec byte 0x02 is unknown"),
        "empty-file": (b"", 0, "corrupt", "no codec byte at all (truncated)"),
        "raw-short": (b"\x00" + text[:-1], len(text), "corrupt", "raw payload 1 byte short"),
        "raw-long": (b"\x00" + text + b"!", len(text), "corrupt", "raw payload 1 byte long"),
        "zstd-declares-other-size": (b"\x01" + _zstd(text), len(text) - 1, "corrupt",
                                     "the frame declares a size other than expected"),
        "zstd-no-content-size": (b"\x01" + _zstd(text, content_size=False), len(text),
                                 "corrupt", "format.md 4: the frame MUST declare its size"),
        "zstd-truncated": (b"\x01" + _zstd(text)[:-5], len(text), "corrupt",
                           "the zstd frame is cut short"),
        "zstd-bomb": (b"\x01" + _patch_content_size(_zstd(bytes(64 << 20)), 1000), 1000,
                      "corrupt", "a frame whose header claims 1000 bytes but inflates to "
                      "64 MiB: inflate at most size+1 bytes, then reject"),
    }
    for name, (stored, size, want, desc) in cases.items():
        expect = ({"error": want} if isinstance(want, str)
                  else {"output": want.hex(), "compare": "text"})
        g.vector("framing", name, desc, ["unframe", "{file:input}", str(size)], expect,
                 ["framing"], {"input": {"hex": stored.hex()}})


def chunker_vectors(g: Gen) -> None:
    cases: list[tuple[str, tuple[int, int, int, int], dict[str, Any]]] = [
        ("small-nc1", (64, 256, 1024, 1), {"prng": {"seed": "cut-small", "length": 20000}}),
        ("small-nc0", (64, 256, 1024, 0), {"prng": {"seed": "cut-small", "length": 20000}}),
        ("small-nc2", (64, 256, 1024, 2), {"prng": {"seed": "cut-small", "length": 20000}}),
        ("small-nc3", (64, 256, 1024, 3), {"prng": {"seed": "cut-small", "length": 20000}}),
        ("avg-362-rounds-down", (100, 362, 2000, 1), {"prng": {"seed": "cut-round", "length": 30000}}),
        ("avg-363-rounds-up", (100, 363, 2000, 1), {"prng": {"seed": "cut-round", "length": 30000}}),
        ("shorter-than-min", (64, 256, 1024, 1), {"prng": {"seed": "cut-short", "length": 50}}),
        ("empty", (64, 256, 1024, 1), {"hex": ""}),
        ("zeros-hit-max", (64, 256, 1024, 1), {"zeros": 5000}),
        ("odd-min", (65, 256, 1025, 1), {"prng": {"seed": "cut-odd", "length": 9999}}),
        ("default-params-1mib", (16384, 65536, 262144, 1),
         {"prng": {"seed": "cut-default", "length": 1 << 20}}),
        ("mid-params", (1024, 4096, 16384, 1), {"prng": {"seed": "cut-mid", "length": 200000}}),
    ]
    for name, (mn, avg, mx, nc), src in cases:
        data = materialize(src)
        p = ChunkerParams(min_size=mn, avg_size=avg, max_size=mx, normalization=nc)
        lengths = cut_lengths_py(data, p)
        assert lengths == cut_lengths(data, p), name
        g.vector("chunker", name, f"FastCDC 2020 cut lengths, min {mn} avg {avg} max {mx} "
                 f"normalization {nc}, {len(data)} input bytes",
                 ["cut", str(mn), str(avg), str(mx), str(nc), "{file:input}"],
                 {"output": lengths, "compare": "json"}, ["chunker"], {"input": src})


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


def _pay(amount: int) -> dict[str, Any]:
    return {"paid": amount, "receipt": f"r-{amount}"}


class _Crash(BaseException):
    pass


def _crash(*_a: Any) -> Any:
    raise _Crash()


def _fail(*_a: Any) -> Any:
    raise ValueError("card declined")


STORES: dict[str, Callable[[Path], list[str] | None]] = {}


def store(fn: Callable[[Path], Any]) -> Callable[[Path], Any]:
    """Register a valid-store builder (its docstring's first line is the description)."""
    STORES[fn.__name__.replace("_", "-")] = fn
    return fn


@store
def empty_store(p: Path) -> None:
    """A store with a config and no runs."""
    s, _ = new_store(p)
    s.init()


@store
def value_scalars(p: Path) -> None:
    """One snapshot holding one value entry of every data-model type, inline."""
    s, c = new_store(p)
    r = s.start_run("r1", schema=("agent", 3))
    r.checkpoint({"int": 42, "neg": -7, "u64max": (1 << 64) - 1, "bignum": 1 << 70,
                  "negbig": -(1 << 70), "float": 1.5, "nan": float("nan"),
                  "inf": float("-inf"), "text": "h\u00e9llo \u2603", "bytes": b"\x00\x01\xff",
                  "true": True, "null": None, "map": {"$dollar": 1, "b": [1, 2.0, "x"]},
                  "empty-map": {}, "empty-list": []}, "start")


@store
def value_chunked(p: Path) -> None:
    """A value larger than any inline threshold, split into many chunks."""
    s, c = new_store(p)
    r = s.start_run("r1")
    r.checkpoint({"plan": {"steps": [f"step {i}: " + prng(f"v{i}", 40).hex() for i in range(60)]}})


@store
def list_appended(p: Path) -> None:
    """A top-level list (cbor-seq) that grows over five checkpoints, chunked."""
    s, c = new_store(p)
    r = s.start_run("chat")
    msgs: list[Any] = []
    for i in range(5):
        c.tick()
        msgs = msgs + [{"role": "user" if i % 2 else "assistant",
                        "content": prng(f"msg{i}", 300).hex()}]
        r.checkpoint({"messages": msgs, "turn": i})


@store
def array_as_cbor(p: Path) -> None:
    """A top-level array stored with encoding cbor (readers accept both encodings)."""
    init_store(p)
    e = content_entry(p, "value", cbor.encode([1, "two", [3]]), encoding="cbor")
    commit_raw(p, manifest_map("r1", 1, {"items": e}))


@store
def blobs(p: Path) -> None:
    """Blobs: inline, chunked, empty, with a media type and labels."""
    s, c = new_store(p)
    r = s.start_run("r1")
    r.checkpoint({"small": ckptfs.Blob(b"tiny", type="text/plain"),
                  "big": ckptfs.Blob(prng("blob", 9000), type="image/png"),
                  "empty": ckptfs.Blob(b"")},
                 entry_labels={"big": {"source": "camera"}})


@store
def shared_chunks(p: Path) -> None:
    """Equal content in two entries and two runs is stored once and read back by each."""
    s, c = new_store(p)
    data = prng("shared", 6000)
    for run in ("a", "b"):
        c.tick()
        s.start_run(run).checkpoint({"one": ckptfs.Blob(data), "two": ckptfs.Blob(data)})


@store
def multiple_runs(p: Path) -> None:
    """Three runs with different schemas, boundaries and lengths."""
    s, c = new_store(p)
    for i, run in enumerate(("alpha", "beta", "gamma.2")):
        r = s.start_run(run, schema=(f"s{i}", i))
        for j in range(i + 1):
            c.tick()
            r.checkpoint({"i": i, "j": j}, ("start", "step", "final")[j])


@store
def resume_and_fork(p: Path) -> None:
    """Resumes (attempt, resumed_from) and a fork (parent in another run)."""
    s, c = new_store(p)
    r = s.start_run("main")
    r.checkpoint({"n": 1}, "start")
    c.tick()
    r.checkpoint({"n": 2})
    c.tick()
    r = s.resume("main")
    r.checkpoint({"n": 3})
    c.tick()
    r.checkpoint({"n": 4})
    c.tick()
    r = s.resume("main")
    r.checkpoint({"n": 5}, "final")
    c.tick()
    f = s.fork("main@2", "branch")
    f.checkpoint({"n": 20})
    c.tick()
    f.checkpoint({"n": 21})


@store
def references(p: Path) -> None:
    """References, minimal and with digest, size, expiry (past and future) and labels."""
    s, c = new_store(p)
    r = s.start_run("r1")
    r.checkpoint({"min": ckptfs.Ref("s3://bucket/key"),
                  "full": ckptfs.Ref("https://example.invalid/data.bin",
                                     digest=Digest.of(b"x").text, size=1,
                                     expires_at=(T0 + 3_600_000) / 1000,
                                     labels={"owner": "me"}),
                  "gone": ckptfs.Ref("file:///nonexistent", expires_at=(T0 + 1000) / 1000)})


@store
def expired_snapshots(p: Path) -> None:
    """A snapshot past its expiry renders as expired; the others are read as usual."""
    s, c = new_store(p)
    r = s.start_run("r1")
    r.checkpoint({"x": 1}, expires_at=(T0 + 60_000) / 1000)
    c.tick()
    r.checkpoint({"x": 2}, expires_at=(NOW + 60_000) / 1000)
    c.tick()
    r.checkpoint({"x": 3})


@store
def labels_and_names(p: Path) -> None:
    """Snapshot labels, entry labels, nested entry names and an empty state."""
    s, c = new_store(p)
    r = s.start_run("r1")
    r.checkpoint({}, "start", labels={"k8s.io/name": "agent", "phase": ""})
    c.tick()
    r.checkpoint({"a/b/c": 1, "a/b/d": [1], "_x.y-z": "v"}, labels={"phase": "two"},
                 entry_labels={"a/b/c": {"unit": "count"}})


def _ledger_run(p: Path) -> tuple[ckptfs.Store, Clock, Any]:
    s, c = new_store(p)
    r = s.start_run("agent")
    r.checkpoint({"cart": ["book"]}, "start")
    c.tick()
    return s, c, r


@store
def ledger_completed(p: Path) -> None:
    """Effects that completed: intent and result records, folded per key."""
    s, c, r = _ledger_run(p)
    r.effect("pay", _pay, 10, key="pay-1")
    c.tick()
    r.effect("pay", _pay, 20, key="pay-2")


@store
def ledger_failed(p: Path) -> None:
    """An effect that raised: recorded as failed with its error."""
    s, c, r = _ledger_run(p)
    try:
        r.effect("pay", _fail, 10, key="pay-1")
    except ValueError:
        pass


@store
def ledger_in_doubt(p: Path) -> None:
    """The process died inside an effect: intent without outcome is in doubt; a resumed
    attempt settles another in-doubt effect by hand."""
    s, c, r = _ledger_run(p)
    try:
        r.effect("ship", _crash, "book", key="ship-1")
    except _Crash:
        pass
    c.tick()
    r = s.resume("agent")
    try:
        r.effect("email", _crash, key="mail-1")
    except _Crash:
        pass
    c.tick()
    r = s.resume("agent")
    r.settle_effect("mail-1", result={"sent": True})


@store
def ledger_approval(p: Path) -> None:
    """An approval requested, decided in a later attempt, and a second one still pending."""
    s, c, r = _ledger_run(p)
    try:
        r.wait_for_approval({"amount": 500}, key="big-payment")
    except ckptfs.errors.ApprovalPending:
        pass
    c.tick()
    r = s.resume("agent")
    r.approve("big-payment", {"by": "alice"})
    c.tick()
    try:
        r.wait_for_approval({"amount": 900}, key="bigger-payment")
    except ckptfs.errors.ApprovalPending:
        pass


@store
def ledger_large_result(p: Path) -> None:
    """A result too large for the record is stored as chunks (result_content)."""
    s, c, r = _ledger_run(p)
    r.effect("fetch", lambda: [f"row {i:05d}" for i in range(8000)], key="fetch-1")


@store
def unknown_optional_keys(p: Path) -> None:
    """Unknown config keys, optional features, settings, manifest/record/entry keys: ignored."""
    init_store(p, optional=["future-compression"], settings={"x-retention": {"days": 3}},
               **{"x-vendor": "acme"})
    e = content_entry(p, "value", cbor.encode({"k": 1}), encoding="cbor")
    commit_raw(p, manifest_map("r1", 1, {"v": e}, **{"x-future": {"a": 1}, "zzz": None}),
               record_extra={"x-note": "ignored"})


@store
def unknown_entry_keys(p: Path) -> list[str]:
    """Unknown keys in an entry are ignored (v1 writers add none, so the CDDL, which describes
    what writers write, does not allow them)."""
    init_store(p)
    e = content_entry(p, "value", cbor.encode({"k": 1}), encoding="cbor")
    e["x-entry-extension"] = [1, 2]
    r = {"kind": "ref", "uri": "s3://b/k", "x-ref-extension": True}
    d = commit_raw(p, manifest_map("r1", 1, {"v": e, "r": r}))
    return [snapshot_path(d)]


@store
def garbage_ignored(p: Path) -> None:
    """Uncommitted manifests, orphan chunks, tmp files and foreign names are never read."""
    s, c = new_store(p)
    r = s.start_run("r1")
    snap = r.checkpoint({"x": 1})
    e = content_entry(p, "value", cbor.encode("uncommitted"), encoding="cbor")
    data = cbor.encode(manifest_map("r1", 2, {"x": e}, parent=snap.digest.raw))
    put_file(p, snapshot_path(Digest.of(data)), framing.frame(data))
    put_file(p, chunk_path(Digest.of(b"orphan")), framing.frame(b"orphan"))
    put_file(p, "tmp/partial-write", b"\x00garbage")
    put_file(p, "README.txt", b"not part of the store")
    put_file(p, "runs/r1/not-a-seq", b"junk")
    put_file(p, "runs/r1/00000000000000000000", b"seq zero is not a record")
    put_file(p, "runs/r1/0000000000000000002", b"19 digits")
    put_file(p, "runs/.hidden/00000000000000000001", b"not a run id")


@store
def sparse_seqs(p: Path) -> None:
    """Sequence numbers need not be contiguous (retention removes records): 1, 3, 10."""
    init_store(p)
    parent = None
    for seq in (1, 3, 10):
        e = content_entry(p, "value", cbor.encode(seq), encoding="cbor")
        parent = commit_raw(p, manifest_map("r1", seq, {"seq": e},
                                            parent=parent.raw if parent else None))


@store
def raw_framing(p: Path) -> None:
    """Every object stored raw (codec 0x00): framing is not part of an object's identity."""
    s, c = new_store(p)
    s.start_run("r1").checkpoint({"text": "x" * 5000, "blob": ckptfs.Blob(b"y" * 4000)})
    for f in sorted((p / "chunks").rglob("*")) + sorted((p / "snapshots").rglob("*")):
        if f.is_file():
            d = f.read_bytes()
            if d[0] == 1:
                f.write_bytes(b"\x00" + zstandard.ZstdDecompressor().decompress(d[1:]))


@store
def chunked_inline_mix(p: Path) -> None:
    """Small content stored in chunks and large-ish (up to 64 KiB) inline: both are valid."""
    init_store(p)
    big = prng("inline-64k", 65536)
    commit_raw(p, manifest_map("r1", 1, {
        "small-chunked": content_entry(p, "blob", b"abc", inline=False),
        "inline-64k": content_entry(p, "blob", big, inline=True),
        "list-inline": content_entry(p, "value", b"\x01\x02\x03", encoding="cbor-seq"),
        "list-empty": content_entry(p, "value", b"", encoding="cbor-seq", inline=False)}))


# -- lifecycle: erasure, forgotten ranges, expiry overrides (spec/retention.md) ------------------
def _steps(s: ckptfs.Store, c: Clock, run: str, n: int, **kw: Any) -> list[Any]:
    """Start ``run`` and commit ``n`` snapshots one clock tick apart; their Snapshot values."""
    r = s.start_run(run)
    out = []
    for i in range(1, n + 1):
        c.tick()
        out.append(r.checkpoint({"run": run, "step": i, "note": prng(f"{run}{i}", 40).hex()},
                                **kw))
    return out


def _stray(p: Path, run: str, seq: int, keep: Callable[[], Any]) -> None:
    """Run ``keep`` (which forgets or erases), then put the record at ``seq`` back: a leftover
    record that a marker hides (an interrupted forget, or a stale writer's late create)."""
    data = (p / record_path(run, seq)).read_bytes()
    keep()
    put_file(p, record_path(run, seq), data)


def _interrupted_erase(s: ckptfs.Store, c: Clock, run: str) -> None:
    """Erase steps 1 and 2 only (fence, tombstone ``erasing``): the process died before it
    deleted anything, so the records and manifests are all still there."""
    st = s.storage
    ids = tuple((n, s.repo.record(run, n).snapshot) for n in s.repo.seqs(run))
    write_retired(st, Retired(run=run, through=FENCE_ALL, kept=(), created=c.tick()))
    st.replace(tombstone_path(run), Tombstone(run=run, seq=None, reason="GDPR request 7",
                                              requested=c(), snapshots=ids).to_bytes())


@store
def lifecycle_run_erased(p: Path) -> None:
    """Run 'gone' was erased: only its tombstone (state erased, with the erased ids and counts)
    and its fence remain; run 'keep' still reads its blob, shared with the erased run."""
    s, c = new_store(p)
    data = prng("erase-shared", 3000)
    s.start_run("keep").checkpoint({"doc": ckptfs.Blob(data)})
    c.tick()
    g = s.start_run("gone")
    g.checkpoint({"doc": ckptfs.Blob(data), "secret": "x" * 3000})
    c.tick()
    g.checkpoint({"doc": ckptfs.Blob(data), "secret": "y" * 3000})
    erase(s.repo, "gone", reason="user 42 asked to be forgotten", now=c.tick())


@store
def lifecycle_snapshot_erased(p: Path) -> None:
    """Snapshot 2 of three was erased: its tombstone remains; seqs 1 and 3 read as usual (the
    run is fenced for writers, which readers do not see)."""
    s, c = new_store(p)
    _steps(s, c, "r1", 3)
    erase(s.repo, "r1", seq=2, reason="pasted a password", now=c.tick())


@store
def lifecycle_erase_interrupted(p: Path) -> None:
    """An erase that stopped after its tombstone (state erasing): every record and manifest is
    still there, but the run is erased for readers: no snapshot of it is shown."""
    s, c = new_store(p)
    _steps(s, c, "r1", 2)
    _steps(s, c, "other", 1)
    _interrupted_erase(s, c, "r1")


@store
def lifecycle_forgotten_gaps(p: Path) -> None:
    """Snapshots 2 and 3 of five were forgotten: a gap; seq 1 is kept below the marker."""
    s, c = new_store(p)
    _steps(s, c, "r1", 5)
    forget_snapshots(s.repo, {"r1": {2, 3}}, now=c.tick())


@store
def lifecycle_stray_records(p: Path) -> None:
    """Records left inside a retired range (forgotten, not yet deleted) are strays: not shown,
    not the head; the kept seq below the marker is shown."""
    s, c = new_store(p)
    _steps(s, c, "r1", 5)
    _stray(p, "r1", 3, lambda: _stray(p, "r1", 2, lambda: forget_snapshots(
        s.repo, {"r1": {2, 3}}, now=c.tick())))


@store
def lifecycle_run_forgotten(p: Path) -> None:
    """Every snapshot of run 'old' was forgotten (marker through its head, nothing kept) and its
    head record was left behind: the run has no head and no snapshots. Run 'new' is intact."""
    s, c = new_store(p)
    _steps(s, c, "old", 2)
    _steps(s, c, "new", 1)
    _stray(p, "old", 2, lambda: forget_snapshots(s.repo, {"old": {1, 2}}, now=c.tick()))


@store
def lifecycle_expiry_overrides(p: Path) -> None:
    """Snapshot overrides win over the manifest: seq 1 (no expiry) made expired, seq 2 (expired
    by its manifest) made never-expiring, seq 3 made to expire exactly at NOW (expired)."""
    s, c = new_store(p)
    _steps(s, c, "r1", 1)
    r = s.resume("r1")
    c.tick()
    r.checkpoint({"step": 2}, expires_at=(T0 + 60_000) / 1000)
    c.tick()
    r.checkpoint({"step": 3}, expires_at=(NOW + 3_600_000) / 1000)
    c.tick()
    r.checkpoint({"step": 4})
    for target, when in (("r1@1", T0 + 10_000), ("r1@2", None), ("r1@3", NOW)):
        set_expiry(s.repo, target, when, now=c.tick())


@store
def lifecycle_run_expiry(p: Path) -> None:
    """A run override expires every snapshot of run 'a' except seq 2, whose own override says
    never; run 'b''s override (never) lifts the expiry its manifests carry."""
    s, c = new_store(p)
    _steps(s, c, "a", 3)
    _steps(s, c, "b", 2, expires_at=(T0 + 60_000) / 1000)
    set_expiry(s.repo, "a", T0 + 30_000, now=c.tick())
    set_expiry(s.repo, "a@2", None, now=c.tick())
    set_expiry(s.repo, "b", None, now=c.tick())


@store
def default_ttl(p: Path) -> None:
    """Setting default_ttl_ms (12 h): the writer gave each snapshot created + TTL (the first is
    expired at NOW), except the one with an explicit expiry."""
    s, c = new_store(p)
    s.init(settings={"default_ttl_ms": 43_200_000})
    r = s.start_run("r1")
    r.checkpoint({"step": 1})
    c.tick(50_000_000)
    r.checkpoint({"step": 2})
    c.tick()
    r.checkpoint({"step": 3}, expires_at=(NOW + 1000) / 1000)


@store
def migrated_from(p: Path) -> None:
    """A run resumed by code of schema v3 from a v1 snapshot: the next manifest carries
    migrated_from (provenance only: readers may ignore it)."""
    s, c = new_store(p)
    s.start_run("r1", schema=("agent", 1)).checkpoint({"name": "Ada Lovelace"})
    c.tick()
    m = Migrations()
    m.add("agent", 1, lambda st: {"first": st["name"].split()[0], "last": st["name"].split()[1]})
    m.add("agent", 2, lambda st: {**st, "tags": []})
    r = s.resume("r1", schema=("agent", 3), migrations=m)
    r.checkpoint(dict(r.state))
    c.tick()
    s.resume("r1", schema=("agent", 3)).checkpoint({"tags": ["x"]})


@store
def migrated_from_malformed(p: Path) -> list[str]:
    """A malformed migrated_from (a string): readers that use the field ignore it, none refuse
    the manifest (migrations.md 4)."""
    init_store(p)
    e = content_entry(p, "value", cbor.encode(1), encoding="cbor")
    d = commit_raw(p, manifest_map("r1", 1, {"v": e}, migrated_from="agent@1"))
    return [snapshot_path(d)]


def valid_stores(g: Gen) -> None:
    for name, build in STORES.items():
        d = g.store_dir("store-valid", name)
        beyond_cddl = build(d) or []
        requires = ["reader", *_feature(name)]
        desc = " ".join((build.__doc__ or "").split())
        g.vector("store-valid", name, desc, ["read", "{store}", str(NOW)],
                 {"output": render_store(str(d), NOW), "compare": "json"}, requires,
                 store=f"{name}.store", beyond_cddl=beyond_cddl)


# -- invalid stores ----------------------------------------------------------------------------
def _base(p: Path) -> None:
    """The store the invalid vectors damage: run r1 with two snapshots, inline and chunked
    values, a chunked blob; run r2 with one snapshot."""
    s, c = new_store(p)
    r = s.start_run("r1")
    r.checkpoint({"small": {"a": 1}, "big": "z" * 3000 + prng("b", 500).hex(),
                  "blob": ckptfs.Blob(prng("blob", 3000))}, "start")
    c.tick()
    r.checkpoint({"small": {"a": 2}, "big": "z" * 3000 + prng("b", 500).hex(),
                  "blob": ckptfs.Blob(prng("blob", 3000))})
    c.tick()
    s.start_run("r2").checkpoint({"x": 1})


def _files(p: Path, sub: str) -> list[Path]:
    return sorted(f for f in (p / sub).rglob("*") if f.is_file())


def _head_manifest(p: Path, run: str = "r1", seq: int = 2) -> tuple[Path, dict[str, Any], bytes]:
    rec = cbor2.loads((p / record_path(run, seq)).read_bytes())
    path = p / snapshot_path(Digest(rec["snapshot"]))
    stored = path.read_bytes()
    data = framing.unframe(stored, rec["size"], what="m")
    return path, cbor2.loads(data), data


def _entry_chunk(p: Path, entry: str, i: int = 0) -> Path:
    _, m, _ = _head_manifest(p)
    return p / chunk_path(Digest(m["entries"][entry]["chunks"][i][0]))


def _flip(f: Path, at: int = -1) -> None:
    b = bytearray(f.read_bytes())
    b[at] ^= 0x01
    f.write_bytes(bytes(b))


def _recommit(p: Path, m: dict[str, Any], data: bytes | None = None) -> None:
    """Replace r1's head by manifest ``m`` (committed consistently, so only ``m`` is wrong)."""
    (p / record_path("r1", 2)).unlink()
    commit_raw(p, m, data=data)


def _with_entry(p: Path, name: str, entry: dict[str, Any], **kw: Any) -> None:
    _, m, _ = _head_manifest(p)
    m["entries"][name] = entry
    m.update(kw)
    _recommit(p, m)


def _bad_ledger(p: Path, records: list[dict[str, Any]], count: int | None = None) -> None:
    content = b"".join(cbor.encode(r) for r in records)
    _, m, _ = _head_manifest(p)
    m["ledger"] = {"count": len(records) if count is None else count, "size": len(content),
                   "digest": Digest.of(content).raw, "inline": content}
    _recommit(p, m)


def _rec(key: str, status: str, **kw: Any) -> dict[str, Any]:
    r = {"key": key, "kind": "effect", "name": "pay", "args": Digest.of(b"a").raw,
         "status": status, "at": T0, "attempt": 1}
    r.update(kw)
    return r


def _set_config(p: Path, **kw: Any) -> None:
    cfg = cbor2.loads((p / "ckptfs.cbor").read_bytes())
    cfg.update(kw)
    (p / "ckptfs.cbor").write_bytes(cbor.encode(cfg))


def _noncanonical(m: dict[str, Any]) -> bytes:
    """``m`` encoded with its top-level keys in reverse order (otherwise canonical)."""
    items = sorted(m.items(), key=lambda kv: cbor.encode(kv[0]), reverse=True)
    return bytes([0xa0 + len(items)]) + b"".join(cbor.encode(k) + cbor.encode(v)
                                                 for k, v in items)


def _zstd_bomb_chunk(p: Path) -> None:
    f = _entry_chunk(p, "blob")
    _, m, _ = _head_manifest(p)
    size = m["entries"]["blob"]["chunks"][0][1]
    f.write_bytes(b"\x01" + _patch_content_size(_zstd(bytes(32 << 20)), size))


def _raw_chunk(p: Path) -> Path:
    """The first chunk of entry 'big' (stored with zstd: rewritten raw, same identity)."""
    f = _entry_chunk(p, "big")
    d = f.read_bytes()
    if d[0] == 1:
        f.write_bytes(b"\x00" + zstandard.ZstdDecompressor().decompress(d[1:]))
    return f


INVALID: dict[str, tuple[str, str, Callable[[Path], Any]]] = {
    # name: (category, description, damage)
    "no-config": ("not-found", "the root has no ckptfs.cbor",
                  lambda p: (p / "ckptfs.cbor").unlink()),
    "config-version-3": ("unsupported-version", "config version 3",
                         lambda p: _set_config(p, version=3)),
    "config-required-feature": ("unsupported-feature", "the config requires a feature no "
                                "v1 reader knows", lambda p: _set_config(
                                    p, required=["x-unknown-feature"])),
    "config-hash-sha256": ("unsupported-feature", "config hash is not blake3",
                           lambda p: _set_config(p, hash="sha256")),
    "config-chunker-algorithm": ("unsupported-feature", "an unknown chunker algorithm",
                                 lambda p: _set_config(p, chunker=dict(
                                     SMALL_CBOR, algorithm="rabin"))),
    "config-not-ckptfs": ("corrupt", "config 'format' is not 'ckptfs'",
                          lambda p: _set_config(p, format="other")),
    "config-noncanonical": ("non-canonical", "config keys out of canonical order",
                            lambda p: (p / "ckptfs.cbor").write_bytes(_noncanonical(
                                cbor2.loads((p / "ckptfs.cbor").read_bytes())))),
    "config-truncated": ("corrupt", "ckptfs.cbor cut short",
                         lambda p: (p / "ckptfs.cbor").write_bytes(
                             (p / "ckptfs.cbor").read_bytes()[:-3])),
    "chunk-flipped-byte": ("corrupt", "one bit of a raw chunk flipped: digest mismatch",
                           lambda p: _flip(_raw_chunk(p))),
    "chunk-missing": ("missing", "a chunk the head snapshot needs is absent",
                      lambda p: _entry_chunk(p, "big").unlink()),
    "chunk-truncated": ("corrupt", "a chunk file cut short",
                        lambda p: _raw_chunk(p).write_bytes(_raw_chunk(p).read_bytes()[:-10])),
    "chunk-empty-file": ("corrupt", "a chunk file of zero bytes",
                         lambda p: _entry_chunk(p, "big").write_bytes(b"")),
    "chunk-unknown-codec": ("corrupt", "a chunk with codec byte 0x07",
                            lambda p: _raw_chunk(p).write_bytes(
                                b"\x07" + _raw_chunk(p).read_bytes()[1:])),
    "chunk-zstd-bomb": ("corrupt", "a chunk replaced by a zstd frame that inflates far past "
                        "its declared (and expected) size", _zstd_bomb_chunk),
    "chunk-of-other-content": ("corrupt", "a chunk file holding another chunk's bytes",
                               lambda p: _entry_chunk(p, "big", 0).write_bytes(
                                   _entry_chunk(p, "big", 1).read_bytes())),
    "manifest-flipped-byte": ("corrupt", "one bit of the head manifest flipped (stored raw; "
                              "still well-formed CBOR, but not the bytes its id names)",
                              lambda p: _flip_manifest(p)),
    "manifest-zstd-flipped-byte": ("corrupt", "a bit of the zstd-framed head manifest flipped",
                                   lambda p: _flip(_head_manifest(p)[0])),
    "manifest-missing": ("missing", "a run record points at an absent manifest",
                         lambda p: _head_manifest(p)[0].unlink()),
    "manifest-truncated": ("corrupt", "the head manifest file cut short",
                           lambda p: _head_manifest(p)[0].write_bytes(
                               _head_manifest(p)[0].read_bytes()[:-7])),
    "record-truncated": ("corrupt", "the head run record cut short (no silent fallback to "
                         "the previous record)", lambda p: (p / record_path("r1", 2)).write_bytes(
                             (p / record_path("r1", 2)).read_bytes()[:-4])),
    "record-size-lies": ("corrupt", "the record's manifest size is one too large",
                         lambda p: _patch_record(p, size=_record(p)["size"] + 1)),
    "record-digest-lies": ("corrupt", "the record of r1 seq 2 names r1's seq 1 manifest",
                           lambda p: _patch_record(p, snapshot=_record(p, 1)["snapshot"])),
    "record-in-wrong-run": ("corrupt", "runs/r2/..1 holds r1's record",
                            lambda p: (p / record_path("r2", 1)).write_bytes(
                                (p / record_path("r1", 1)).read_bytes())),
    "record-other-run-manifest": ("corrupt", "a record whose manifest names another run",
                                  lambda p: _patch_record(p, snapshot=_record(p, 1, "r2")[
                                      "snapshot"], size=_record(p, 1, "r2")["size"])),
    "entry-size-lies": ("corrupt", "an entry's size is not the sum of its chunk sizes",
                        lambda p: _with_entry(p, "big", dict(_head_manifest(p)[1]["entries"][
                            "big"], size=_head_manifest(p)[1]["entries"]["big"]["size"] + 1))),
    "chunk-size-lies": ("corrupt", "a chunk reference's size disagrees with the chunk",
                        lambda p: _chunk_size_lies(p)),
    "entry-digest-lies": ("corrupt", "chunks intact, the entry digest is of other content",
                          lambda p: _with_entry(p, "big", dict(_head_manifest(p)[1]["entries"][
                              "big"], digest=Digest.of(b"other").raw))),
    "inline-digest-lies": ("corrupt", "inline content that does not match its digest",
                           lambda p: _with_entry(p, "small", dict(_head_manifest(p)[1][
                               "entries"]["small"], inline=cbor.encode({"a": 3})))),
    "inline-too-large": ("corrupt", "inline content over 64 KiB",
                         lambda p: _with_entry(p, "huge", content_entry(
                             p, "blob", bytes(65537)))),
    "entry-kind-unknown": ("corrupt", "an entry kind v1 does not define",
                           lambda p: _with_entry(p, "x", {"kind": "future", "uri": "x"})),
    "blob-with-encoding": ("corrupt", "a blob entry with an encoding",
                           lambda p: _with_entry(p, "b", dict(content_entry(
                               p, "blob", b"abc"), encoding="cbor"))),
    "value-bad-cbor": ("corrupt", "value content that is not CBOR (digest consistent)",
                       lambda p: _with_entry(p, "v", content_entry(
                           p, "value", b"\xff\x00", encoding="cbor"))),
    "value-unknown-tag": ("corrupt", "value content with tag 1",
                          lambda p: _with_entry(p, "v", content_entry(
                              p, "value", bytes.fromhex("c11a514b67b0"), encoding="cbor"))),
    "value-trailing-bytes": ("corrupt", "value content with a second item after the first",
                             lambda p: _with_entry(p, "v", content_entry(
                                 p, "value", b"\x01\x02", encoding="cbor"))),
    "entry-name-escapes": ("corrupt", "an entry named ../../etc/passwd",
                           lambda p: _with_entry(p, "../../etc/passwd", content_entry(
                               p, "blob", b"x"))),
    "entry-name-absolute": ("corrupt", "an entry named /etc/passwd",
                            lambda p: _with_entry(p, "/etc/passwd", content_entry(
                                p, "blob", b"x"))),
    "manifest-run-escapes": ("corrupt", "a manifest whose run id is ../../etc (record under "
                             "runs/r1)", lambda p: _manifest_field(p, run="../../etc")),
    "manifest-required-feature": ("unsupported-feature", "a snapshot requiring a feature "
                                  "nobody knows", lambda p: _manifest_field(
                                      p, required=["x-unknown-feature"])),
    "manifest-format-2": ("unsupported-version", "a manifest of format version 2",
                          lambda p: _manifest_field(p, format=2)),
    "manifest-noncanonical": ("non-canonical", "a manifest whose keys are out of order (its "
                              "record names the digest of exactly those bytes)",
                              lambda p: _recommit(p, _head_manifest(p)[1], _noncanonical(
                                  _head_manifest(p)[1]))),
    "manifest-missing-field": ("corrupt", "a manifest without 'boundary'",
                               lambda p: _recommit(p, {k: v for k, v in _head_manifest(p)[
                                   1].items() if k != "boundary"})),
    "manifest-seq-zero": ("corrupt", "a manifest with seq 0", lambda p: _manifest_field(
        p, seq=0)),
    "ledger-settle-without-intent": ("corrupt", "a ledger whose first record for a key is "
                                     "completed", lambda p: _bad_ledger(p, [_rec(
                                         "k", "completed", result=1, via="call")])),
    "ledger-after-final": ("corrupt", "a ledger record after a completed one",
                           lambda p: _bad_ledger(p, [_rec("k", "intended"), _rec(
                               "k", "completed", result=1, via="call"), _rec("k", "failed", error={
                                   "type": "E", "message": "m"}, via="call")])),
    "ledger-count-lies": ("corrupt", "the ledger count is not the number of records",
                          lambda p: _bad_ledger(p, [_rec("k", "intended")], count=2)),
    "ledger-args-change": ("corrupt", "a key's arguments change between records",
                           lambda p: _bad_ledger(p, [_rec("k", "intended"), _rec(
                               "k", "completed", result=1, via="call",
                               args=Digest.of(b"b").raw)])),
}


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


def _chunk_size_lies(p: Path) -> None:
    _, m, _ = _head_manifest(p)
    e = m["entries"]["big"]
    e["chunks"][0][1] += 1
    e["chunks"][1][1] -= 1
    _recommit(p, m)


def _flip_manifest(p: Path) -> None:
    path, _, data = _head_manifest(p)
    at = data.index(WRITER.encode()) + len("ckptfs-")
    path.write_bytes(b"\x00" + data[:at] + bytes([data[at] ^ 1]) + data[at + 1:])


def _manifest_field(p: Path, **kw: Any) -> None:
    _, m, _ = _head_manifest(p)
    m.update(kw)
    data = cbor.encode(m)
    (p / record_path("r1", 2)).unlink()
    d = Digest.of(data)
    put_file(p, snapshot_path(d), framing.frame(data))
    rec = {"run": "r1", "seq": 2, "snapshot": d.raw, "size": len(data), "created": m["created"]}
    put_file(p, record_path("r1", 2), cbor.encode(rec))


def invalid_stores(g: Gen, base: Path, cases: dict[str, tuple[str, str, Callable[[Path], Any]]]
                   = INVALID, prefix: str = "", requires: list[str] | None = None) -> None:
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


def lookup_vectors(g: Gen, base: Path) -> None:
    d = g.store_dir("lookup", "store")
    shutil.copytree(base, d)
    garbage = cbor.encode(manifest_map("r1", 3, {}, parent=_record(d)["snapshot"]))
    put_file(d, snapshot_path(Digest.of(garbage)), framing.frame(garbage))
    lost = cbor.encode(manifest_map("r1", 2, {}, parent=_record(d, 1)["snapshot"]))
    put_file(d, snapshot_path(Digest.of(lost)), framing.frame(lost))
    head = Digest(_record(d)["snapshot"]).text
    from ckptfs_conformance.render import render_ref
    ok = {"by-id": head, "by-run": "r1", "by-run-seq": "r1@1", "other-run": "r2"}
    for name, ref in ok.items():
        g.vector("lookup", name, f"the snapshot named {ref!r}",
                 ["snapshot", "{store}", str(NOW), ref],
                 {"output": render_ref(str(d), ref, NOW), "compare": "json"}, ["reader"],
                 store="store.store")
    bad = {"uncommitted-manifest": (Digest.of(garbage).text, "not-found",
                                    "a manifest no record commits is garbage"),
           "lost-race-manifest": (Digest.of(lost).text, "not-found",
                                  "a manifest for r1 seq 2 that the record does not name"),
           "unknown-run": ("nope", "not-found", "no such run"),
           "unknown-seq": ("r1@99", "not-found", "no such sequence number"),
           "run-escapes-root": ("../../etc@1", "path", "a run id that climbs out of the root"),
           "run-with-slash": ("a/b@1", "path", "a run id with a slash"),
           "absent-digest": (Digest.of(b"nothing").text, "not-found", "no such snapshot")}
    for name, (ref, cat, desc) in bad.items():
        g.vector("lookup", name, desc, ["snapshot", "{store}", str(NOW), ref], {"error": cat},
                 ["reader"], store="store.store")


def _lifecycle_lookup_store(p: Path) -> dict[str, str]:
    """Runs in every lifecycle state, for lookups; returns the ids of some of their snapshots."""
    s, c = new_store(p)
    _steps(s, c, "gone", 2)
    erase(s.repo, "gone", reason="asked", now=c.tick())
    _steps(s, c, "part", 3)
    erase(s.repo, "part", seq=2, reason="asked", now=c.tick())
    halted = _steps(s, c, "halted", 2)
    _interrupted_erase(s, c, "halted")
    gaps = _steps(s, c, "gaps", 4)
    _stray(p, "gaps", 3, lambda: forget_snapshots(s.repo, {"gaps": {2, 3}}, now=c.tick()))
    old = _steps(s, c, "old", 2)
    _stray(p, "old", 2, lambda: forget_snapshots(s.repo, {"old": {1, 2}}, now=c.tick()))
    _steps(s, c, "exp", 2)
    set_expiry(s.repo, "exp@1", T0 + 1, now=c.tick())
    set_expiry(s.repo, "exp", NOW + 1, now=c.tick())
    return {"halted": halted[0].id, "gaps": gaps[2].id, "old": old[1].id}


def lifecycle_lookup_vectors(g: Gen) -> None:
    from ckptfs_conformance.render import render_ref

    d = g.store_dir("lookup", "lifecycle")
    ids = _lifecycle_lookup_store(d)
    ok = {"part@1": "below an erased snapshot", "part": "the head above an erased snapshot",
          "gaps@1": "kept below a retired range", "gaps": "the head above a retired range",
          "exp@1": "expired by its override: metadata, then error expired"}
    for ref, desc in ok.items():
        g.vector("lookup", f"lifecycle-{ref.replace('@', '-at-')}", f"{ref}: {desc}",
                 ["snapshot", "{store}", str(NOW), ref],
                 {"output": render_ref(str(d), ref, NOW), "compare": "json"},
                 ["reader", "lifecycle"], store="lifecycle.store")
    bad = {"gone": ("erased", "an erased run (tombstone, fence, nothing else)"),
           "gone@1": ("erased", "a snapshot of an erased run"),
           "part@2": ("erased", "the erased snapshot (per-snapshot tombstone)"),
           "halted": ("erased", "the head of a run whose erase was interrupted (records remain)"),
           "halted@1": ("erased", "a remaining record of a run being erased"),
           ids["halted"]: ("erased", "by id: a remaining manifest of a run being erased"),
           "gaps@2": ("not-found", "a forgotten snapshot (record deleted)"),
           "gaps@3": ("not-found", "a forgotten snapshot whose record was left behind (stray)"),
           ids["gaps"]: ("not-found", "by id: the snapshot of a stray record"),
           "old": ("not-found", "a run whose every snapshot was forgotten (its head record "
                   "left behind)"),
           "old@2": ("not-found", "the stray head record of a forgotten run"),
           ids["old"]: ("not-found", "by id: the snapshot of a forgotten run's stray head")}
    for ref, (cat, desc) in bad.items():
        name = "by-id-" + next(k for k, v in ids.items() if v == ref) if ref in ids.values() \
            else ref.replace("@", "-at-")
        try:
            render_ref(str(d), ref, NOW)
            raise AssertionError(f"{ref}: ckptfs accepts it")
        except CkptfsError as e:
            assert e.category == cat, (ref, e.category)
        g.vector("lookup", f"lifecycle-{name}", desc, ["snapshot", "{store}", str(NOW), ref],
                 {"error": cat}, ["reader", "lifecycle"], store="lifecycle.store")


def _control(path: str, change: Callable[[dict[str, Any]], Any] | None = None,
             raw: Callable[[dict[str, Any]], bytes] | None = None
             ) -> Callable[[Path], None]:
    """A damage that rewrites the control object at ``path``: ``change`` edits its map (then
    canonical CBOR), ``raw`` encodes it some other way; neither: cut off its last byte."""
    def damage(p: Path) -> None:
        f = p / path
        if change is None and raw is None:
            f.write_bytes(f.read_bytes()[:-1])
            return
        m = cbor2.loads(f.read_bytes())
        if change is not None:
            change(m)
        f.write_bytes(cbor.encode(m) if raw is None else raw(m))
    return damage


_GAPS = "runs/gaps/retired/00000000000000000003"
_FENCE = "runs/part/retired/18446744073709551615"
_EXP1 = "runs/exp/expiry-00000000000000000001"
LIFECYCLE_INVALID: dict[str, tuple[str, str, Callable[[Path], None]]] = {
    "tombstone-truncated": ("corrupt", "a run tombstone cut short", _control(
        "tombstones/gone.cbor")),
    "tombstone-bad-state": ("corrupt", "a tombstone whose state is neither erasing nor erased",
                            _control("tombstones/gone.cbor", lambda m: m.update(state="gone"))),
    "tombstone-bad-id": ("corrupt", "a tombstone naming an erased snapshot id of 31 bytes",
                         _control("tombstones/gone.cbor",
                                  lambda m: m["snapshots"][0].__setitem__(1, bytes(31)))),
    "tombstone-noncanonical": ("non-canonical", "a tombstone with its keys out of order",
                               _control("tombstones/gone.cbor", raw=_noncanonical)),
    "snapshot-tombstone-truncated": ("corrupt", "a per-snapshot tombstone cut short",
                                     _control("tombstones/part/00000000000000000002.cbor")),
    "retired-truncated": ("corrupt", "a retired marker cut short: the range is unknown, so "
                          "the run is not served", _control(_GAPS)),
    "retired-through-lies": ("corrupt", "a marker whose through is not the one in its name",
                             _control(_GAPS, lambda m: m.update(through=2))),
    "retired-other-run": ("corrupt", "a marker that names another run",
                          _control(_GAPS, lambda m: m.update(run="old"))),
    "retired-kept-zero": ("corrupt", "a marker keeping seq 0", _control(
        _GAPS, lambda m: m.update(kept=[0, 1]))),
    "retired-noncanonical": ("non-canonical", "a marker with its keys out of order",
                             _control(_GAPS, raw=_noncanonical)),
    "fence-truncated": ("corrupt", "the fence of a partly erased run cut short",
                        _control(_FENCE)),
    "expiry-truncated": ("corrupt", "a snapshot expiry override cut short: the snapshot's "
                         "lifetime is unknown", _control(_EXP1)),
    "expiry-no-expires": ("corrupt", "an override without expires (null means never; absent "
                          "is not allowed)", _control(_EXP1, lambda m: m.pop("expires"))),
    "expiry-other-seq": ("corrupt", "an override naming seq 2 at the path of seq 1",
                         _control(_EXP1, lambda m: m.update(seq=2))),
    "expiry-text": ("corrupt", "an override whose expires is text", _control(
        _EXP1, lambda m: m.update(expires="tomorrow"))),
    "run-expiry-truncated": ("corrupt", "a run expiry override cut short (seq 2 has no "
                             "override of its own, so it needs the run's)",
                             _control("runs/exp/expiry")),
}


def lifecycle_invalid_stores(g: Gen) -> None:
    base = g.out / "_lifecycle"
    _lifecycle_lookup_store(base)
    invalid_stores(g, base, LIFECYCLE_INVALID, prefix="lifecycle-")
    shutil.rmtree(base)


# -- writer cases ------------------------------------------------------------------------------
def _v(value: Any) -> dict[str, Any]:
    return {"value": tagged(value)}


def _cp(run: str, t: int, state: dict[str, Any], **kw: Any) -> dict[str, Any]:
    return {"op": "checkpoint", "run": run, "time": t, "state": state, **kw}


WRITER_CASES: dict[str, tuple[str, bool, list[str], dict[str, Any]]] = {
    "values": ("one snapshot of every value type", True, ["writer"], {"steps": [
        {"op": "start", "run": "r1", "time": T0, "schema": {"name": "agent", "version": 2}},
        _cp("r1", T0 + 1, {"int": _v(-5), "big": _v(1 << 65), "f": _v(0.5), "s": _v("s\u00e9"),
                           "b": _v(b"\x00"), "m": _v({"z": None, "$a": [True, False]}),
                           "l": _v([1, 2, 3])}, boundary="start")]}),
    "chunked": ("a chunked blob and a chunked value with the store's chunker", True, ["writer"],
                {"chunker": SMALL_CBOR, "steps": [
                    {"op": "start", "run": "r1", "time": T0, "schema": {"name": "s", "version": 1}},
                    _cp("r1", T0 + 1, {"blob": {"blob": prng("w-blob", 7000).hex(),
                                                "type": "application/pdf"},
                                       "text": _v(prng("w-text", 3000).hex())})]}),
    "list-append": ("a list appended to over checkpoints (chunk layout is the writer's "
                    "choice)", False, ["writer"], {"chunker": SMALL_CBOR, "steps": [
                        {"op": "start", "run": "r1", "time": T0,
                         "schema": {"name": "s", "version": 1}}] + [
                        _cp("r1", T0 + i, {"msgs": _v([prng(f"m{j}", 200).hex()
                                                       for j in range(i + 1)])})
                        for i in range(1, 5)]}),
    "resume-fork": ("resume twice and fork", True, ["writer"], {"steps": [
        {"op": "start", "run": "r1", "time": T0, "schema": {"name": "s", "version": 1}},
        _cp("r1", T0 + 1, {"n": _v(1)}, boundary="start"),
        _cp("r1", T0 + 2, {"n": _v(2)}),
        {"op": "resume", "run": "r1", "time": T0 + 3},
        _cp("r1", T0 + 4, {"n": _v(3)}),
        {"op": "resume", "run": "r1", "time": T0 + 5},
        _cp("r1", T0 + 6, {"n": _v(4)}, boundary="final"),
        {"op": "fork", "from": "r1@2", "run": "r2", "time": T0 + 7},
        _cp("r2", T0 + 8, {"n": _v(20)})]}),
    "refs-labels-expiry": ("references, labels and expiry", True, ["writer"], {"steps": [
        {"op": "start", "run": "r1", "time": T0, "schema": {"name": "s", "version": 1}},
        _cp("r1", T0 + 1, {"ref": {"ref": {"uri": "s3://b/k", "digest": Digest.of(b"k").text,
                                           "size": 1, "expires": T0 + 5000}},
                           "bare": {"ref": {"uri": "https://example.invalid/x"}},
                           "v": _v(1)}, labels={"team": "a"}, expires=NOW + 10000,
            entry_labels={"v": {"unit": "n"}})]}),
    "multi-run-shared": ("two runs sharing content", True, ["writer"], {"chunker": SMALL_CBOR,
                         "steps": [
        {"op": "start", "run": "a", "time": T0, "schema": {"name": "s", "version": 1}},
        {"op": "start", "run": "b", "time": T0, "schema": {"name": "s", "version": 1}},
        _cp("a", T0 + 1, {"blob": {"blob": prng("shared-w", 5000).hex()}}),
        _cp("b", T0 + 2, {"blob": {"blob": prng("shared-w", 5000).hex()}, "x": _v(1)})]}),
    "ledger": ("effects completed, failed and in doubt, resumed and settled", True,
               ["writer", "ledger"], {"owner": "ckptfs-conformance/owner-a", "steps": [
        {"op": "start", "run": "r1", "time": T0, "schema": {"name": "s", "version": 1}},
        _cp("r1", T0 + 1, {"cart": _v(["book"])}, boundary="start"),
        {"op": "effect", "run": "r1", "time": T0 + 2, "key": "pay-1", "name": "pay",
         "args": tagged([10]), "kwargs": tagged({"currency": "EUR"}),
         "outcome": {"result": tagged({"ok": True})}},
        {"op": "effect", "run": "r1", "time": T0 + 3, "key": "pay-2", "name": "pay",
         "args": tagged([20]), "outcome": {"error": {"type": "RuntimeError",
                                                     "message": "declined"}}},
        {"op": "effect", "run": "r1", "time": T0 + 4, "key": "ship-1", "name": "ship",
         "timeout": 1, "outcome": {"crash": True}},
        {"op": "resume", "run": "r1", "time": T0 + 5},
        {"op": "settle", "run": "r1", "time": T0 + 6, "key": "ship-1",
         "outcome": {"result": tagged("shipped")}}]}),
    "default-ttl": ("the store's default_ttl_ms gives each snapshot created + TTL unless it asks "
                    "for an expiry (retention.md 2)", True, ["writer", "lifecycle"], {
        "settings": {"default_ttl_ms": 3_600_000}, "steps": [
            {"op": "start", "run": "r1", "time": T0, "schema": {"name": "s", "version": 1}},
            _cp("r1", T0 + 1, {"n": _v(1)}),
            _cp("r1", T0 + 2, {"n": _v(2)}, expires=NOW + 5),
            _cp("r1", NOW - 1_000_000, {"n": _v(3)})]}),
}


def writer_vectors(g: Gen) -> None:
    from ckptfs_conformance.adapters.ckptfs_adapter import write_case

    tmp = g.out / "_tmp"
    from ckptfs_conformance import gen_ledger_lease, gen_spec16

    for name, (desc, exact, requires, case) in {**WRITER_CASES,
                                                **gen_ledger_lease.WRITER_CASES,
                                                **gen_spec16.WRITER_CASES}.items():
        case = dict(case, writer=WRITER)
        case_path = tmp / f"{name}.json"
        case_path.parent.mkdir(parents=True, exist_ok=True)
        case_path.write_text(canonical_json(case))
        d = g.store_dir("writer", name)
        write_case(str(case_path), str(d))
        expected = symbolic(render_store(str(d), NOW))
        files = {"case": {"json": case}}
        g.vector("writer", name, desc, ["write", "{file:case}", "{out}"],
                 {"store": expected, "now": NOW}, requires, files)
        if exact:
            g.vector("writer", f"{name}-exact", f"{desc}: the same objects, byte for byte "
                     "(reference writer profile)", ["write", "{file:case}", "{out}"],
                     {"store": expected, "now": NOW, "exact": f"{name}.store"},
                     requires + ["writer-exact"], files)
        else:
            shutil.rmtree(d)
    shutil.rmtree(tmp)


# -- main --------------------------------------------------------------------------------------
def generate(out: Path = OUT) -> dict[str, int]:
    # the vectors of format.md and its companions are version 1 stores, whatever the default
    # layout of new stores (spec/v2.md has vectors of its own)
    before = os.environ.get("CKPTFS_FORMAT_VERSION")
    os.environ["CKPTFS_FORMAT_VERSION"] = "1"
    # s3req14: new stores' configs must not take a check window from the environment
    window = os.environ.pop("CKPTFS_CHECK_WINDOW_MS", None)
    try:
        return _generate(out)
    finally:
        if window is not None:
            os.environ["CKPTFS_CHECK_WINDOW_MS"] = window
        if before is None:
            del os.environ["CKPTFS_FORMAT_VERSION"]
        else:
            os.environ["CKPTFS_FORMAT_VERSION"] = before


def _generate(out: Path) -> dict[str, int]:
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    from ckptfs_conformance import gen_ledger_lease, gen_spec16  # they import this module

    gen_ledger_lease.fix_owner()  # effect intents name a fixed owner (spec/ledger.md 4.1)
    g = Gen(out)
    digests(g)
    cbor_vectors(g)
    gen_hostile.depth_vectors(g)
    framing_vectors(g)
    chunker_vectors(g)
    gen_spec16.primitive_vectors(g)  # issue 16: rules the spec left to guesses
    valid_stores(g)
    commit_vectors(g)  # ckptfs_conformance/gen_commit.py: record nonces
    gen_hostile.depth_valid_store(g, content_entry, manifest_map, commit_raw, init_store, NOW)
    base = out / "_base"
    _base(base)
    invalid_stores(g, base)
    invalid_stores(g, base, gen_hostile.depth_invalid_cases(content_entry, manifest_map,
                                                             commit_raw))
    gen_ledger_lease.vectors(g, base)
    lookup_vectors(g, base)
    gen_hostile.seq_lookup_vectors(g, NOW)
    lifecycle_lookup_vectors(g)
    lifecycle_invalid_stores(g)
    from ckptfs_conformance.gen_limits import LIMITS_INVALID  # spec/format.md "Limits" (issue 13)
    invalid_stores(g, base, LIMITS_INVALID)
    gen_spec16.vectors(g, base)  # issue 16: stores and lookups (ckptfs_conformance/gen_spec16.py)
    shutil.rmtree(base)
    writer_vectors(g)
    lease_vectors(g)
    gen_typed.vectors(g)  # ckptfs_conformance/gen_typed.py: typed values (format.md 18, issue 17)
    _v2_vectors(g)  # ckptfs_conformance/gen_v2.py: spec/v2.md
    shutil.copyfile(SPEC_CDDL, out / "ckptfs.cddl")  # the wheel carries no spec/
    for tmp in out.rglob("tmp"):
        if tmp.is_dir() and not any(tmp.iterdir()):
            tmp.rmdir()
    _drop_leases(out)
    from ckptfs_conformance.coverage import annotate  # issue 32: requirement ids

    annotate(out)
    return g.count


def _v2_vectors(g: Gen) -> None:
    """The vectors of spec/v2.md: version 2 stores (ckptfs_conformance/gen_v2.py)."""
    from ckptfs_conformance import gen_v2

    with gen_v2.layout_v2(T0):
        gen_v2.valid(g, new_store, prng, render_store, NOW, T0)
        gen_v2.invalid(g, new_store, prng, invalid_stores, T0)
        gen_v2.lookups(g, new_store, prng, NOW, T0)
        _locator_vectors(g)
        _spec32_vectors(g)


def _spec32_vectors(g: Gen) -> None:
    """Issue 32: reader vectors of spec/v2.md rules no vector isolated before
    (ckptfs_conformance/gen_spec32.py)."""
    from ckptfs_conformance import gen_spec32

    gen_spec32.vectors(g, new_store, prng, invalid_stores, render_store, NOW, T0)
    gen_spec32.writer_vectors(g, prng, WRITER, NOW, T0)


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
