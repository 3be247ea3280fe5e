"""Prove every retained snapshot restores with today's code: load, migrate, validate.

``verify`` proves the bytes are intact; ``check`` proves the *state* still makes sense to the
code about to be deployed: every snapshot of every run (not only heads) is read, migrated in
memory to the current schema and handed to an optional validation function. Nothing is
written. Meant for CI at release time (spec/migrations.md, "Checking a store").
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs

from ckptfs.errors import CkptfsError, MigrationError, SchemaError
from ckptfs.format.models import Schema
from ckptfs.runtime.migrations import Migrations
from ckptfs.runtime.refs import RefPolicy
from ckptfs.runtime.store import Store

#: ``validate(state)``: raise (or return False) when the migrated state is not acceptable.
Validator = Callable[[dict[str, Any]], object]


@attrs.frozen
class SnapshotCheck:
    """What happened to one snapshot: ``stage`` says where it failed (load, schema, migrate,
    validate), None when it passed."""

    run: str
    seq: int
    snapshot: str | None
    schema: str | None
    target: str | None
    steps: int = 0
    stage: str | None = None
    category: str | None = None
    message: str | None = None

    @property
    def ok(self) -> bool:
        return self.stage is None

    def to_json(self) -> dict[str, object]:
        return {**attrs.asdict(self), "ok": self.ok}


@attrs.define
class CheckReport:
    """Every snapshot's result, in run and sequence order."""

    runs: int = 0
    results: list[SnapshotCheck] = attrs.field(factory=list)

    @property
    def failed(self) -> list[SnapshotCheck]:
        return [r for r in self.results if not r.ok]

    @property
    def ok(self) -> bool:
        return not self.failed

    def to_json(self) -> dict[str, object]:
        return {"ok": self.ok, "runs": self.runs, "snapshots": len(self.results),
                "failed": len(self.failed), "results": [r.to_json() for r in self.results]}


def check(store: Store, *, schemas: Iterable[Schema] = (), migrations: Migrations | None = None,
          validate: Validator | None = None, runs: Iterable[str] | None = None,
          strict_refs: bool = False, progress: Callable[[str], None] | None = None,
          ref_policy: RefPolicy | None = None) -> CheckReport:
    """Load, migrate to ``schemas`` (the current version per schema name) and validate every
    snapshot of ``runs`` (default: all). Without ``schemas`` snapshots are loaded as stored.
    References are verified only where ``ref_policy`` (else the store's) allows; with
    ``strict_refs`` one that is not checked fails its snapshot."""
    targets = {s.name: s for s in schemas}
    migrations = migrations or Migrations()
    report = CheckReport()
    store.repo.config  # not a store: raise now, not once per snapshot
    for run_id in (list(runs) if runs is not None else store.runs()):
        report.runs += 1
        for seq in store.repo.seqs(run_id):
            if progress:
                progress(f"{run_id}@{seq}")
            report.results.append(_check_one(store, run_id, seq, targets, migrations, validate,
                                             strict_refs, ref_policy))
    return report


def _check_one(store: Store, run_id: str, seq: int, targets: Mapping[str, Schema],
               migrations: Migrations, validate: Validator | None,
               strict_refs: bool, ref_policy: RefPolicy | None = None) -> SnapshotCheck:
    def fail(stage: str, e: Exception | str, **kw: Any) -> SnapshotCheck:
        """A failed result; ckptfs errors keep their category, anything else is the stage's."""
        if isinstance(e, CkptfsError):
            cat, msg = e.category, str(e)
        else:
            cat, msg = stage, e if isinstance(e, str) else f"{type(e).__name__}: {e}"
        return SnapshotCheck(run_id, seq, stage=stage, category=cat, message=msg, **kw)

    try:
        snap = store.repo.snapshot_at(run_id, seq)
    except Exception as e:
        return fail("load", e, snapshot=None, schema=None, target=None)
    source = snap.manifest.schema
    target = targets.get(source.name, source if not targets else None)
    info: dict[str, Any] = {"snapshot": snap.id, "schema": str(source),
                            "target": str(target) if target else None}
    if target is None:
        return fail("schema", f"snapshot {snap.id} has state schema {source}, which is not among "
                              f"the schemas checked ({', '.join(map(str, targets.values()))})",
                    **info)
    try:
        steps = len(migrations.plan(source, target, what=f"snapshot {snap.id} (run {run_id!r} "
                                                         f"seq {seq})"))
        state = store.read(snap, lenient_refs=not strict_refs, allow_expired=True,
                           schema=target, migrations=migrations, ref_policy=ref_policy)
        if snap.manifest.ledger is not None:  # completed effects' results migrate too
            store.ledger(snap, allow_expired=True, schema=target, migrations=migrations)
    except MigrationError as e:
        return fail("migrate", e, **info)
    except SchemaError as e:
        return fail("schema", e, **info)
    except Exception as e:
        return fail("load", e, **info)
    info["steps"] = steps
    if validate is not None:
        try:
            verdict = validate(state)
        except Exception as e:
            return fail("validate", e, **info)
        if verdict is False:
            return fail("validate", "validation of the migrated state returned False", **info)
    return SnapshotCheck(run_id, seq, **info)
