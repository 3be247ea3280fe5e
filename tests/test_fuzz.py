"""Bad input: generated manifests, chunk files, store configs and run records.

Every case must end in a documented ``ckptfs.errors`` exception or a correct read, in bounded
time and memory, without touching anything outside the store root. The default run generates
well over 10,000 cases; ``--fuzz-long`` (or CKPTFS_FUZZ_SCALE=N) multiplies every budget.
"""

from __future__ import annotations

import hashlib
import os
import random
import tracemalloc
from pathlib import Path
from typing import Any

import cbor2
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

import ckptfs
from ckptfs.errors import CkptfsError
from ckptfs.format import framing
from ckptfs.format.cdc import ChunkerParams
from ckptfs.format.digest import Digest
from ckptfs.format.models import Manifest, RunRecord, StoreConfig
from ckptfs.ops.verify import verify
from tests.conftest import TALLY, fuzz_examples

#: manifest and record paths (v2 containers: the conformance v2 vectors and fuzz-free tests)

EVIL_NAMES = ["..", "../x", "a/../../etc/passwd", "/abs", "/etc/passwd", "a\x00b", "x" * 300,
              "a" * 129, "", ".", "./a", "a//b", "a\\b", "C:\\x", "\u202e", "runs", "-x",
              "~root", "a/", "é" * 100]


def mutate(data: bytes, edits: list[tuple[int, int, int]], cut: int | None) -> bytes:
    """Apply (kind, position, byte) edits: 0 flips, 1 inserts, 2 deletes; then maybe truncate."""
    b = bytearray(data)
    for kind, pos, byte in edits:
        if not b:
            break
        i = pos % len(b)
        if kind == 0:
            b[i] ^= byte or 1
        elif kind == 1:
            b.insert(i, byte)
        else:
            del b[i]
    if cut is not None:
        b = b[: cut % (len(b) + 1)]
    return bytes(b)


EDITS = st.lists(st.tuples(st.integers(0, 2), st.integers(0, 1 << 20), st.integers(0, 255)),
                 max_size=8)
CUTS = st.none() | st.integers(0, 1 << 20)


def make_valid() -> tuple[bytes, bytes, bytes]:
    """Canonical bytes of a real manifest, run record and store config."""
    d = Digest.of(b"x")
    m = Manifest.from_cbor({
        "format": 1, "run": "r", "seq": 3, "boundary": "step", "created": 1, "writer": "w",
        "schema": {"name": "s", "version": 1},
        "entries": {"a": {"kind": "value", "type": "application/cbor", "size": 1,
                          "digest": d.raw, "chunks": [[d.raw, 1]], "encoding": "cbor"},
                    "b/c": {"kind": "ref", "uri": "s3://b/k", "size": 3},
                    "i": {"kind": "blob", "type": "application/octet-stream", "size": 1,
                          "digest": d.raw, "inline": b"x"}},
        "parent": d.raw, "resumed_from": None, "attempt": 2, "ledger": None, "labels": {"k": "v"},
        "expires": None})
    rec = RunRecord(run="r", seq=3, snapshot=d, size=100, created=5)
    return m.to_bytes(), rec.to_bytes(), StoreConfig(created=7).to_bytes()


MANIFEST, RECORD, CONFIG = make_valid()
PARSERS = {"manifest": lambda b: Manifest.from_bytes(b),
           "record": lambda b: RunRecord.from_bytes(b, what="record"),
           "config": lambda b: StoreConfig.from_bytes(b)}
VALID = {"manifest": MANIFEST, "record": RECORD, "config": CONFIG}


def parses_or_refuses(kind: str, data: bytes) -> Any:
    """The parsed value, or None after a documented error; anything else fails the test."""
    try:
        value = PARSERS[kind](data)
    except CkptfsError:
        return None
    assert PARSERS[kind](value.to_bytes()) == value, "what was accepted must round-trip"
    return value


