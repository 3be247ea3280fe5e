"""spec/ckptfs.cddl's retention block validates every control object that forget, erase,
expire and the maintenance lease really write, and rejects broken ones (as the code does)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import cbor2
import pycddl
import pytest

import ckptfs
from ckptfs.errors import CkptfsError
from ckptfs.format import lifecycle
from ckptfs.ops.erase import erase
from ckptfs.ops.expire import set_expiry
from ckptfs.ops.lease import MaintenanceLease
from ckptfs.ops.retention import forget_snapshots
from ckptfs_conformance.validate import root_of
from tests.storeutil import walk

CDDL = (Path(__file__).parent.parent / "spec" / "ckptfs.cddl").read_text()
ROOTS = ("retention-retired", "retention-expiry", "retention-tombstone", "retention-lease")
SCHEMAS = {root: pycddl.Schema(f"root = {root}\n{CDDL}") for root in ROOTS}
PARSERS = {"retention-retired": lifecycle.Retired, "retention-expiry": lifecycle.Expiry,
           "retention-tombstone": lifecycle.Tombstone, "retention-lease": lifecycle.Lease}


def valid(root: str, data: bytes) -> bool:
    try:
        SCHEMAS[root].validate_cbor(data)
    except Exception:  # pycddl.ValidationError is a plain Exception
        return False
    return True


def _controls(tmp_path: Path) -> dict[str, dict[str, Any]]:
    """A store after every lifecycle operation; {path: decoded map} of its control objects."""
    s = ckptfs.open_store(str(tmp_path / "s"))
    for run in ("a", "b", "c", "d"):
        r = s.start_run(run)
        for i in range(3):
            r.checkpoint({"i": i, "run": run}, expires_at=None if i else 4_000_000_000)
    forget_snapshots(s.repo, {"a": {1, 2}})          # gap, kept nothing
    forget_snapshots(s.repo, {"d": {2}})             # kept seq 1 below the marker
    erase(s.repo, "b", reason="user asked")          # tombstone of a run, fence
    erase(s.repo, "c", seq=2, reason="a secret")     # tombstone of a snapshot, fence with kept
    set_expiry(s.repo, "a", 4_100_000_000_000)       # run override
    set_expiry(s.repo, "a@3", None)                  # snapshot override: never
    set_expiry(s.repo, "d@3", 4_000_000_000_000)
    lease = MaintenanceLease(s.storage).acquire()    # held: its object stays
    out = {p: cbor2.loads(s.storage.read(p)) for p in walk(s.storage)
           if (root_of(p) or "").startswith("retention-")}
    lease.release()
    return out


def test_real_control_objects_validate(tmp_path: Path) -> None:
    objs = _controls(tmp_path)
    kinds = {root_of(p) for p in objs}
    assert kinds == set(ROOTS)
    assert len(objs) >= 9, sorted(objs)
    assert any(p.endswith("/18446744073709551615") for p in objs)  # a fence
    assert any(m.get("kept") for m in objs.values())               # a marker that keeps seqs
    assert any("expires" in m and m["expires"] is None for m in objs.values())
    for p, m in objs.items():
        root = root_of(p)
        assert root is not None
        assert valid(root, cbor2.dumps(m, canonical=True)), p
        PARSERS[root].from_bytes(cbor2.dumps(m, canonical=True), what=p)


BREAK = {
    "retention-retired": [lambda m: m.pop("kept"), lambda m: m.update(kept=[0]),
                          lambda m: m.update(through=-1), lambda m: m.update(run=""),
                          lambda m: m.update(created="now")],
    "retention-expiry": [lambda m: m.pop("expires"), lambda m: m.update(expires="x"),
                         lambda m: m.update(seq=0), lambda m: m.pop("set")],
    "retention-tombstone": [lambda m: m.update(state="gone"), lambda m: m.pop("reason"),
                            lambda m: m.update(snapshots=[[1, b"x"]]),
                            lambda m: m.update(snapshots=[1]), lambda m: m.update(seq=0),
                            lambda m: m.update(snapshots=[[0, bytes(32)]]),
                            lambda m: m.pop("bytes_deleted"),
                            lambda m: m.update(requested=None)],
    "retention-lease": [lambda m: m.pop("owner"), lambda m: m.update(expires=-5),
                        lambda m: m.update(deletes="yes"), lambda m: m.update(pid=-1)],
}


def test_cddl_rejects_broken_control_objects(tmp_path: Path) -> None:
    objs = _controls(tmp_path)
    checked = 0
    for p, base in objs.items():
        root = root_of(p)
        assert root is not None
        assert valid(root, cbor2.dumps({**base, "x-later": 1}, canonical=True))  # extensible
        for breaker in BREAK[root]:
            m = copy.deepcopy(base)
            breaker(m)
            data = cbor2.dumps(m, canonical=True)
            assert not valid(root, data), (p, m)
            with pytest.raises(CkptfsError):
                PARSERS[root].from_bytes(data, what=p)
            checked += 1
    assert checked >= 30
