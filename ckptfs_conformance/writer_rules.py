"""The rules of spec/v2.md 5.2.1 that a version 2 writer's output store is judged by (the
``writer-rules/*`` vectors, issue 32). A writer's layout choices (which bodies go into packs,
the order of rows, the record form where the feature allows both) are its own, so these
vectors compare no bytes: the runner reads the store back with the reference reader (its
rendering, config aside, must be the expected one) and then checks each rule the vector names.

Each rule is a function of the output store and the case; it returns the problems it found,
as ``path: why`` texts (empty: the rule holds).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import blake3
import cbor2

from ckptfs.errors import CkptfsError
from ckptfs.format import containers as ct
from ckptfs.format import framing
from ckptfs.store.containers import container_path

_RECORD = re.compile(r"runs/([^/]+)/([0-9]{20})")
_PACK = re.compile(r"packs/([0-9a-f]{2})/([0-9a-f]{64})")
_HINT = re.compile(r"runs/([^/]+)/head")


def _files(store: Path) -> Iterator[str]:
    for f in sorted(store.rglob("*")):
        if f.is_file():
            yield f.relative_to(store).as_posix()


def _records(store: Path) -> list[tuple[str, Path]]:
    return [(rel, store / rel) for rel in _files(store) if _RECORD.fullmatch(rel)]


def _packs(store: Path) -> list[tuple[str, Path]]:
    return [(rel, store / rel) for rel in _files(store) if _PACK.fullmatch(rel)]


def _decode(f: Path, rel: str) -> tuple[ct.Container | None, bytes, str | None]:
    data = f.read_bytes()
    try:
        return ct.decode(data, what=rel), data, None
    except CkptfsError as e:
        return None, data, f"{rel}: does not decode ({e})"


def _record_containers(store: Path, out: list[str]
                       ) -> Iterator[tuple[str, ct.RecordHeader, ct.Container, bytes]]:
    """Every record file's path, header, decoded container and bytes; one that does not decode as a record is
    reported in ``out`` (a problem of every rule that reads records) and skipped."""
    for rel, f in _records(store):
        c, data, why = _decode(f, rel)
        if c is None and not data.startswith(ct.MAGIC[:1]):
            continue  # a version 1 record (raw CBOR, an upgraded store): no container
        if c is None or not isinstance(c.header, ct.RecordHeader):
            out.append(why or f"{rel}: not a record")
            continue
        yield rel, c.header, c, data


def _config(store: Path) -> dict[str, Any]:
    m = cbor2.loads((store / "ckptfs.cbor").read_bytes())
    return m if isinstance(m, dict) else {}


def one_object_per_commit(store: Path, case: dict[str, Any]) -> list[str]:
    """A commit creates one run record and no object but the packs it needs: no version 1
    chunk or manifest object, nothing else (5.1, 5.2.1)."""
    commits = sum(s["op"] == "checkpoint" for s in case["steps"])
    out = []
    records = _records(store)
    if len(records) != commits:
        out.append(f"runs/: {len(records)} run records for {commits} commits")
    for rel in _files(store):
        if rel == "ckptfs.cbor" or _RECORD.fullmatch(rel) or _PACK.fullmatch(rel) \
                or _HINT.fullmatch(rel) or rel.startswith(("leases/", "tmp/")):
            continue
        out.append(f"{rel}: not a record, pack or head hint (a commit writes one record and "
                   "the packs it needs)")
    return out


def packs_complete(store: Path, case: dict[str, Any]) -> list[str]:
    """Every container a record locates into is in the store; every pack is named by the
    BLAKE3-256 of its bytes, decodes, is of kind pack and form 0x02 (3.4, 5.1)."""
    out = []
    for rel, f in _packs(store):
        c, data, why = _decode(f, rel)
        if why:
            out.append(why)
            continue
        if blake3.blake3(data).hexdigest() != rel.rsplit("/", 1)[1]:
            out.append(f"{rel}: its name is not the BLAKE3-256 of its bytes")
        if data[8] != ct.CONTAINER_VERSION or not isinstance(c and c.header, ct.PackHeader):
            out.append(f"{rel}: not a form 0x02 pack")
    for rel, h, _, _ in _record_containers(store, out):
        for ref in h.containers:
            if not (store / container_path(ref)).is_file():
                out.append(f"{rel}: locates into {container_path(ref)}, which is not in "
                           "the store (a pack must be durable before the record)")
    return out


def _needed(manifest: dict[str, Any]) -> dict[bytes, int]:
    """The chunks a manifest names through its entries and its ledger (digest -> size)."""
    out: dict[bytes, int] = {}
    for e in (manifest.get("entries") or {}).values():
        for d, size in e.get("chunks") or ():
            out[bytes(d)] = size
    ledger = manifest.get("ledger")
    if isinstance(ledger, dict):
        for d, size in ledger.get("chunks") or ():
            out[bytes(d)] = size
    return out


def complete_locators(store: Path, case: dict[str, Any]) -> list[str]:
    """Every chunk a record's snapshot needs is one of its bodies or located by exactly one
    row, and the located bytes are that chunk (3.5: no hole, no row that misleads at commit)."""
    out: list[str] = []
    for rel, h, c, data in _record_containers(store, out):
        bodies = {b.digest.raw: b for b in h.bodies}
        rows: dict[bytes, list[ct.Locator]] = {}
        for x in h.locators:
            rows.setdefault(x.prefix, []).append(x)
        for d, size in sorted(_needed(cbor2.loads(h.manifest)).items()):
            if d in bodies:
                b = bodies[d]
                stored = data[c.body_start + b.offset:c.body_start + b.offset + b.stored]
            else:
                found = rows.get(d[:ct.LOCATOR_PREFIX], [])
                if len(found) != 1:
                    out.append(f"{rel}: chunk {d.hex()} is neither carried nor located "
                               "(a hole)" if not found else f"{rel}: two rows for {d.hex()}")
                    continue
                x = found[0]
                path = store / container_path(h.containers[x.container])
                stored = path.read_bytes()[x.start:x.start + x.stored] if path.is_file() \
                    else b""
            if not _is_chunk(stored, d, size):
                out.append(f"{rel}: chunk {d.hex()} is not where the record says")
    return out


def _is_chunk(stored: bytes, d: bytes, size: int) -> bool:
    try:
        return bool(stored) and blake3.blake3(framing.unframe(stored, size, what="body")
                                              ).digest() == d
    except CkptfsError:
        return False


def form_follows_feature(store: Path, case: dict[str, Any]) -> list[str]:
    """No form 0x03 container unless the config lists compressed-headers, no form 0x04 unless
    it lists delta-headers; packs in form 0x02 in every store (sections 2, 3.1.2)."""
    listed = "compressed-headers" in (_config(store).get("required") or ())
    delta = "delta-headers" in (_config(store).get("required") or ())
    out = []
    for rel, f in _records(store) + _packs(store):
        form = f.read_bytes()[8:9]
        if form == b"\x03" and (not listed or _PACK.fullmatch(rel)):
            out.append(f"{rel}: form 0x03" + ("" if listed else " in a store whose config does "
                                              "not list compressed-headers"))
        if form == b"\x04" and (not delta or _PACK.fullmatch(rel)):  # section 3.1.2
            out.append(f"{rel}: form 0x04" + ("" if delta else " in a store whose config does "
                                              "not list delta-headers"))
    return out


def config_features(store: Path, case: dict[str, Any]) -> list[str]:
    """A writer that creates a version 2 store lists complete-locators (section 2)."""
    cfg = _config(store)
    if cfg.get("version") != 2:
        return [f"ckptfs.cbor: version {cfg.get('version')!r}, not 2"]
    if "complete-locators" not in (cfg.get("required") or ()):
        return ["ckptfs.cbor: 'required' does not list complete-locators"]
    return []


def nonces_unique(store: Path, case: dict[str, Any]) -> list[str]:
    """Every record's nonce is its own (5.3): a lost answer is resolved by comparing bytes."""
    seen: dict[bytes, str] = {}
    out: list[str] = []
    for rel, h, _, _ in _record_containers(store, out):
        n = h.nonce
        if n in seen:
            out.append(f"{rel}: the nonce of {seen[n]}")
        seen[n] = rel
    return out


