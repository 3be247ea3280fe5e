"""The v2 rules of spec/ckptfs.cddl (spec/v2.md) validate the headers of real records and
packs, real head hints and forwards, and refuse broken ones."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cbor2
import pycddl
import pytest

import ckptfs
from ckptfs.format import cbor
from ckptfs.format import containers as ct
from ckptfs.format.names import head_hint_path
from ckptfs.ops.gc import gc
from ckptfs.ops.retention import forget_snapshots
from ckptfs_conformance.validate import container_header, validate_store

CDDL = (Path(__file__).parent.parent / "spec" / "ckptfs.cddl").read_text()
ROOTS = ("v2-record-header", "v2-pack-header", "v2-head-hint", "v2-forward")
SCHEMAS = {root: pycddl.Schema(f"root = {root}\n{CDDL}") for root in ROOTS}


def valid(root: str, data: bytes) -> bool:
    try:
        SCHEMAS[root].validate_cbor(data)
    except Exception:  # pycddl.ValidationError is a plain Exception
        return False
    return True


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A v2 store holding every v2 object: records with bodies and locators, packs, a head
    hint, and a forward that forget + gc left."""
    import os

    p = tmp_path_factory.mktemp("v2") / "s"
    s = ckptfs.open_store(str(p))
    s.init(settings={"record_bulk_max": 2048, "pack_target": 4096})
    r = s.start_run("r1")
    r.checkpoint({"text": "t" * 100 + bytes(range(256)).hex() * 8, "n": 1})
    r.checkpoint({"text": "t" * 100 + bytes(range(256)).hex() * 8, "n": 2,
                  "blob": ckptfs.Blob(os.urandom(20_000))})
    head = r.checkpoint({"text": "t" * 100 + bytes(range(256)).hex() * 8, "n": 3})
    s.start_run("r2").checkpoint({"v": "v" * 50 + bytes(range(200)).hex() * 8})
    s.storage.hint(head_hint_path("r1"), ct.HeadHint("r1", 3, head.digest, 1).to_bytes())
    forget_snapshots(s.repo, {"r1": {1}})
    gc(s.repo, grace_ms=0, now=int(time.time() * 1000) + 3_600_000)
    s.close()
    return p


def _files(p: Path, pattern: str) -> list[Path]:
    return sorted(f for f in p.glob(pattern) if f.is_file())


def test_real_v2_objects_validate(store: Path) -> None:
    records = _files(store, "runs/*/[0-9]*")
    packs = _files(store, "packs/*/*")
    forwards = _files(store, "moved/**/*")
    assert len(records) == 3 and packs and forwards
    headers = [cbor2.loads(container_header(f.read_bytes())) for f in records]
    assert any(h["bodies"] for h in headers) and any(h["locators"]["chunks"] for h in headers)
    for f in records:
        assert valid("v2-record-header", container_header(f.read_bytes())), f
    for f in packs:
        assert valid("v2-pack-header", container_header(f.read_bytes())), f
    for f in forwards:
        assert valid("v2-forward", f.read_bytes()), f
    hint = (store / "runs/r1/head").read_bytes()
    assert valid("v2-head-hint", hint[:-ct.HINT_CHECK])
    assert validate_store(store) == []  # the conformance runner's check sees them all


def _edit(root: str, store: Path, pattern: str, change: Callable[[dict[str, Any]], Any]) -> bool:
    f = _files(store, pattern)[0]
    data = f.read_bytes()
    if root in ("v2-record-header", "v2-pack-header"):
        m = cbor2.loads(container_header(data))
    elif root == "v2-head-hint":
        m = cbor2.loads(data[:-ct.HINT_CHECK])
    else:
        m = cbor2.loads(data)
    change(m)
    return valid(root, cbor.encode(m))


BROKEN: dict[str, tuple[str, str, Callable[[dict[str, Any]], Any]]] = {
    "record-kind": ("v2-record-header", "runs/*/[0-9]*", lambda m: m.update(kind="pack")),
    "record-nonce-15": ("v2-record-header", "runs/*/[0-9]*", lambda m: m.update(nonce=bytes(15))),
    "record-seq-0": ("v2-record-header", "runs/*/[0-9]*", lambda m: m.update(seq=0)),
    "record-no-manifest": ("v2-record-header", "runs/*/[0-9]*", lambda m: m.pop("manifest")),
    "record-size-over": ("v2-record-header", "runs/*/[0-9]*",
                         lambda m: m.update(size=67108865)),
    "record-body-stored-1": ("v2-record-header", "runs/*/[0-9]*",
                             lambda m: m.update(bodies=[[bytes(32), 0, 1, 1]])),
    "record-locator-prefix-7": ("v2-record-header", "runs/*/[0-9]*", lambda m: m.update(
        locators={"containers": [], "chunks": [[bytes(7), 0, 0, 2]]})),
    "record-container-seq-0": ("v2-record-header", "runs/*/[0-9]*", lambda m: m.update(
        locators={"containers": [["r1", 0]], "chunks": []})),
    "pack-no-bodies": ("v2-pack-header", "packs/*/*", lambda m: m.update(bodies=[])),
    "pack-writer-int": ("v2-pack-header", "packs/*/*", lambda m: m.update(writer=1)),
    "pack-size-0": ("v2-pack-header", "packs/*/*",
                    lambda m: m.update(bodies=[[bytes(32), 0, 2, 0]])),
    "hint-seq-0": ("v2-head-hint", "runs/*/head", lambda m: m.update(seq=0)),
    "hint-extra-key": ("v2-head-hint", "runs/*/head", lambda m: m.update(x=1)),
    "hint-snapshot-31": ("v2-head-hint", "runs/*/head", lambda m: m.update(snapshot=bytes(31))),
    "forward-row-3": ("v2-forward", "moved/**/*", lambda m: m["bodies"][0].pop()),
    "forward-bad-container": ("v2-forward", "moved/**/*",
                              lambda m: m["bodies"][0].__setitem__(1, "r1")),
}


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_broken_v2_objects_are_refused(store: Path, name: str) -> None:
    root, pattern, change = BROKEN[name]
    assert _edit(root, store, pattern, lambda m: None)  # the unedited object validates
    assert not _edit(root, store, pattern, change)