@pytest.mark.parametrize("kind", ["manifest", "record", "config"])
@settings(max_examples=fuzz_examples(1500))
@given(edits=EDITS, cut=CUTS)
def test_mutated_bytes(kind: str, edits: list[tuple[int, int, int]], cut: int | None) -> None:
    TALLY[f"fuzz:mutated-{kind}"] += 1
    parses_or_refuses(kind, mutate(VALID[kind], edits, cut))


# structured: valid documents with one field replaced by something hostile
HOSTILE = st.one_of(
    st.sampled_from(EVIL_NAMES),
    st.integers(-(1 << 70), 1 << 70),
    st.sampled_from([0, 2, 255, (1 << 64) - 1, 1 << 63, -1]),
    st.binary(max_size=40),
    st.none(), st.booleans(), st.floats(allow_nan=True),
    st.lists(st.text(max_size=5), max_size=3),
    st.dictionaries(st.sampled_from(EVIL_NAMES), st.integers(0, 3), max_size=3),
    st.integers(1, 600).map(lambda n: nested(n)),
)


def nested(depth: int) -> Any:
    v: Any = 0
    for i in range(depth):
        v = [v] if i % 2 else {"k": v}
    return v


def replace_at(doc: Any, path: list[int], value: Any) -> Any:
    """``doc`` with the node reached by walking ``path`` (indices mod size) set to ``value``."""
    if not path or not isinstance(doc, (dict, list)) or not doc:
        return value
    if isinstance(doc, dict):
        keys = sorted(doc)
        k = keys[path[0] % len(keys)]
        out = dict(doc)
        if len(path) > 1 and path[1] % 5 == 0:  # sometimes rename the key instead
            del out[k]
            out[value if isinstance(value, str) else k] = doc[k]
        else:
            out[k] = replace_at(doc[k], path[1:], value)
        return out
    i = path[0] % len(doc)
    return doc[:i] + [replace_at(doc[i], path[1:], value)] + doc[i + 1:]


@pytest.mark.parametrize("kind", ["manifest", "record", "config"])
@settings(max_examples=fuzz_examples(1200))
@given(path=st.lists(st.integers(0, 50), min_size=1, max_size=6), value=HOSTILE)
def test_hostile_fields(kind: str, path: list[int], value: Any) -> None:
    TALLY[f"fuzz:hostile-{kind}"] += 1
    doc = replace_at(cbor2.loads(VALID[kind]), path, value)
    try:
        data = cbor2.dumps(doc, canonical=True)
    except Exception:
        return  # not encodable at all (e.g. a non-text key): nothing to parse
    got = parses_or_refuses(kind, data)
    if isinstance(got, Manifest):  # whatever was accepted obeys the naming rules
        ckptfs.format.names.check_run_id(got.run)
        for name in got.entries:
            ckptfs.format.names.check_entry_name(name)
            assert ".." not in name.split("/") and not name.startswith("/") and "\x00" not in name


# -- chunk files: framing and decompression bombs ---------------------------------------------
def zstd_stream(total: int, *, content_size: bool) -> bytes:
    """``total`` zero bytes as one zstd frame, built without holding them in memory."""
    cctx = zstandard.ZstdCompressor(level=1, write_content_size=content_size)
    co = cctx.compressobj(size=total if content_size else -1)
    piece = bytes(1 << 20)
    out = [co.compress(piece) for _ in range(total >> 20)]
    out.append(co.flush())
    return b"".join(out)


BOMB = zstd_stream(256 << 20, content_size=False)       # 256 MiB of zeros, no declared size
LIAR = zstd_stream(16 << 20, content_size=True)          # declares 16 MiB


@settings(max_examples=fuzz_examples(1500))
@given(payload=st.binary(max_size=300), codec=st.sampled_from([0, 1, 2, 255]), edits=EDITS,
       cut=CUTS, size=st.integers(0, 1 << 24) | st.just(None))
def test_chunk_frames(payload: bytes, codec: int, edits: list[tuple[int, int, int]],
                      cut: int | None, size: int | None) -> None:
    TALLY["fuzz:chunk-frame"] += 1
    framed = framing.frame(payload) if codec in (0, 1) else bytes([codec]) + payload
    stored = mutate(framed, edits, cut)
    want = len(payload) if size is None else size
    try:
        out = framing.unframe(stored, want, what="chunk")
    except CkptfsError:
        return
    assert len(out) == want


