"""Garbage collection: drop expired snapshots, then mark and sweep.

Order (spec/retention.md "Deletion order"): run records first (expired snapshots, stray
records), then unreferenced manifests, then unreferenced chunks, then old temp files, so a
crash at any point never leaves a visible snapshot pointing at a missing object. An
unreferenced object younger than the grace period is kept: a writer may have uploaded it for
a commit that has not happened yet (the "Grace rule").
"""

from __future__ import annotations

import time

import attrs

from ckptfs.errors import CkptfsError
from ckptfs.format.digest import Digest
from ckptfs.format.names import CHUNKS, SNAPSHOTS, TMP, record_path
from ckptfs.ops.chunks import snapshot_chunks
from ckptfs.ops.lease import DEFAULT_TTL_MS, MaintenanceLease
from ckptfs.storage.base import Storage
from ckptfs.store.ledgers import LedgerScanner
from ckptfs.store.lifecycle import effective_expiry, read_retired, retire
from ckptfs.store.listing import object_paths
from ckptfs.store.repository import Repository, Snapshot

DEFAULT_GRACE_MS = 3_600_000


def grace_of(repo: Repository) -> int:
    """The store's grace period (setting ``gc_grace_ms``, default one hour)."""
    g = repo.config.settings.get("gc_grace_ms", DEFAULT_GRACE_MS)
    if type(g) is not int or g < 0:
        raise CkptfsError(f"store setting gc_grace_ms must be a non-negative integer, not {g!r}")
    return g


@attrs.define
class GcReport:
    """What one collection removed, kept for their youth, or could not decide."""

    dry_run: bool
    grace_ms: int
    expired: list[str] = attrs.field(factory=list)
    stray_records: int = 0
    manifests_deleted: int = 0
    chunks_deleted: int = 0
    tmp_deleted: int = 0
    bytes_freed: int = 0
    young_kept: int = 0
    problems: list[str] = attrs.field(factory=list)

    def to_json(self) -> dict[str, object]:
        return attrs.asdict(self)


def _old(storage: Storage, path: str, cutoff_s: float) -> bool:
    """True when ``path`` was last written before the cutoff; unknown ages count as young."""
    t = storage.mtime(path)
    return t is not None and t < cutoff_s


def _chunks(repo: Repository, snap: Snapshot, ledgers: LedgerScanner, *, strict: bool = True
            ) -> set[Digest]:
    """Entries', ledger's and ledger results' chunks. The ledger is read (through ``ledgers``)
    for the results; when it cannot be, ``strict`` raises and otherwise they are left out."""
    try:
        return {c.digest for _, c in snapshot_chunks(repo, snap, ledgers=ledgers)}
    except CkptfsError:
        if strict:
            raise
        return {c.digest for _, c in snapshot_chunks(repo, snap, results=False)}


def gc(repo: Repository, *, grace_ms: int | None = None, dry_run: bool = False,
       now: int | None = None, lease_ttl_ms: int = DEFAULT_TTL_MS) -> GcReport:
    """Collect the store's garbage; see the module docstring for the order and the rules."""
    st = repo.storage
    grace = grace_of(repo) if grace_ms is None else grace_ms
    report = GcReport(dry_run=dry_run, grace_ms=grace)
    with MaintenanceLease(st, ttl_ms=lease_ttl_ms) as lease:
        t0 = int(time.time() * 1000) if now is None else now
        cutoff_s = (t0 - grace) / 1000
        # 1. records: strays in retired ranges, then expired snapshots (a head only with its run)
        for run_id in repo.run_ids():
            lease.check()
            retired = read_retired(st, run_id)
            visible = repo.seqs(run_id)
            strays = [s for s in repo.record_seqs(run_id) if s not in visible]
            report.stray_records += len(strays)
            expired = set()
            for seq in visible:
                try:
                    m = repo.snapshot_at(run_id, seq).manifest
                    exp = effective_expiry(st, run_id, seq, m.expires)
                except CkptfsError:
                    continue  # unreadable: verify reports it; never collected on a guess
                if exp is not None and exp <= t0:
                    expired.add(seq)
            if visible and expired and expired != set(visible):
                expired.discard(visible[-1])
            report.expired += [f"{run_id}@{s}" for s in sorted(expired)]
            if dry_run:
                continue
            for s in strays if retired is not None else []:
                st.delete(record_path(run_id, s))
            retire(st, run_id, visible, expired, t0)
        # 2. mark: everything the retained snapshots use
        lease.check()
        manifests: set[Digest] = set()
        chunks: set[Digest] = set()
        sound = True
        ledgers = LedgerScanner(repo.objects)
        for run_id in repo.run_ids():
            for seq in repo.seqs(run_id):
                if dry_run and f"{run_id}@{seq}" in report.expired:
                    continue
                try:
                    snap = repo.snapshot_at(run_id, seq)
                except CkptfsError as e:
                    report.problems.append(f"{run_id}@{seq}: {e}")
                    sound = False
                    continue
                manifests.add(snap.digest)
                try:
                    chunks |= _chunks(repo, snap, ledgers)
                except CkptfsError as e:  # e.g. its ledger cannot be read
                    report.problems.append(f"{run_id}@{seq}: {e}")
                    sound = False
        # 3. manifests nobody commits to; young ones may be in flight, so their chunks stay
        lease.check()
        for path, d in object_paths(st, SNAPSHOTS):  # names that are no object's: ignored
            if d in manifests:
                continue
            if not _old(st, path, cutoff_s):
                report.young_kept += 1
                try:
                    chunks |= _chunks(repo, Snapshot(d, repo.objects.get_manifest(d)), ledgers)
                except CkptfsError as e:
                    report.problems.append(f"young manifest {d}: {e}")
                    sound = False
                continue
            report.manifests_deleted += 1
            report.bytes_freed += st.size(path) or 0
            if not dry_run:
                st.delete(path)
        # 4. chunks (only when every retained manifest could be read: never sweep on a guess)
        lease.check()
        if not sound:
            report.problems.append("chunks not swept: some manifests could not be read")
        else:
            for path, d in object_paths(st, CHUNKS):
                if d in chunks:
                    continue
                if not _old(st, path, cutoff_s):
                    report.young_kept += 1
                    continue
                report.chunks_deleted += 1
                report.bytes_freed += st.size(path) or 0
                if not dry_run:
                    st.delete(path)
        # 5. temp files abandoned by crashed writers
        for name in st.list(TMP):
            path = f"{TMP}/{name}"
            if _old(st, path, cutoff_s):
                report.tmp_deleted += 1
                if not dry_run:
                    st.delete(path)
    return report
