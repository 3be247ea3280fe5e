"""Writer rules of format.md, ledger.md and migrations.md (issue 32, ``spec32c``): what a
writer's manifests and ledgers must hold whatever its layout, judged on its output store like
the rules of spec/v2.md 5.2.1 (ckptfs_conformance/writer_rules.py, which lists these in its
``RULES``). Manifests are taken from the run records; ledgers and value content are read
through the reference reader (every chunk verified), since a writer may carry or locate them.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cbor2

from ckptfs.format.typed import FEATURE as TYPED_VALUES


def _manifests(store: Path, out: list[str]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every run record's path and carried manifest map (a record that does not decode is
    reported in ``out``)."""
    from ckptfs_conformance.writer_rules import _record_containers

    for rel, h, _, _ in _record_containers(store, out):
        m = cbor2.loads(h.manifest)
        yield rel, m if isinstance(m, dict) else {}


def schema_map(store: Path, case: dict[str, Any]) -> list[str]:
    """Every manifest carries ``schema``, a map of exactly ``name`` (text) and ``version``
    (uint) (migrations.md 2)."""
    out: list[str] = []
    for rel, m in _manifests(store, out):
        s = m.get("schema")
        if not isinstance(s, dict) or set(s) != {"name", "version"} \
                or not isinstance(s["name"], str) or type(s["version"]) is not int \
                or s["version"] < 0:
            out.append(f"{rel}: schema is {s!r}, not a map of exactly name and version")
    return out


def migrated_from(store: Path, case: dict[str, Any]) -> list[str]:
    """No case runs a migration step, so no manifest carries ``migrated_from``; and no
    ``required`` lists it (migrations.md 4)."""
    out: list[str] = []
    for rel, m in _manifests(store, out):
        if "migrated_from" in m:
            out.append(f"{rel}: migrated_from written, though no migration step ran")
        if any("migrated" in str(r) for r in m.get("required") or ()):
            out.append(f"{rel}: migrated_from listed in required (it is no feature)")
    return out


def _ledger_bytes(store: Path) -> tuple[dict[bytes, tuple[str, int, bytes | None, bytes]],
                                         list[str]]:
    """Snapshot id -> (run, seq, parent id, ledger content) through the reference reader."""
    import ckptfs
    from ckptfs.store.entry_reads import read_ledger

    out: dict[bytes, tuple[str, int, bytes | None, bytes]] = {}
    s = ckptfs.open_store(str(store))
    try:
        for run in s.runs():
            for snap in s.snapshots(run):
                m = snap.manifest
                content = b""
                if m.ledger is not None:
                    s.repo.ensure_located(snap)
                    content = read_ledger(s.repo.objects, m.ledger, where=snap.id)[2]
                parent = m.parent.raw if m.parent is not None else None
                out[snap.digest.raw] = (run, m.seq, parent, content)
    finally:
        s.close()
    return out, []


def ledger_append_only(store: Path, case: dict[str, Any]) -> list[str]:
    """A ledger record once committed appears byte for byte at the same position in the ledger
    of every later snapshot of its run, and of a fork taken from it (ledger.md 1): each
    snapshot's ledger content starts with its parent's."""
    snaps, out = _ledger_bytes(store)
    for run, seq, parent, content in snaps.values():
        if parent is None or parent not in snaps:
            continue
        prun, pseq, _, before = snaps[parent]
        if not content.startswith(before):
            out.append(f"runs/{run}/{seq:020d}: its ledger does not start with the ledger of "
                       f"{prun}@{pseq} byte for byte")
    return out


def _has_typed(v: Any) -> bool:
    """Whether a decoded value holds a typed value (a tag 27) anywhere."""
    from ckptfs.format.typed import is_tagged

    if is_tagged(v):
        return True
    if isinstance(v, (list, tuple)):
        return any(_has_typed(x) for x in v)
    if isinstance(v, dict):
        return any(_has_typed(x) for x in v.values())
    return False


def typed_values_listed(store: Path, case: dict[str, Any]) -> list[str]:
    """A snapshot whose value entries hold a typed value (tag 27) lists ``typed-values`` in
    its manifest's ``required`` (format.md 18)."""
    import ckptfs
    from ckptfs.format.models import Captured
    from ckptfs.store.entry_reads import decode_value, read_content

    out: list[str] = []
    s = ckptfs.open_store(str(store))
    try:
        for run in s.runs():
            for snap in s.snapshots(run):
                m = snap.manifest
                s.repo.ensure_located(snap)
                typed = [name for name, e in sorted(m.entries.items())
                         if isinstance(e, Captured) and e.kind == "value"
                         and _has_typed(decode_value(e, read_content(
                             s.repo.objects, e, where=snap.id), where=snap.id))]
                if typed and TYPED_VALUES not in m.required:
                    out.append(f"runs/{run}/{m.seq:020d}: entries {typed} hold typed values "
                               "and required does not list typed-values")
    finally:
        s.close()
    return out


MANIFEST_RULES = {"schema-map": schema_map, "migrated-from": migrated_from,
                  "ledger-append-only": ledger_append_only,
                  "typed-values-listed": typed_values_listed}


def no_containers(store: Path, case: dict[str, Any]) -> list[str]:
    """In a store whose config is version 1 a writer writes no container: no pack, no run
    record in the container framing (spec/v2.md 2: the config's version decides the layout)."""
    import cbor2 as c2

    from ckptfs.format import containers as ct

    cfg = c2.loads((store / "ckptfs.cbor").read_bytes())
    if cfg.get("version") != 1:
        return [f"ckptfs.cbor: version {cfg.get('version')!r}: the store is no longer version 1"]
    out = [f"{f.relative_to(store).as_posix()}: a pack in a version 1 store"
           for f in sorted((store / "packs").rglob("*")) if f.is_file()]
    for f in sorted(store.glob("runs/*/*")):
        if f.is_file() and f.name.isdigit() and f.read_bytes().startswith(ct.MAGIC):
            out.append(f"{f.relative_to(store).as_posix()}: a container in a version 1 store")
    return out


def locator_sources(store: Path, case: dict[str, Any]) -> list[str]:
    """A record of a run the case writes locates chunks only in records of runs the case
    writes, or in a record its own parent's record names (spec/v2.md 5.2: the parent, or what
    the writer itself wrote); never in a record of another run it merely read or saw (the
    case's store was seeded with that run)."""
    from ckptfs.format.containers import RecordRef
    from ckptfs_conformance.writer_rules import _record_containers

    written = {s["run"] for s in case["steps"] if s["op"] in ("start", "fork", "resume")}
    out: list[str] = []
    allowed: dict[tuple[str, int], set[tuple[str, int]]] = {}
    records = list(_record_containers(store, out))
    for rel, h, _, _ in records:
        named = {(c.run, c.seq) for c in h.containers if isinstance(c, RecordRef)}
        allowed[(h.run, h.seq)] = named | {(h.run, h.seq)}
    for rel, h, _, _ in records:
        if h.run not in written:
            continue
        m = cbor2.loads(h.manifest)
        parent = None
        if m.get("parent") is not None:
            parent = next(((x.run, x.seq) for _, x, _, _ in records
                           if x.snapshot.raw == bytes(m["parent"])), None)
        ok = allowed.get(parent, set()) if parent else set()
        for c in h.containers:
            if isinstance(c, RecordRef) and c.run not in written and (c.run, c.seq) not in ok:
                out.append(f"{rel}: locates into runs/{c.run}/{c.seq:020d}, a record of a run "
                           "it did not write and its parent does not name")
    return out


MANIFEST_RULES.update({"no-containers": no_containers, "locator-sources": locator_sources})
