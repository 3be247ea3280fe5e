"""The reference rendering: what a conforming reader reports, as canonical JSON.

Values use a tagged JSON encoding (README "Tagged JSON"): integers outside +-2^53 are
``{"$int": "<decimal>"}``, floats ``{"$float": "<16 hex digits of the IEEE 754 double>"}``,
byte strings ``{"$bytes": "<hex>"}``, typed values (tag 27, format.md 18)
``{"$typed": [name, payload]}``; a map key that starts with ``$`` gets one more ``$``.
This module is also the runner's reference reader for writer cases.
"""

from __future__ import annotations

import json
import struct
from typing import Any

from ckptfs.errors import CkptfsError
from ckptfs.format.digest import Digest
from ckptfs.format.ledger import Effect, LedgerRef, Record
from ckptfs.format.models import Captured, Entry, Reference, StoreConfig
from ckptfs.format.typed import is_tagged as is_typed
from ckptfs.format.typed import tagged as typed_form
from ckptfs.storage import open_storage
from ckptfs.store.entry_reads import decode_value, read_content, read_ledger
from ckptfs.store.lifecycle import effective_expiry, read_tombstone, tombstone_keys
from ckptfs.store.repository import Repository, Snapshot

SAFE_INT = 1 << 53


def tagged(v: Any) -> Any:
    """A plain CBOR data-model value as tagged JSON."""
    if v is None or isinstance(v, (bool, str)):
        return v
    if isinstance(v, int):
        return v if -SAFE_INT < v < SAFE_INT else {"$int": str(v)}
    if isinstance(v, float):  # every NaN is one value: payload and sign are not data (5.1)
        return {"$float": "7ff8000000000000" if v != v else struct.pack(">d", v).hex()}
    if isinstance(v, bytes):
        return {"$bytes": v.hex()}
    if isinstance(v, list):
        return [tagged(x) for x in v]
    if isinstance(v, dict):
        return {("$" + k if k.startswith("$") else k): tagged(x) for k, x in v.items()}
    if is_typed(v):  # a typed value (format.md 18): its name and payload
        return {"$typed": [v.value[0], tagged(v.value[1])]}
    raise TypeError(f"not a plain value: {type(v).__name__}")


def untagged(v: Any) -> Any:
    """The inverse of ``tagged``."""
    if isinstance(v, list):
        return [untagged(x) for x in v]
    if isinstance(v, dict):
        if len(v) == 1:
            (k, x), = v.items()
            if k == "$int":
                return int(x)
            if k == "$float":
                return struct.unpack(">d", bytes.fromhex(x))[0]
            if k == "$bytes":
                return bytes.fromhex(x)
            if k == "$typed":
                return typed_form(x[0], untagged(x[1]))
        return {(k[1:] if k.startswith("$$") else k): untagged(x) for k, x in v.items()}
    return v