def hints_committed(store: Path, case: dict[str, Any]) -> list[str]:
    """A head hint names a record its writer committed: the seq has a record, and the hint's
    snapshot is that record's (section 4)."""
    out = []
    for rel in _files(store):
        m = _HINT.fullmatch(rel)
        if not m:
            continue
        hint = ct.HeadHint.parse((store / rel).read_bytes(), m.group(1))
        if hint is None:
            out.append(f"{rel}: not a valid head hint")
            continue
        rec = store / "runs" / m.group(1) / f"{hint.seq:020d}"
        c, _, why = _decode(rec, rec.name) if rec.is_file() else (None, b"", None)
        if c is None or not isinstance(c.header, ct.RecordHeader) \
                or c.header.snapshot != hint.snapshot:
            out.append(f"{rel}: names seq {hint.seq}, which the writer did not commit")
    return out


RULES: dict[str, Callable[[Path, dict[str, Any]], list[str]]] = {
    "one-object-per-commit": one_object_per_commit, "packs-complete": packs_complete,
    "complete-locators": complete_locators, "form-follows-feature": form_follows_feature,
    "config-features": config_features, "nonces-unique": nonces_unique,
    "hints-committed": hints_committed}


def check(store: Path, rules: list[str], case: dict[str, Any]) -> list[str]:
    """The problems of ``store`` under each rule named (an unknown name is a problem too)."""
    out = []
    for name in rules:
        rule = RULES.get(name)
        out += [f"{name}: {p}" for p in rule(store, case)] if rule else [f"unknown rule {name}"]
    return out


# spec32c: the writer rules of format.md, ledger.md and migrations.md
from ckptfs_conformance.writer_rules_manifest import MANIFEST_RULES  # noqa: E402

RULES.update(MANIFEST_RULES)
