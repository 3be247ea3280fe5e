"""spec/ckptfs.cddl validates every config, manifest and run record a real store holds, and
rejects broken ones (the code's own reader rejects them too)."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import cbor2
import pycddl
import pytest

import ckptfs
from ckptfs.errors import CkptfsError
from ckptfs.format import cbor
from ckptfs.format.digest import Digest
from ckptfs.format.models import Manifest, RunRecord, StoreConfig


CDDL = (Path(__file__).parent.parent / "spec" / "ckptfs.cddl").read_text()
SCHEMAS = {root: pycddl.Schema(f"root = {root}\n{CDDL}")
           for root in ("store-config", "manifest", "run-record")}


def valid(root: str, value: Any) -> bool:
    try:
        SCHEMAS[root].validate_cbor(cbor.encode(value) if not isinstance(value, bytes) else value)
    except Exception:  # pycddl raises ValidationError (a plain Exception subclass)
        return False
    return True


def write_rich_store(store: ckptfs.Store, tmp: Path) -> None:
    """Every kind of entry and every manifest field the writer can produce."""
    ext = tmp / "external.bin"
    ext.write_bytes(b"external data" * 100)
    big = tmp / "big.bin"
    big.write_bytes(bytes(range(256)) * 2000)
    run = store.start_run("rich", schema=("agent", 4), expires_at=datetime.timedelta(days=1))
    msgs: list[Any] = []
    for i in range(6):
        msgs.append({"role": "user", "content": f"hello {i} " * 40, "tools": [{"n": i}]})
        run.checkpoint(
            {"messages": msgs, "plan": {"step": i, "big": 1 << 70, "neg": -(1 << 70), "f": 0.5},
             "empty": [], "none": None, "raw": b"\x00\x01",
             "dir/blob": ckptfs.Blob(b"blob bytes " * 50, type="text/plain",
                                     labels={"kind": "note"}),
             "file": ckptfs.Blob(big),
             "ref": ckptfs.Ref(f"file://{ext}", digest=Digest.of(ext.read_bytes()),
                               size=ext.stat().st_size, expires_at=4_000_000_000,
                               labels={"src": "test"}),
             "bare-ref": ckptfs.Ref("memory://nowhere/x"),
             "captured": ckptfs.Ref(f"file://{ext}", capture=True)},
            boundary="approval" if i == 3 else "step", labels={"step": str(i), "team/a": "x"},
            entry_labels={"plan": {"owner": "planner"}},
            expires_at=None if i % 2 else 4_000_000_000)
    resumed = store.resume("rich", lenient_refs=True)
    resumed.checkpoint({"messages": msgs + [{"role": "assistant"}]}, boundary="final")
    fork = store.fork("rich@2", "rich-fork", lenient_refs=True)
    fork.checkpoint({"x": [1, 2, 3]})
    store.start_run("plain").checkpoint({})


def _real_manifest(store: ckptfs.Store, tmp_path: Path) -> dict[str, Any]:
    write_rich_store(store, tmp_path)
    snap = store.get("rich@2")
    m: dict[str, Any] = snap.manifest.to_cbor()
    assert valid("manifest", m) and m["parent"] is not None
    return m


def _entry(m: dict[str, Any], name: str) -> dict[str, Any]:
    e: dict[str, Any] = m["entries"][name]
    return e


# Not listed: a text string where a `bstr .size` or `tstr .size` is expected. pycddl 0.6 applies
# the .size control without checking the major type, so it accepts those; Manifest.from_bytes
# rejects them (test_format_models.py).
BREAK_MANIFEST = {
    "missing format": lambda m: m.pop("format"),
    "format 2": lambda m: m.update(format=2),
    "missing run": lambda m: m.pop("run"),
    "run number": lambda m: m.update(run=5),
    "empty run": lambda m: m.update(run=""),
    "seq 0": lambda m: m.update(seq=0),
    "seq text": lambda m: m.update(seq="1"),
    "seq bignum": lambda m: m.update(seq=1 << 64),
    "attempt 0": lambda m: m.update(attempt=0),
    "created negative": lambda m: m.update(created=-1),
    "missing writer": lambda m: m.pop("writer"),
    "schema without version": lambda m: m["schema"].pop("version"),
    "schema empty name": lambda m: m["schema"].update(name=""),
    "parent short": lambda m: m.update(parent=b"\x00" * 31),
    "parent text": lambda m: m.update(parent="blake3:" + "0" * 64),
    "missing resumed_from": lambda m: m.pop("resumed_from"),
    "ledger list": lambda m: m.update(ledger=[]),
    "labels null": lambda m: m.update(labels=None),
    "label value int": lambda m: m.update(labels={"k": 1}),
    "expires float": lambda m: m.update(expires=1.5),
    "required text": lambda m: m.update(required="x"),
    "entries list": lambda m: m.update(entries=[]),
    "entry kind": lambda m: _entry(m, "plan").update(kind="file"),
    "value encoding": lambda m: _entry(m, "plan").update(encoding="json"),
    "value type/encoding": lambda m: _entry(m, "plan").update(type="application/cbor-seq"),
    "value without encoding": lambda m: _entry(m, "plan").pop("encoding"),
    "value size text": lambda m: _entry(m, "plan").update(size="3"),
    "digest short": lambda m: _entry(m, "plan").update(digest=b"\x01" * 16),
    "chunk size 0": lambda m: _entry(m, "file")["chunks"][0].__setitem__(1, 0),
    "chunk size 17 MiB": lambda m: _entry(m, "file")["chunks"][0].__setitem__(1, 17 << 20),
    "chunk triple": lambda m: _entry(m, "file")["chunks"][0].append(0),
    "blob empty type": lambda m: _entry(m, "dir/blob").update(type=""),
    "blob without chunks": lambda m: _entry(m, "file").pop("chunks"),
    "blob without inline": lambda m: _entry(m, "dir/blob").pop("inline"),
    "inline and chunks": lambda m: _entry(m, "dir/blob").update(chunks=[]),
    "inline too long": lambda m: _entry(m, "dir/blob").update(inline=b"x" * 65537, size=65537),
    "ref without uri": lambda m: _entry(m, "ref").pop("uri"),
    "ref empty uri": lambda m: _entry(m, "ref").update(uri=""),
    "ref null digest": lambda m: _entry(m, "ref").update(digest=None),
    "ref size negative": lambda m: _entry(m, "ref").update(size=-1),
}


def test_cddl_rejects_broken_manifests(store: ckptfs.Store, tmp_path: Path) -> None:
    import copy

    base = _real_manifest(store, tmp_path)
    assert valid("manifest", {**base, "future_field": {"any": [1]}})  # extension keys pass
    for why, breaker in BREAK_MANIFEST.items():
        m = copy.deepcopy(base)
        breaker(m)
        data = cbor2.dumps(m, canonical=True)
        assert not valid("manifest", data), f"CDDL accepted a manifest with {why}"
        with pytest.raises(CkptfsError):
            Manifest.from_bytes(data)


def test_cddl_config_and_record_rejections() -> None:
    cfg = StoreConfig(created=1).to_cbor()
    assert valid("store-config", cfg) and valid("store-config", {**cfg, "later": 1})
    for bad in ({**cfg, "version": 3}, {**cfg, "hash": "sha256"}, {**cfg, "format": "x"},
                {k: v for k, v in cfg.items() if k != "settings"}, {**cfg, "required": "x"},
                {**cfg, "chunker": {**cfg["chunker"], "min": 10}},
                {**cfg, "chunker": {**cfg["chunker"], "extra": 1}},
                {**cfg, "chunker": {**cfg["chunker"], "normalization": 4}}):
        assert not valid("store-config", bad), bad
        with pytest.raises(CkptfsError):
            StoreConfig.from_bytes(cbor2.dumps(bad, canonical=True))
    rec = RunRecord(run="r", seq=1, snapshot=Digest.of(b""), size=10, created=1).to_cbor()
    assert valid("run-record", rec)
    for bad in ({**rec, "seq": 0}, {**rec, "snapshot": b"x"}, {**rec, "size": (64 << 20) + 1},
                {k: v for k, v in rec.items() if k != "created"}, {**rec, "run": ""}):
        assert not valid("run-record", bad), bad
        with pytest.raises(CkptfsError):
            RunRecord.from_bytes(cbor2.dumps(bad, canonical=True), what="record")
