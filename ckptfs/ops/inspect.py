"""Read-only views of a store for people and scripts: runs, lineage, manifests, entries, diffs.

Everything here returns plain JSON-able data (the ``--json`` output of the CLI, whose keys are
documented in docs/reference/json.md); the CLI only formats it. Nothing here writes to the store.
"""

from __future__ import annotations

import base64
import math
import time
from collections.abc import Iterator
from typing import Any

from ckptfs.errors import CkptfsError, ExpiredError, NotFound
from ckptfs.format.ledger import Effect, Ledger, LedgerRef
from ckptfs.format.models import Captured, Entry, Manifest, Reference
from ckptfs.format.names import check_run_id
from ckptfs.format.typed import is_tagged
from ckptfs.ops.lg_values import LgObject
from ckptfs.ops.repair import repaired_seqs
from ckptfs.store.blobs import stored_blob
from ckptfs.store.entry_reads import decode_value, read_content

TYPED_MARKER = "$typed"
from ckptfs.store.lifecycle import read_tombstone
from ckptfs.store.repository import Repository, Snapshot, erased_error

#: JSON marker objects for CBOR values JSON cannot hold (documented in docs/reference/json.md).
BYTES_MARKER = "$bytes"
FLOAT_MARKER = "$float"
INT_MARKER = "$int"
#: integers longer than this many bits are shown as ``{"$int": "0x..."}``: their decimal text
#: would pass Python's 4300-digit str() limit, and decimal conversion is quadratic in the length
#: (a hostile store could hold one of megabytes); hex is exact and linear
MAX_DECIMAL_BITS = 14_000


def state_bytes(m: Manifest) -> int:
    """Bytes of captured content a snapshot holds (references count 0)."""
    return sum(e.size for e in m.entries.values() if isinstance(e, Captured))


def snapshot_json(s: Snapshot) -> dict[str, Any]:
    """A snapshot's place in history, without its entries."""
    m = s.manifest
    return {"snapshot": s.id, "run": m.run, "seq": m.seq, "boundary": m.boundary,
            "created": m.created, "attempt": m.attempt, "schema": str(m.schema),
            "parent": s.parent,
            "resumed_from": s.resumed_from, "labels": dict(m.labels), "expires": m.expires,
            "entry_count": len(m.entries), "state_bytes": state_bytes(m)}


