"""Where the bytes are: per run and per snapshot, unique vs shared, expiry, personal data.

``build_index`` reads every retained snapshot's manifest once (one listing per run, record
headers read many at a time: ``ops.runscan``); ``forget`` and ``du`` both work from it. Sizes are stored (framed, compressed) bytes unless named logical.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable

import attrs

from ckptfs.errors import CkptfsError
from ckptfs.format.digest import Digest
from ckptfs.format.models import Captured
from ckptfs.format.names import chunk_path, snapshot_path
from ckptfs.ops.chunks import snapshot_chunks
from ckptfs.ops.runscan import list_run, read_records
from ckptfs.store.ledgers import LedgerScanner
from ckptfs.store.repository import Repository, Snapshot

#: The entry label that marks personal data (any value but "false" counts).
PII_LABEL = "pii"


def is_pii(labels: dict[str, str] | object) -> bool:
    return isinstance(labels, dict) and labels.get(PII_LABEL, "false") not in ("false", "")


@attrs.frozen
class SnapInfo:
    """One retained snapshot as the retention layer sees it."""

    run: str
    seq: int
    id: Digest
    created: int
    boundary: str
    labels: dict[str, str]
    expires: int | None
    chunks: frozenset[Digest]
    logical: int
    pii: tuple[str, ...]


@attrs.define
class StoreIndex:
    """Every retained snapshot, the stored size of every chunk and manifest they use."""

    snaps: list[SnapInfo] = attrs.field(factory=list)
    heads: dict[str, int] = attrs.field(factory=dict)
    chunk_bytes: dict[Digest, int] = attrs.field(factory=dict)
    manifest_bytes: dict[Digest, int] = attrs.field(factory=dict)
    refs: Counter[Digest] = attrs.field(factory=Counter)
    problems: list[str] = attrs.field(factory=list)

    def freed_by(self, gone: Iterable[SnapInfo]) -> tuple[int, int]:
        """(bytes, chunks) that become unreferenced when ``gone`` are forgotten."""
        gone = list(gone)
        drop: Counter[Digest] = Counter()
        for s in gone:
            drop.update(s.chunks)
        chunks = [d for d, n in drop.items() if self.refs[d] == n]
        total = sum(self.chunk_bytes.get(d, 0) for d in chunks)
        total += sum(self.manifest_bytes.get(s.id, 0) for s in gone)
        return total, len(chunks)


def _held_chunks(repo: Repository, snap: Snapshot, ledgers: LedgerScanner,
                 problems: list[str]) -> frozenset[Digest]:
    """Every chunk the snapshot holds: its entries', its effect ledger's and the ledger's
    large results' (``snapshot_chunks``, as gc marks them). A ledger that cannot be read is a
    problem; its result chunks are then left out."""
    try:
        return frozenset(c.digest for _, c in snapshot_chunks(repo, snap, ledgers=ledgers))
    except CkptfsError as e:
        problems.append(f"{snap.run}@{snap.seq}: effect ledger: {e}")
        return frozenset(c.digest for _, c in snapshot_chunks(repo, snap, results=False))


def build_index(repo: Repository, runs: Iterable[str] | None = None,
                now: int | None = None) -> StoreIndex:
    """Read every retained snapshot of ``runs`` (default all); unreadable ones are problems."""
    idx = StoreIndex()
    st = repo.storage
    ledgers = LedgerScanner(repo.objects)
    for run_id in (list(runs) if runs is not None else repo.run_ids()):
        listing = list_run(st, run_id)  # one listing: records, retired range, overrides
        seqs = listing.visible
        if seqs:
            idx.heads[run_id] = seqs[-1]
        for got in read_records(repo, run_id, [(s, listing.records[s]) for s in seqs]):
            seq = got.seq
            try:
                if got.error is not None:
                    raise got.error
                assert got.record is not None
                snap = repo._recorded(got.record)  # the record read above, not read again
                m = snap.manifest
                expires = listing.expiry(st, seq, m.expires)
            except CkptfsError as e:
                idx.problems.append(f"{run_id}@{seq}: {e}")
                continue
            chunks = _held_chunks(repo, snap, ledgers, idx.problems)
            logical = sum(e.size for e in m.entries.values() if isinstance(e, Captured))
            pii = tuple(sorted(n for n, e in m.entries.items() if is_pii(dict(e.labels))))
            idx.snaps.append(SnapInfo(run_id, seq, snap.digest, m.created, m.boundary,
                                      dict(m.labels), expires, chunks, logical, pii))
            idx.refs.update(chunks)
            idx.manifest_bytes[snap.digest] = manifest_stored(repo, snap)
    for d in idx.refs:
        idx.chunk_bytes[d] = chunk_stored(repo, d)
    return idx


def manifest_stored(repo: Repository, snap: Snapshot) -> int:
    """The bytes a snapshot's manifest takes: its v1 object, or (v2) its length in the record."""
    if repo.objects.layout >= 2:
        return len(snap.manifest.to_bytes())
    return repo.storage.size(snapshot_path(snap.digest)) or 0


