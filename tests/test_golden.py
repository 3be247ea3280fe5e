"""The golden stores in tests/golden/ (written by an earlier ckptfs) load with today's code.

A format change that breaks these must bump the format version (tests/golden/README.md).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

import ckptfs
from ckptfs.errors import EffectFailed, EffectInDoubt, MissingReference
from ckptfs.ops.verify import verify
from ckptfs.runtime.effects import result_of
from ckptfs.errors import UpgradeRequired
from ckptfs.ops.upgrade import upgrade
from ckptfs.testing import assert_stores_load, copy_store

GOLDEN = Path(__file__).parent / "golden"
STORES = sorted(p.parent.name for p in GOLDEN.glob("*/expected.json"))


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_golden", GOLDEN / "make_golden.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


gen = _generator()


def _expected(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((GOLDEN / name / "expected.json").read_text())
    return doc


def _files(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_size for p in root.rglob("*") if p.is_file()}


def test_there_are_golden_stores() -> None:
    assert STORES == ["v1-basic", "v1-ledger", "v1-small-chunks", "v2-basic", "v2-compressed"]


@pytest.mark.parametrize("name,form", [("v2-basic", 2), ("v2-compressed", 3)])
def test_v2_golden_store_holds_every_v2_object(name: str, form: int) -> None:
    """v2-basic (ckptfs 0.2.0) and v2-compressed (0.3.0, ``compressed-headers``) are format 2
    stores with records that carry bodies, packs, a forward left by gc, a head hint and a
    retired marker (spec/v2.md), each of them well-formed; v2-basic's record headers are
    stored as is (container form 0x02), v2-compressed's as zstd frames (0x03); packs are
    always 0x02."""
    from ckptfs.format import containers as ct
    from ckptfs.format.digest import Digest
    from ckptfs.format.models import COMPRESSED_HEADERS

    root = GOLDEN / name / "store"
    cfg = ckptfs.open_store(str(root)).repo.config
    assert cfg.version == 2 and (COMPRESSED_HEADERS in cfg.required) == (form == 3)
    records = sorted((root / "runs").glob("*/[0-9]*"))
    assert len(records) == 5 and all(f.read_bytes()[:8] == ct.MAGIC for f in records)
    assert {f.read_bytes()[8] for f in records} == {form}
    assert any(ct.decode(f.read_bytes(), what=f.name).header.bodies for f in records)
    packs = sorted((root / "packs").rglob("*"))
    packs = [f for f in packs if f.is_file()]
    assert len(packs) >= 2 and all(Digest.of(f.read_bytes()).hex == f.name for f in packs)
    assert {f.read_bytes()[8] for f in packs} == {2}
    forward = ct.Forward.from_bytes((root / "moved/runs/agent/00000000000000000001").read_bytes(),
                                    what="forward")
    assert forward.bodies
    hint = ct.HeadHint.parse((root / "runs/agent/head").read_bytes(), "agent")
    assert hint is not None and hint.seq == 4


@pytest.mark.parametrize("name", STORES)
def test_golden_store_reads_as_written(name: str) -> None:
    exp = _expected(name)
    before = _files(GOLDEN / name)
    store = ckptfs.open_store(str(GOLDEN / name / "store"))
    assert store.repo.config.chunker.to_cbor() == exp["chunker"]
    found = {f"{s.run}@{s.seq}" for r in store.runs() for s in store.snapshots(r)}
    assert found == set(exp["snapshots"])
    for key, want in exp["snapshots"].items():
        snap = store.get(key)
        got = {"id": snap.id, "schema": str(snap.manifest.schema), "boundary": snap.boundary,
               "parent": snap.parent, "resumed_from": snap.resumed_from,
               "attempt": snap.attempt, "labels": snap.labels, "expires": snap.expires,
               "migrated_from": str(snap.migrated_from) if snap.migrated_from else None}
        assert got == {k: v for k, v in want.items() if k not in ("state", "ledger_records")}, key
        assert store.get(snap.id).id == snap.id
        assert gen.to_json(store.read(snap)) == want["state"], key
        assert len(store.ledger(snap)) == want["ledger_records"], key
    for key, want_effects in exp["effects"].items():
        assert _effects(store, key) == want_effects, key
    report = verify(store.repo, read_data=True)
    assert report.ok, report.problems
    assert _files(GOLDEN / name) == before  # reading wrote nothing


def _effects(store: ckptfs.Store, ref: str) -> dict[str, Any]:
    """A snapshot's ledger folded per key, in the generator's terms (results read back)."""
    out = {}
    reader = SimpleNamespace(store=store, id=ref.partition("@")[0])
    for key, eff in store.ledger(ref).effects.items():
        got: dict[str, Any] = {"kind": eff.kind, "name": eff.name, "status": eff.status,
                               "via": eff.via}
        if eff.status == "completed":
            got["result"] = result_of(reader, eff)  # type: ignore[arg-type]
        if eff.result_content is not None:
            got["large"] = True
        if eff.error is not None:
            got["error"] = dict(eff.error)
        if eff.request is not None:
            got["request"] = eff.request
        out[key] = got
    return out


def test_golden_ledger_resumes_without_repeating_effects(tmp_path: Path) -> None:
    url = copy_store(GOLDEN / "v1-ledger" / "store", tmp_path / "copy")
    store = ckptfs.open_store(url)
    run = store.resume("agent", schema=("shop", 2))
    calls: list[str] = []
    assert run.effect("search", lambda q: calls.append(q), "lisbon", key="search-1") == {
        "count": 3, "query": "lisbon"}
    assert len(run.effect("fetch", lambda: calls.append("fetch"), key="fetch-1")["rows"]) == 700
    with pytest.raises(EffectFailed):
        run.effect("charge", lambda a: calls.append("charge"), 1250, key="charge-1")
    with pytest.raises(EffectInDoubt):
        run.effect("email", lambda to: calls.append(to), "alice@example.com", key="email-1")
    assert run.wait_for_approval({"refund": 1250}, key="approve-refund").approved
    assert [e.key for e in run.pending_approvals()] == ["approve-delete"]
    assert calls == []


def test_golden_refs_fail_closed_unless_lenient() -> None:
    store = ckptfs.open_store(str(GOLDEN / "v1-basic" / "store"))
    with pytest.raises(MissingReference, match="doc: .*does not exist"):
        store.read("alpha", lenient_refs=False, ref_policy=ckptfs.RefPolicy.allow("/"))
    assert store.read("alpha")["doc"].missing


@pytest.mark.parametrize("name", STORES)
def test_golden_runs_resume_and_continue(name: str, tmp_path: Path) -> None:
    url = copy_store(GOLDEN / name / "store", tmp_path / "copy")
    store = ckptfs.open_store(url)
    if store.repo.config.version == 1:  # read, never changed: upgraded first (in place)
        run = store.resume(store.runs()[0], lenient_refs=True)
        with pytest.raises(UpgradeRequired, match="ckptfs upgrade"):
            run.checkpoint(run.state)
        assert upgrade(store.repo).changed
        store = ckptfs.open_store(url)
    for run_id in store.runs():
        head = store.head(run_id)
        run = store.resume(run_id, lenient_refs=True)
        snap = run.checkpoint({**run.state, "resumed": True})
        assert snap.seq == head.seq + 1 and snap.resumed_from == head.id
        assert snap.attempt == head.attempt + 1
        got = store.read(snap.id)
        assert got.pop("resumed") is True
        assert gen.to_json(got) == gen.to_json(store.read(head))
    first = next(iter(store.snapshots(store.runs()[0])))  # @1 unless it was forgotten (v2)
    ref = f"{first.run}@{first.seq}"
    fork = store.fork(ref, "forked", lenient_refs=True)
    assert fork.checkpoint(fork.state).parent == store.get(ref).id
    assert verify(store.repo, read_data=True).ok


def test_golden_stores_load_with_todays_migrations() -> None:
    """The three-line test a user writes for their own golden stores."""
    reports = assert_stores_load(GOLDEN, schema=["agent@2", "chat@7", "shop@2"],
                                 migrations=gen.migrations())
    assert sum(len(r.results) for r in reports) == sum(
        len(_expected(n)["snapshots"]) for n in STORES)
    with pytest.raises(AssertionError, match="agent@1->2"):
        assert_stores_load(GOLDEN, schema=["agent@2", "chat@7", "shop@2"])  # no migrations