# -- ls ---------------------------------------------------------------------------------------
def list_runs(repo: Repository, *, now_ms: int | None = None) -> list[dict[str, Any]]:
    """One summary per run: head, length, last boundary, age, state size and labels at the
    head."""
    repo.config  # NotAStore when the URL holds no store
    now = int(time.time() * 1000) if now_ms is None else now_ms
    out = []
    for run_id in repo.run_ids():
        seqs = repo.seqs(run_id)
        row: dict[str, Any] = {"run": run_id, "snapshots": len(seqs),
                               "head_seq": seqs[-1] if seqs else None, "head": None,
                               "boundary": None, "created": None, "age_seconds": None,
                               "attempt": None, "schema": None, "state_bytes": None,
                               "labels": {}, "error": None}
        if seqs:
            try:
                s = repo.snapshot_at(run_id, seqs[-1])
            except CkptfsError as e:
                row["error"] = f"{e.category}: {e}"
            else:
                m = s.manifest
                row.update(head=s.id, boundary=m.boundary, created=m.created,
                           age_seconds=max(0, (now - m.created) // 1000), attempt=m.attempt,
                           schema=str(m.schema), state_bytes=state_bytes(m),
                           labels=dict(m.labels))
        row["status"], row["status_detail"] = _run_status(repo, run_id, bool(seqs))
        if row["error"] is not None and row["status"] == "live":
            row["status"] = "damaged"  # its head cannot be read: ckptfs repair
        out.append(row)
    return out


def _run_status(repo: Repository, run_id: str, has_snapshots: bool) -> tuple[str, str | None]:
    """``live``; ``erased`` (a whole-run tombstone: when and why); ``erasing`` (its erase has
    not finished: run it again); or ``forgotten`` (no
    snapshot left: every one was forgotten or erased one by one)."""
    try:
        stone = read_tombstone(repo.storage, run_id)
    except CkptfsError as e:  # an unreadable tombstone: say so, do not hide the run
        return ("erased" if not has_snapshots else "live"), f"tombstone: {e}"
    if stone is not None:  # "erasing": the erase stopped before its last step
        return ("erased" if stone.state == "erased" else "erasing"), str(erased_error(stone))
    if not has_snapshots:
        return "forgotten", "every snapshot was forgotten (ckptfs gc frees their data)"
    return "live", None


# -- log --------------------------------------------------------------------------------------
def run_log(repo: Repository, run_id: str, *, allow_expired: bool = False) -> dict[str, Any]:
    """A run's history: every snapshot with its parent, resume and attempt, plus where the run
    was forked from and which other runs fork from it. The ledger records of expired snapshots
    are state data: withheld (``effects`` null) unless ``allow_expired``. ``forgotten_before``
    counts the snapshots forgotten (or erased) just before each one: its ``effects`` are the
    records appended since the previous retained snapshot, theirs included."""
    repo.config
    seqs = repo.seqs(run_id)
    if not seqs:
        raise NotFound(f"no run {run_id!r} in {repo.url}; 'ckptfs ls {repo.url}' lists the runs")
    snaps: list[dict[str, Any]] = []
    by_id: dict[str, dict[str, Any]] = {}
    problems: list[str] = []
    loaded: list[Snapshot] = []
    damaged: dict[int, str] = {}
    for seq in seqs:
        try:
            s = repo.snapshot_at(run_id, seq)
        except CkptfsError as e:
            damaged[seq] = f"{e.category}: {e}"
            continue
        row = snapshot_json(s)
        row["repaired"] = list(repaired_seqs(s.manifest))
        row["forks"] = []
        snaps.append(row)
        by_id[s.id] = row
        loaded.append(s)
    for row, effects in zip(snaps, _record_rows(repo, loaded, allow_expired)):
        row["effects"] = effects
    prev_seq = 0
    for row in snaps:  # forgotten (or erased) snapshots just before this one (not unreadable)
        row["forgotten_before"] = row["seq"] - prev_seq - 1 - sum(
            prev_seq < d < row["seq"] for d in damaged)
        prev_seq = row["seq"]
    set_aside = {d for row in snaps for d in row["repaired"]}
    repaired = [f"@{seq}: {why}; set aside by 'ckptfs repair' and kept as evidence"
                for seq, why in damaged.items() if seq in set_aside]
    for seq, why in damaged.items():
        if seq in set_aside:
            continue
        advice = ""
        if seq == seqs[-1]:
            advice = (f". It is the run's head, so the run cannot be resumed: 'ckptfs repair "
                      f"{repo.url} {run_id}' makes its last good snapshot the head again")
        problems.append(f"@{seq}: {why}{advice}")
    forked_from = None
    if snaps and snaps[0]["parent"] and snaps[0]["parent"] not in by_id:
        forked_from = _origin(repo, snaps[0]["parent"])
        if forked_from["run"] is None and snaps[0]["forgotten_before"]:
            # the parent is one of this run's own forgotten snapshots, not another run's: a
            # fork's first snapshot is its @1, and the history before the oldest kept is gone
            forked_from = None
    for other in repo.run_ids():
        if other == run_id:
            continue
        first = _first_snapshot(repo, other)
        if first is not None and first.parent in by_id:
            by_id[first.parent]["forks"].append({"run": other, "seq": first.seq,
                                                 "snapshot": first.id})
    return {"run": run_id, "schema": snaps[-1]["schema"] if snaps else None,
            "forked_from": forked_from,
            "attempts": max((r["attempt"] for r in snaps), default=0),
            "snapshots": snaps, "problems": problems, "repaired": repaired,
            "head_damaged": seqs[-1] in damaged and seqs[-1] not in set_aside}


def _origin(repo: Repository, snapshot_id: str) -> dict[str, Any]:
    """Where a parent snapshot lives, or only its id when this store does not hold it."""
    try:
        s = repo.resolve(snapshot_id)
    except CkptfsError:
        return {"run": None, "seq": None, "snapshot": snapshot_id}
    return {"run": s.run, "seq": s.seq, "snapshot": s.id}


def _first_snapshot(repo: Repository, run_id: str) -> Snapshot | None:
    seqs = repo.seqs(run_id)
    if not seqs:
        return None
    try:
        return repo.snapshot_at(run_id, seqs[0])
    except CkptfsError:
        return None


def _ledger(repo: Repository, s: Snapshot, allow_expired: bool) -> Ledger:
    from ckptfs.runtime.store import Store

    return Store(repo.storage).ledger(s, allow_expired=allow_expired)


def _ledger_count(m: Manifest) -> int:
    return LedgerRef.from_cbor(m.ledger).count if m.ledger is not None else 0


def effect_json(e: Effect, now: int) -> dict[str, Any]:
    """One folded effect or approval; ``in_doubt``: issued, outcome never recorded;
    ``running``: in doubt but its lease has not run out at ``now`` (ms), so the call may be
    under way and no other process may reconcile or re-issue it yet (spec/ledger.md 4.1)."""
    out: dict[str, Any] = to_json_value(e.to_json())
    out.update(in_doubt=e.in_doubt, running=e.running(now), pending=e.pending)
    return out


def run_effects(repo: Repository, run_id: str, *, allow_expired: bool = False) -> dict[str, Any]:
    """The effect ledger at a run's head, folded by key, in-doubt effects flagged (ExpiredError
    when the head expired, unless ``allow_expired``)."""
    repo.config
    s = repo.resolve(check_run_id(run_id))
    ledger = _ledger(repo, s, allow_expired)
    now = int(time.time() * 1000)
    effects = [effect_json(e, now) for e in ledger.effects.values()]
    return {"run": run_id, "head_seq": s.seq, "head": s.id, "records": len(ledger),
            "in_doubt": sum(e["in_doubt"] for e in effects),
            "running": sum(e["running"] for e in effects),
            "pending": sum(e["pending"] for e in effects), "effects": effects}


def _record_rows(repo: Repository, snaps: list[Snapshot], allow_expired: bool
                 ) -> list[list[dict[str, Any]] | None]:
    """The ledger records each snapshot appended (the ledger of the newest snapshot shown, cut
    by each count); None for an expired snapshot unless ``allow_expired``."""
    shown = [allow_expired or not _expired(repo, s) for s in snaps]
    source = next((s for s, ok in zip(snaps[::-1], shown[::-1]) if ok), None)
    if source is None or source.manifest.ledger is None:
        return [[] if ok else None for ok in shown]
    ledger = _ledger(repo, source, allow_expired=True)  # expiry checked just above
    rows: list[list[dict[str, Any]] | None] = []
    prev = 0
    for s, ok in zip(snaps, shown):
        n = _ledger_count(s.manifest)
        rows.append([{"key": r.key, "kind": r.kind, "name": r.name, "status": r.status,
                      "at": r.at, "attempt": r.attempt,
                      "in_doubt": ledger.effects[r.key].in_doubt and r.status == "intended"}
                     for r in ledger.records[prev:n]] if ok else None)
        prev = n
    return rows


def _expired(repo: Repository, s: Snapshot) -> bool:
    try:
        repo.check_not_expired(s)
    except ExpiredError:
        return True
    return False


# -- show -------------------------------------------------------------------------------------
def entry_json(e: Entry) -> dict[str, Any]:
    if isinstance(e, Reference):
        return {"kind": "ref", "uri": e.uri, "digest": e.digest.text if e.digest else None,
                "size": e.size, "expires": e.expires, "labels": dict(e.labels)}
    return {"kind": e.kind, "type": e.type, "size": e.size, "digest": e.digest.text,
            "encoding": e.encoding, "labels": dict(e.labels), "inline": e.inline is not None,
            "chunks": [[c.digest.text, c.size] for c in e.chunks]}


def manifest_json(s: Snapshot) -> dict[str, Any]:
    """The whole manifest, digests as ``blake3:<hex>`` text."""
    m = s.manifest
    out = snapshot_json(s)
    out.update(writer=m.writer,
               entries={k: entry_json(e) for k, e in sorted(m.entries.items())},
               ledger=to_json_value(dict(m.ledger)) if m.ledger else None,
               required=list(m.required), extra=to_json_value(dict(m.extra)))
    return out


# -- cat --------------------------------------------------------------------------------------
def entry(s: Snapshot, name: str) -> Entry:
    try:
        return s.manifest.entries[name]
    except KeyError:
        names = ", ".join(sorted(s.manifest.entries)) or "(none)"
        raise NotFound(f"snapshot {s.digest.short} (run {s.run!r} seq {s.seq}) has no entry "
                       f"{name!r}; it has: {names}") from None


def _captured(repo: Repository, s: Snapshot, name: str, allow_expired: bool
              ) -> tuple[Captured, str]:
    """A captured entry of a snapshot whose state may be served (not expired, unless allowed)."""
    if not allow_expired:
        repo.check_not_expired(s)
    e = entry(s, name)
    if not isinstance(e, Captured):
        raise NotFound(f"entry {name!r} is a reference to {e.uri}, not captured data")
    return e, f"snapshot {s.digest.short} (run {s.run!r} seq {s.seq}) entry {name!r}"


def read_value(repo: Repository, s: Snapshot, name: str, *, allow_expired: bool = False) -> Any:
    """The decoded value of a captured ``value`` entry (a blob's bytes), every chunk verified;
    ExpiredError when the snapshot expired, unless ``allow_expired``."""
    e, where = _captured(repo, s, name, allow_expired)
    content = read_content(repo.objects, e, where=where)
    return decode_value(e, content, where=where) if e.kind == "value" else content


def iter_blob(repo: Repository, s: Snapshot, name: str, *,
              allow_expired: bool = False) -> Iterator[bytes]:
    """A blob entry's bytes chunk by chunk, each verified, never all in memory; ExpiredError
    (before any byte) when the snapshot expired, unless ``allow_expired``."""
    e, where = _captured(repo, s, name, allow_expired)
    return stored_blob(repo.objects, e, where=where).iter_bytes()


def to_json_value(v: Any) -> Any:
    """A decoded CBOR value as JSON: bytes become ``{"$bytes": base64}``, non-finite floats
    ``{"$float": "NaN"}``, integers of more than MAX_DECIMAL_BITS bits ``{"$int": "0x..."}``
    (``-0x...`` when negative), typed values ``{"$typed": [name, payload]}``; a map key that
    starts with ``$`` gets one more ``$`` in front."""
    if type(v) is int and v.bit_length() > MAX_DECIMAL_BITS:
        return {INT_MARKER: hex(v)}
    if isinstance(v, bytes):
        return {BYTES_MARKER: base64.b64encode(v).decode("ascii")}
    if isinstance(v, float) and not math.isfinite(v):
        return {FLOAT_MARKER: "NaN" if math.isnan(v) else ("Infinity" if v > 0 else "-Infinity")}
    if isinstance(v, list):
        return [to_json_value(x) for x in v]
    if isinstance(v, dict):
        return {("$" + k if k.startswith("$") else k): to_json_value(x) for k, x in v.items()}
    if is_tagged(v):  # a typed value (spec/format.md 18): its type name and payload
        return {TYPED_MARKER: [v.value[0], to_json_value(v.value[1])]}
    if isinstance(v, LgObject):  # a LangGraph serialized object (ckptfs cat)
        return v.to_json(to_json_value)
    return v


# -- diff -------------------------------------------------------------------------------------
def diff(a: Snapshot, b: Snapshot) -> dict[str, Any]:
    """What changed from ``a`` to ``b``: entries added, removed and changed; chunks shared; the
    bytes of ``b``'s chunks that ``a`` does not hold."""
    ea, eb = a.manifest.entries, b.manifest.entries
    changed = []
    for name in sorted(set(ea) & set(eb)):
        x, y = ea[name], eb[name]
        if entry_json(x) != entry_json(y):
            changed.append({"name": name, "kind": y.kind, "size_a": x.size,
                            "size_b": y.size})
    ca, cb = _chunks(a.manifest), _chunks(b.manifest)
    return {"a": snapshot_json(a), "b": snapshot_json(b),
            "added": [{"name": n, "kind": eb[n].kind, "size": eb[n].size}
                      for n in sorted(set(eb) - set(ea))],
            "removed": [{"name": n, "kind": ea[n].kind, "size": ea[n].size}
                        for n in sorted(set(ea) - set(eb))],
            "changed": changed,
            "unchanged": len(set(ea) & set(eb)) - len(changed),
            "chunks_a": len(ca), "chunks_b": len(cb), "chunks_shared": len(set(ca) & set(cb)),
            "bytes_new": sum(size for d, size in cb.items() if d not in ca)}


def _chunks(m: Manifest) -> dict[str, int]:
    return {c.digest.text: c.size for e in m.entries.values() if isinstance(e, Captured)
            for c in e.chunks}
