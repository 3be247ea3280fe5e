"""Erase a run (or one snapshot) now: fence, tombstone, records, manifests, unique chunks.

Order (spec/retention.md "Erase"): 1. a retired marker that fences the whole run, so no writer
can commit to it again; 2. the tombstone, state ``erasing`` (readers now get ErasedError);
3. run records (now nothing of the run is visible); 4. every chunk the erased manifests use
that no other retained (or in-flight) snapshot uses, without waiting for the grace period;
5. every manifest of the erased snapshots, committed or not (last, so that a rerun after a
crash still finds the chunks through them); 6. the tombstone again, state ``erased``, with
counts. A crash at any step leaves a store that verifies; running erase again finishes.
"""

from __future__ import annotations

import time

import attrs

from ckptfs.errors import CkptfsError, NotFound
from ckptfs.format.digest import Digest
from ckptfs.format.lifecycle import FENCE_ALL, Retired, Tombstone
from ckptfs.format.names import (
    SNAPSHOTS,
    chunk_path,
    expiry_path,
    record_path,
    snapshot_path,
    tombstone_path,
)
from ckptfs.ops.gc import _chunks, _old, _walk, grace_of
from ckptfs.ops.lease import DEFAULT_TTL_MS, MaintenanceLease
from ckptfs.store.ledgers import LedgerScanner
from ckptfs.store.lifecycle import read_retired, read_tombstone, write_retired
from ckptfs.store.repository import Repository, Snapshot

MAX_REASON = 4096


def erase(repo: Repository, run_id: str, *, reason: str, seq: int | None = None,
          now: int | None = None, lease_ttl_ms: int = DEFAULT_TTL_MS) -> Tombstone:
    """Erase run ``run_id`` (or only its snapshot ``seq``) and return the final tombstone."""
    if not reason.strip() or len(reason) > MAX_REASON:
        raise ValueError(f"erase needs a reason of 1-{MAX_REASON} characters (who asked, why)")
    st = repo.storage
    grace = grace_of(repo)
    with MaintenanceLease(st, ttl_ms=lease_ttl_ms) as lease:
        t0 = int(time.time() * 1000) if now is None else now
        stone = read_tombstone(st, run_id, seq)
        visible = repo.seqs(run_id)
        records = repo.record_seqs(run_id)
        targets = records if seq is None else [s for s in records if s == seq]
        if stone is None and not targets:
            raise NotFound(f"run {run_id!r} has no snapshot {seq if seq else ''} to erase")
        # 1. fence
        old = read_retired(st, run_id)
        kept = () if seq is None else tuple(s for s in visible if s != seq)
        if old is None or not old.fenced or set(old.kept) != set(kept):
            write_retired(st, Retired(run=run_id, through=FENCE_ALL, kept=kept, created=t0))
        # 2. tombstone (what: snapshot ids from the records; reason; when)
        ids: dict[int, Digest] = dict(stone.snapshots) if stone else {}
        for s in targets:
            try:
                ids[s] = repo.record(run_id, s).snapshot
            except CkptfsError:
                pass  # a damaged record: its manifest is still found by the scan below
        if stone is None:
            stone = Tombstone(run=run_id, seq=seq, reason=reason, requested=t0, snapshots=())
        stone = attrs.evolve(stone, snapshots=tuple(sorted(ids.items())))
        st.replace(tombstone_path(run_id, seq), stone.to_bytes())
        # 3. records
        lease.check()
        for s in targets:
            st.delete(record_path(run_id, s))
        # which manifests belong to the erased snapshots, and which chunks others still use
        victims: set[Digest] = set(ids.values())
        protected: set[Digest] = set()
        victim_chunks: set[Digest] = set()
        cutoff_s = (t0 - grace) / 1000
        ledgers = LedgerScanner(repo.objects)
        for other in repo.run_ids():
            for s in repo.seqs(other):
                snap = repo.snapshot_at(other, s)  # unreadable: stop, erase nothing shared
                if snap.digest not in victims:
                    protected |= _chunks(repo, snap, ledgers)
        for path in _walk(st, SNAPSHOTS):
            d = Digest.parse(path.rsplit("/", 1)[-1])
            try:
                m = repo.objects.get_manifest(d)
            except CkptfsError:
                continue
            if m.run == run_id and (seq is None or m.seq == seq):
                victims.add(d)
                victim_chunks |= _chunks(repo, Snapshot(d, m), ledgers, strict=False)
            elif not _old(st, path, cutoff_s):
                protected |= _chunks(repo, Snapshot(d, m), ledgers, strict=False)  # someone's in-flight commit
        # 4. chunks, while the (now invisible) manifests still name them for a rerun
        lease.check()
        deleted = nbytes = 0
        for d in victim_chunks - protected:
            size = st.size(chunk_path(d))
            if size is not None:
                st.delete(chunk_path(d))
                deleted += 1
                nbytes += size
        repo.objects.known.clear()  # this process must upload those chunks again if needed
        # 5. manifests
        manifests_deleted = 0
        for d in victims:
            if st.exists(snapshot_path(d)):
                st.delete(snapshot_path(d))
                manifests_deleted += 1
        if seq is None:
            st.delete(expiry_path(run_id))
        for s in targets:
            st.delete(expiry_path(run_id, s))
        # 6. final tombstone
        stone = Tombstone(run=run_id, seq=seq, reason=stone.reason, requested=stone.requested,
                          snapshots=stone.snapshots, state="erased", completed=t0,
                          manifests_deleted=stone.manifests_deleted + manifests_deleted,
                          chunks_deleted=stone.chunks_deleted + deleted,
                          bytes_deleted=stone.bytes_deleted + nbytes,
                          chunks_kept_shared=len(victim_chunks & protected))
        st.replace(tombstone_path(run_id, seq), stone.to_bytes())
        return stone