@pytest.mark.parametrize("bomb", ["no-declared-size", "declares-16MiB"])
def test_zstd_bombs_are_refused_in_bounded_memory(bomb: str) -> None:
    stored = bytes([framing.CODEC_ZSTD]) + (BOMB if bomb == "no-declared-size" else LIAR)
    tracemalloc.start()
    try:
        with pytest.raises(CkptfsError):
            framing.unframe(stored, 1000, what="chunk")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, f"unframe of a {len(stored)}-byte bomb allocated {peak} bytes"


# -- whole stores: tampered files, hostile documents in place -----------------------------------
def tree_digest(root: Path, skip: Path) -> str:
    """A digest of every name and content under ``root`` except the store at ``skip``."""
    h = hashlib.blake2b()
    for dirpath, dirs, files in os.walk(root):
        if Path(dirpath) == skip or skip in Path(dirpath).parents:
            continue
        for name in sorted(dirs + files):
            p = Path(dirpath, name)
            h.update(str(p).encode())
            if p.is_file():
                h.update(p.read_bytes())
    return h.hexdigest()


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict[str, Any]]:
    """A real store inside a sandbox with bait files next to it; and the state it holds."""
    box = tmp_path_factory.mktemp("sandbox")
    for name in ("passwd", "etc/shadow", "runs/evil/00000000000000000001", "x"):
        (box / name).parent.mkdir(parents=True, exist_ok=True)
        (box / name).write_bytes(b"bait " + name.encode())
    root = box / "store"
    store = ckptfs.open_store(str(root), chunker=ChunkerParams(min_size=64, avg_size=256,
                                                               max_size=1024))
    run = store.start_run("r")
    state = {"msgs": [f"message {i}" * 10 for i in range(30)],
             "blob": ckptfs.Blob(random.Random(1).randbytes(3000)), "small": {"a": 1}}
    run.checkpoint({"msgs": state["msgs"][:10], "small": {"a": 0}})
    run.checkpoint(state)
    return box, root, state


def exercise(root: Path) -> Any:
    """What a user would do with a store: list, read the head, verify everything, resume."""
    store = ckptfs.open_store(str(root))
    try:
        store.runs()
        got = store.read("r")
        got = {k: (v.read() if isinstance(v, ckptfs.StoredBlob) else v) for k, v in got.items()}
        report = verify(store.repo, read_data=True)
        store.resume("r")
        return got, report.ok
    except CkptfsError:
        return None


def store_files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")
                  if p.is_file() and p.parts[len(root.parts)] != "tmp")


@settings(max_examples=fuzz_examples(300))
@given(pick=st.integers(0, 1 << 16), edits=EDITS, cut=CUTS)
def test_tampered_store_files(sandbox: tuple[Path, Path, dict[str, Any]], pick: int,
                              edits: list[tuple[int, int, int]], cut: int | None) -> None:
    TALLY["fuzz:tampered-store"] += 1
    box, root, state = sandbox
    before = tree_digest(box, root)
    files = store_files(root)
    target = root / files[pick % len(files)]
    original = target.read_bytes()
    target.write_bytes(mutate(original, edits, cut))
    try:
        result = exercise(root)
    finally:
        target.write_bytes(original)
    if result is not None:  # a correct read, or a problem verify reported
        got, ok = result
        want = {**state, "blob": state["blob"].read()}
        assert got == want or not ok
    assert tree_digest(box, root) == before, "something outside the store root changed"


HOSTILE_DOCS = st.builds(lambda p, v: (p, v), st.lists(st.integers(0, 50), min_size=1, max_size=5),
                         HOSTILE)


def test_fuzz_budget_is_at_least_ten_thousand() -> None:
    """The default budgets add up to the promised 10,000 generated cases per run."""
    per_run = 3 * 1500 + 3 * 1200 + 1500 + 300 + 200
    assert fuzz_examples(per_run) >= 10_000