def chunk_stored(repo: Repository, d: Digest) -> int:
    """The bytes a chunk takes where it is stored: its body in a container (v2, known from the
    records read, no request), else its loose object."""
    loc = repo.objects.locations.get(d) if repo.objects.layout >= 2 else None
    if loc is not None:
        return loc.stored
    return repo.storage.size(chunk_path(d)) or 0


def usage(repo: Repository, runs: Iterable[str] | None = None,
          now: int | None = None) -> dict[str, object]:
    """The ``ckptfs du`` report as plain data."""
    now = int(time.time() * 1000) if now is None else now
    idx = build_index(repo, runs, now)
    by_run: dict[str, list[SnapInfo]] = {}
    for s in idx.snaps:
        by_run.setdefault(s.run, []).append(s)
    run_refs: dict[Digest, set[str]] = {}
    for s in idx.snaps:
        for d in s.chunks:
            run_refs.setdefault(d, set()).add(s.run)
    out_runs = []
    for run_id, snaps in sorted(by_run.items()):
        chunks = set().union(*(s.chunks for s in snaps))
        unique = sum(idx.chunk_bytes[d] for d in chunks if run_refs[d] == {run_id})
        stored = sum(idx.chunk_bytes[d] for d in chunks)
        manifests = sum(idx.manifest_bytes[s.id] for s in snaps)
        out_runs.append({
            "run": run_id, "snapshots": len(snaps), "head": idx.heads.get(run_id),
            "stored_bytes": stored + manifests, "unique_bytes": unique + manifests,
            "shared_bytes": stored - unique, "logical_bytes": sum(s.logical for s in snaps),
            "oldest": min(s.created for s in snaps), "newest": max(s.created for s in snaps),
            "expired": [s.seq for s in snaps if s.expires is not None and s.expires <= now],
            "snapshot_list": [{
                "seq": s.seq, "id": s.id.text, "created": s.created, "boundary": s.boundary,
                "expires": s.expires,
                "expired": s.expires is not None and s.expires <= now,
                "logical_bytes": s.logical,
                "unique_bytes": idx.manifest_bytes[s.id] + sum(
                    idx.chunk_bytes[d] for d in s.chunks if idx.refs[d] == 1),
                "shared_bytes": sum(idx.chunk_bytes[d] for d in s.chunks if idx.refs[d] > 1),
                "pii_entries": list(s.pii),
            } for s in snaps],
        })
    stored_total = sum(idx.chunk_bytes.values()) + sum(idx.manifest_bytes.values())
    logical_total = sum(s.logical for s in idx.snaps)
    pii = [{"run": s.run, "seq": s.seq, "id": s.id.text, "entries": list(s.pii),
            "expires": s.expires} for s in idx.snaps if s.pii]
    return {
        "store": repo.url, "runs": out_runs, "snapshots": len(idx.snaps),
        "chunks": len(idx.chunk_bytes), "stored_bytes": stored_total,
        "logical_bytes": logical_total,
        "dedup_ratio": round(logical_total / stored_total, 3) if stored_total else None,
        "oldest": min((s.created for s in idx.snaps), default=None),
        "expired": sum(1 for s in idx.snaps if s.expires is not None and s.expires <= now),
        "pii": pii, "pii_without_expiry": sum(1 for p in pii if p["expires"] is None),
        "problems": idx.problems,
    }
