"""Conformance vectors for effect leases (spec/ledger.md section 4.1, "Leases").

An effect's ``intended`` record names its ``owner`` and a ``deadline``; readers render both
and treat the intent as *running* (not in doubt) while NOW < deadline. Records without them
(v1) are in doubt at once. Called from ``generate.py``; every name starts with ``ledger-`` so
the vectors need the ``ledger`` capability.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import ckptfs
from ckptfs_conformance import generate as gen
from ckptfs_conformance.render import render_store

#: the owners the vectors' effect intents name (set as the generating process's owner)
OWNER = "ckptfs-conformance/owner-a"
OTHER = "ckptfs-conformance/owner-b"
HOUR = 3_600_000
DAY = 24 * HOUR


class _Crash(BaseException):
    """The process dies inside the call."""


def _crash(*_a: Any) -> Any:
    raise _Crash()


def _run(p: Path, owner: str = OWNER) -> tuple[ckptfs.Store, gen.Clock, Any]:
    s, c = gen.new_store(p)
    r = s.start_run("agent")
    r.owner = owner
    r.checkpoint({"cart": ["book"]}, "start")
    c.tick()
    return s, c, r


def _resume(s: ckptfs.Store, owner: str) -> Any:
    r = s.resume("agent")
    r.owner = owner
    return r


def lease_states(p: Path) -> None:
    """Three leases read at NOW: a call still running (deadline after NOW: not in doubt), a
    call whose lease ran out (deadline before NOW: in doubt) and a completed call."""
    s, c, r = _run(p)
    r.effect("pay", lambda: {"ok": True}, key="pay-1", timeout=60)
    c.tick()
    try:  # the lease ran out long before NOW: in doubt
        r.effect("ship", _crash, key="ship-1", timeout=60)
    except _Crash:
        pass
    c.t = gen.NOW - HOUR  # a call issued an hour before NOW with a lease of two hours
    r = _resume(s, OTHER)
    try:
        r.effect("email", _crash, key="mail-1", timeout=2 * HOUR / 1000)
    except _Crash:
        pass


def lease_reissued(p: Path) -> None:
    """A lease that ran out, reconciled as not done and re-issued by another owner, which
    completed it: two intents with their own owners and deadlines, the fold shows the second."""
    s, c, r = _run(p)
    try:
        r.effect("pay", _crash, 10, key="pay-1", timeout=10)
    except _Crash:
        pass
    c.tick(20_000)
    r = _resume(s, OTHER)
    r.effect("pay", lambda amount: {"paid": amount}, 10, key="pay-1", timeout=10,
             reconcile=lambda eff: ckptfs.NOT_DONE)


def lease_v1_records(p: Path) -> None:
    """Records written before leases (no owner, no deadline): an intent is in doubt at once,
    however recent, and nothing about leases is rendered."""
    s, c = gen.new_store(p)
    r = s.start_run("r1")
    r.checkpoint({"x": 1})
    c.tick()
    r.checkpoint({"x": 2})
    gen._bad_ledger(p, [gen._rec("pay-1", "intended", at=gen.NOW - 1),
                        gen._rec("ship-1", "intended"),
                        gen._rec("ship-1", "completed", result="shipped", via="reconcile")])


STORES = {"ledger-lease-states": lease_states, "ledger-lease-reissued": lease_reissued,
          "ledger-lease-v1-records": lease_v1_records}


def _lease(**kw: Any) -> dict[str, Any]:
    return {"owner": OWNER, "deadline": gen.T0 + 1000, **kw}


#: ledgers that break the lease rules of spec/ledger.md section 1 (category corrupt)
INVALID: dict[str, tuple[str, str, list[dict[str, Any]]]] = {
    "ledger-lease-deadline-without-owner": (
        "corrupt", "an intent with a deadline but no owner",
        [gen._rec("k", "intended", deadline=gen.T0 + 1000)]),
    "ledger-lease-owner-without-deadline": (
        "corrupt", "an intent with an owner but no deadline",
        [gen._rec("k", "intended", owner=OWNER)]),
    "ledger-lease-deadline-before-at": (
        "corrupt", "an intent whose deadline is before its own 'at'",
        [gen._rec("k", "intended", **_lease(deadline=gen.T0 - 1))]),
    "ledger-lease-on-settling-record": (
        "corrupt", "a lease on a completed record (only an effect's intent has one)",
        [gen._rec("k", "intended", **_lease()),
         gen._rec("k", "completed", result=1, via="call", **_lease())]),
    "ledger-lease-on-approval": (
        "corrupt", "a lease on an approval request (approvals wait for humans, not calls)",
        [gen._rec("k", "intended", kind="approval", request=1, **_lease())]),
    "ledger-lease-owner-empty": (
        "corrupt", "an empty owner", [gen._rec("k", "intended", **_lease(owner=""))]),
    "ledger-lease-deadline-text": (
        "corrupt", "a deadline that is not an unsigned integer",
        [gen._rec("k", "intended", **_lease(deadline="soon"))]),
}


def fix_owner() -> None:
    """Make this process's effect intents name ``OWNER`` (the vectors are reproducible)."""
    from ckptfs.runtime.effects import set_process_owner

    set_process_owner(OWNER)


def _damage(records: list[dict[str, Any]]) -> Callable[[Path], None]:
    return lambda p: gen._bad_ledger(p, records)


def vectors(g: gen.Gen, base: Path) -> None:
    """The valid stores (rendered at NOW) and the invalid ledgers (damaging ``base``)."""
    for name, build in STORES.items():
        d = g.store_dir("store-valid", name)
        build(d)
        desc = " ".join((build.__doc__ or "").split())
        g.vector("store-valid", name, desc, ["read", "{store}", str(gen.NOW)],
                 {"output": render_store(str(d), gen.NOW), "compare": "json"},
                 ["reader", "ledger"], store=f"{name}.store", beyond_cddl=[])
    cases: dict[str, tuple[str, str, Callable[[Path], Any]]] = {
        name: (cat, desc, _damage(recs)) for name, (cat, desc, recs) in INVALID.items()}
    gen.invalid_stores(g, base, cases)


#: the writer case: leases with the owner and timeouts the case names (README "Writer cases")
WRITER_CASES: dict[str, Any] = {"ledger-lease": ("effects under leases: a completed call, a call that died with its lease "
               "running at NOW, and one whose lease ran out, reconciled and re-issued", True,
               ["writer", "ledger"], {"owner": OWNER, "steps": [
                   {"op": "start", "run": "r1", "time": gen.T0,
                    "schema": {"name": "s", "version": 1}},
                   gen._cp("r1", gen.T0 + 1, {"cart": gen._v(["book"])}, boundary="start"),
                   {"op": "effect", "run": "r1", "time": gen.T0 + 2, "key": "pay-1",
                    "name": "pay", "timeout": 30_000, "outcome": {"result": 1}},
                   {"op": "effect", "run": "r1", "time": gen.T0 + 3, "key": "ship-1",
                    "name": "ship", "timeout": 1000, "outcome": {"crash": True}},
                   {"op": "resume", "run": "r1", "time": gen.T0 + 5000},
                   {"op": "effect", "run": "r1", "time": gen.T0 + 5001, "key": "ship-1",
                    "name": "ship", "timeout": 1000, "reconcile": "not-done",
                    "outcome": {"result": "shipped"}},
                   {"op": "effect", "run": "r1", "time": gen.NOW - 1000, "key": "mail-1",
                    "name": "mail", "timeout": 2 * DAY, "outcome": {"crash": True}}]})}
