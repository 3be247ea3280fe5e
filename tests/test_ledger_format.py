"""The ledger's format: records, the fold rules, the manifest field, and the spec's CDDL."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import pycddl
import pytest

import ckptfs
from ckptfs.errors import FormatError
from ckptfs.format import cbor
from ckptfs.format.digest import Digest
from ckptfs.format.ledger import Ledger, LedgerRef, Record, args_digest


CDDL = (Path(__file__).parent.parent / "spec" / "ckptfs.cddl").read_text()
BLOCK = CDDL[CDDL.index("; --- effect ledger ---"):]


def schema(root: str) -> Any:
    return pycddl.Schema(f"root = {root}\n" + BLOCK)


def rec(status: str = "intended", key: str = "k", **kw: Any) -> Record:
    fields: dict[str, Any] = dict(key=key, kind="effect", name="pay", args=args_digest([1], {}),
                                  status=status, at=1, attempt=1)
    fields.update(kw)
    return Record(**fields)


def test_args_digest_is_blake3_of_canonical_args() -> None:
    assert args_digest([1, "a"], {"b": 2, "a": 1}) == Digest.of(cbor.encode([[1, "a"], {"a": 1, "b": 2}]))
    with pytest.raises(TypeError):
        args_digest([object()], {})


def test_fold_rules() -> None:
    ok = Ledger().append(rec()).append(rec()).append(rec("completed", result=3, via="call"))
    eff = ok.effects["k"]
    assert (eff.status, eff.issues, eff.result, eff.via) == ("completed", 2, 3, "call")
    with pytest.raises(FormatError, match="never intended"):
        Ledger().append(rec("completed", result=1))
    with pytest.raises(FormatError, match="final"):
        ok.append(rec("failed", error={"type": "E", "message": "m"}))
    with pytest.raises(FormatError, match="changes the kind, name or arguments"):
        Ledger().append(rec()).append(rec("completed", name="refund"))


@pytest.mark.parametrize("bad", [
    {"status": "maybe"},
    {"args": b"short"},
    {"attempt": 0},
    {"key": ""},
    {"status": "failed"},                                  # no error
    {"status": "intended", "result": 1},                   # result on an intent
    {"status": "completed", "error": {"type": "E", "message": "m"}},
    {"status": "intended", "via": "call"},
])
def test_bad_records_are_refused(bad: dict[str, Any]) -> None:
    m = rec().to_cbor()
    m.update(bad)
    with pytest.raises(FormatError):
        Record.from_cbor(m)


def test_real_ledger_matches_cddl_and_round_trips(store: ckptfs.Store) -> None:
    run = store.start_run("r")
    run.effect("pay", lambda a: {"id": a}, 1, key="a")
    with pytest.raises(ValueError):
        run.effect("pay", lambda: (_ for _ in ()).throw(ValueError("x")), key="b")
    run.effect("big", lambda: ["y" * 100] * 1000, key="c")
    with pytest.raises(ckptfs.errors.ApprovalPending):
        run.wait_for_approval({"ask": 1}, key="d")
    items = run.ledger.to_cbor()
    assert len(items) == 7
    rs, ls = schema("ledger-record"), schema("ledger-ref")
    for item in items:
        rs.validate_cbor(cbor.encode(item))
        assert Record.from_cbor(item).to_cbor() == item
    ref = store.head("r").manifest.ledger
    ls.validate_cbor(cbor.encode(ref))
    assert LedgerRef.from_cbor(ref).to_cbor() == ref
    assert Ledger.from_cbor(items).effects == run.ledger.effects
    with pytest.raises(pycddl.ValidationError):
        rs.validate_cbor(cbor.encode({**items[0], "status": "maybe"}))


def test_manifest_ledger_field_is_validated() -> None:
    good = {"count": 1, "size": 3, "digest": Digest.of(b"abc").raw, "inline": b"abc"}
    assert LedgerRef.from_cbor(good).inline == b"abc"
    for bad in [{**good, "count": 0}, {**good, "count": 4}, {**good, "inline": b"abd"},
                {**good, "chunks": []}, {k: v for k, v in good.items() if k != "inline"}]:
        with pytest.raises(FormatError):
            LedgerRef.from_cbor(bad)


def test_effect_view_is_frozen() -> None:
    eff = Ledger().append(rec()).effects["k"]
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        eff.status = "completed"  # type: ignore[misc]


# -- leases (spec/ledger.md 4.1) ---------------------------------------------------------------
def test_a_lease_round_trips_and_folds_into_running() -> None:
    r = rec(owner="host/1/ab", deadline=5)
    assert Record.from_cbor(r.to_cbor()) == r
    eff = Ledger().append(r).effects["k"]
    assert (eff.owner, eff.deadline) == ("host/1/ab", 5)
    assert eff.running(4) and not eff.running(5) and eff.in_doubt
    v1 = Ledger().append(r).append(rec()).effects["k"]  # a re-issue without a lease (v1)
    assert (v1.owner, v1.deadline, v1.issues) == (None, None, 2) and not v1.running(0)
    done = Ledger().append(r).append(rec("completed", result=1, via="call")).effects["k"]
    assert done.owner == "host/1/ab" and not done.running(0)
    schema("ledger-record").validate_cbor(cbor.encode(r.to_cbor()))


@pytest.mark.parametrize("bad", [
    {"owner": "o"},                                         # no deadline
    {"deadline": 5},                                        # no owner
    {"owner": "", "deadline": 5},
    {"owner": "o" * 257, "deadline": 5},
    {"owner": 7, "deadline": 5},
    {"owner": "o", "deadline": 0},                          # before at (1)
    {"owner": "o", "deadline": -1},
    {"owner": "o", "deadline": "5"},
    {"owner": "o", "deadline": 5, "status": "completed", "result": 1, "via": "call"},
    {"owner": "o", "deadline": 5, "kind": "approval"},
])
def test_bad_leases_are_refused(bad: dict[str, Any]) -> None:
    m = rec().to_cbor()
    m.update(bad)
    with pytest.raises(FormatError):
        Record.from_cbor(m)