def canonical_json(obj: Any) -> str:
    """Sorted keys, no whitespace, UTF-8 (not ASCII-escaped)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False)


def _text(d: Digest | None) -> str | None:
    return None if d is None else d.text


def render_config(cfg: StoreConfig) -> dict[str, Any]:
    c = cfg.to_cbor()
    return {"version": c["version"], "hash": c["hash"], "chunker": c["chunker"],
            "created": c["created"], "required": c["required"], "optional": c["optional"],
            "settings": tagged(c["settings"])}


def _captured(repo: Repository, e: Captured, where: str) -> dict[str, Any]:
    out: dict[str, Any] = {"kind": e.kind, "type": e.type, "size": e.size,
                           "digest": e.digest.text, "labels": dict(e.labels),
                           "inline": e.inline is not None,
                           "chunks": [[c.digest.text, c.size] for c in e.chunks]}
    content = read_content(repo.objects, e, where=where)
    if e.kind == "value":
        out["encoding"] = e.encoding
        out["value"] = tagged(decode_value(e, content, where=where))
    else:
        out["content"] = content.hex()
    return out


def render_entry(repo: Repository, e: Entry, where: str) -> dict[str, Any]:
    if isinstance(e, Reference):
        return {"kind": "ref", "uri": e.uri, "digest": _text(e.digest), "size": e.size,
                "expires": e.expires, "labels": dict(e.labels)}
    return _captured(repo, e, where)


def _record(repo: Repository, r: Record, item: dict[str, Any], where: str) -> dict[str, Any]:
    out: dict[str, Any] = {"key": r.key, "kind": r.kind, "name": r.name, "args": r.args.text,
                           "status": r.status, "at": r.at, "attempt": r.attempt}
    if "result" in item:
        out["result"] = tagged(r.result)
    if r.result_content is not None:
        out["result_content"] = _captured(repo, r.result_content, f"{where} result")
    for k in ("error", "request", "via", "owner", "deadline"):
        if k in item:
            out[k] = tagged(item[k])
    return out


def _effect(repo: Repository, e: Effect, where: str, now: int) -> dict[str, Any]:
    result = e.result
    if e.result_content is not None:
        content = read_content(repo.objects, e.result_content, where=where)
        result = decode_value(e.result_content, content, where=where)
    out: dict[str, Any] = {
        "key": e.key, "kind": e.kind, "name": e.name, "args": e.args.text,
        "status": e.status, "in_doubt": e.in_doubt, "pending": e.pending,
        "intended_at": e.intended_at, "issued_by": e.issued_by, "issues": e.issues,
        "settled_at": e.settled_at, "settled_by": e.settled_by, "via": e.via,
        "result": tagged(result), "error": None if e.error is None else dict(e.error),
        "request": tagged(e.request)}
    if e.deadline is not None:  # the last intent's lease (spec/ledger.md "Leases")
        running = e.running(now)
        out.update(owner=e.owner, deadline=e.deadline, running=running,
                   in_doubt=e.in_doubt and not running)
    return out


def render_ledger(repo: Repository, snap: Snapshot, where: str, now: int
                  ) -> dict[str, Any] | None:
    raw = snap.manifest.ledger
    if raw is None:
        return None
    ref = LedgerRef.from_cbor(raw, what=where)
    ledger, _, _, items = read_ledger(repo.objects, raw, where=where)
    return {"count": ref.count, "size": ref.size, "digest": ref.digest.text,
            "inline": ref.inline is not None,
            "chunks": [[c.digest.text, c.size] for c in ref.chunks],
            "records": [_record(repo, r, item, where) for r, item in zip(ledger.records, items)],
            "effects": {k: _effect(repo, e, f"{where} effect {k!r}", now)
                        for k, e in ledger.effects.items()}}


def render_snapshot(repo: Repository, snap: Snapshot, now: int) -> dict[str, Any]:
    m = snap.manifest
    expires = effective_expiry(repo.storage, m.run, m.seq, m.expires)  # retention may override
    out: dict[str, Any] = {
        "id": snap.id, "run": m.run, "seq": m.seq, "boundary": m.boundary, "created": m.created,
        "writer": m.writer, "schema": {"name": m.schema.name, "version": m.schema.version},
        "parent": _text(m.parent), "resumed_from": _text(m.resumed_from), "attempt": m.attempt,
        "labels": dict(m.labels), "expires": expires, "required": list(m.required)}
    if expires is not None and expires <= now:
        out["error"] = "expired"
        return out
    where = f"snapshot {snap.digest.short} (run {m.run!r} seq {m.seq})"
    repo.ensure_located(snap)  # its chunks from its own record's places (spec/v2.md 6)
    out["entries"] = {name: render_entry(repo, e, f"{where} entry {name!r}")
                      for name, e in m.entries.items()}
    out["ledger"] = render_ledger(repo, snap, f"{where} ledger", now)
    return out


def render_tombstones(repo: Repository) -> list[dict[str, Any]]:
    """Every tombstone (spec/retention.md 5), whole-run ones first, by run and seq."""
    out = []
    for run_id, seq in tombstone_keys(repo.storage):
        stone = read_tombstone(repo.storage, run_id, seq)
        if stone is not None:
            out.append(stone.to_json())
    return out


def _storage(url: str, keyring: str | None) -> Any:
    """The store's storage; ``keyring`` (a folder; "" for none given) opens an encrypted store
    (spec/encryption.md). None: the plaintext protocol (no keyring is looked for)."""
    storage = open_storage(url)
    if keyring:
        from ckptfs.runtime.scopes import keyring_storage

        return keyring_storage(storage, keyring)
    return storage


def render_store(url: str, now: int, keyring: str | None = None) -> dict[str, Any]:
    """Every run and every committed snapshot of the store at ``url`` (and its tombstones,
    when it has any)."""
    repo = Repository(_storage(url, keyring))
    try:
        out: dict[str, Any] = {"config": render_config(repo.config), "runs": {}}
        tombstones = render_tombstones(repo)
        if tombstones:
            out["tombstones"] = tombstones
        for run_id in sorted(repo.run_ids()):
            seqs = repo.seqs(run_id)
            head = repo.head(run_id)
            out["runs"][run_id] = {
                "head": head.seq if head else None,
                "snapshots": [render_snapshot(repo, repo.snapshot_at(run_id, s), now)
                              for s in seqs]}
        return out
    finally:
        repo.storage.close()


def render_ref(url: str, ref: str, now: int, keyring: str | None = None) -> dict[str, Any]:
    """One snapshot, named as ``blake3:<hex>``, ``RUN`` (its head) or ``RUN@SEQ``."""
    repo = Repository(_storage(url, keyring))
    try:
        repo.config
        return render_snapshot(repo, repo.resolve(ref), now)
    finally:
        repo.storage.close()


def symbolic(rendering: Any) -> Any:
    """A store rendering with snapshot ids replaced by ``RUN@SEQ`` and physical layout
    (chunk lists, inline or not) dropped: what any conforming writer must reproduce."""
    names: dict[str, str] = {}
    for run_id, run in rendering.get("runs", {}).items():
        for s in run["snapshots"]:
            names[s["id"]] = f"{run_id}@{s['seq']}"

    def walk(v: Any, key: str = "") -> Any:
        if isinstance(v, dict):
            return {k: walk(x, k) for k, x in v.items() if k not in ("chunks", "inline")}
        if isinstance(v, list):
            return [walk(x) for x in v]
        if key in ("id", "parent", "resumed_from") and isinstance(v, str):
            return names.get(v, "<not a snapshot of this store>")
        return v

    return walk(rendering)


def error_line(e: CkptfsError) -> str:
    return f"error: {e.category}"
