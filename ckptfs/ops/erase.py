"""Erase a run (or one snapshot) now: fence, tombstone, records, manifests, unique chunks.

Order (spec/retention.md "Erase"): 1. a retired marker that fences the whole run, so no writer
can commit to it again; 2. the tombstone, state ``erasing`` (readers now get ErasedError);
3. run records and 4. every chunk the erased manifests use that no other retained (or
in-flight) snapshot uses, without waiting for the grace period: every body no retained
snapshot uses, in every container erase rewrites (the erased records among them), and the
packs of commits that did not land (``erase_containers``), then the loose chunks of a store
upgraded from version 1; 5. the loose manifests of the erased snapshots (such a store's),
committed or not (last, so that a rerun after a
crash still finds the chunks through them); 6. the tombstone again, state ``erased``, with
counts. A crash at any step leaves a store that verifies; running erase again finishes.

Every decision after step 1 is taken from the store as it is once the fence is there (a writer
whose commit returned before the fence landed is kept, or erased with the whole run), and only
on what is proven to be the erased snapshots': a manifest is theirs only if its own run and seq
say so, and names under snapshots/ that are no object's are ignored (store/listing.py).
"""

from __future__ import annotations

import time
from collections.abc import Iterable

import attrs

from ckptfs import observe
from ckptfs.errors import CkptfsError, InvalidArgument, MissingObject, NotFound
from ckptfs.format import containers as ct
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
from ckptfs.format.models import Manifest, RunRecord
from ckptfs.format.names import head_hint_path
from ckptfs.store import header_bases
from ckptfs.ops.erase_containers import Unresolved, erase_containers
from ckptfs.ops.gc import _chunks, _old, grace_of
from ckptfs.ops.lease import DEFAULT_TTL_MS, MaintenanceLease
from ckptfs.ops.locator_holes import V1_OBJECTS
from ckptfs.store.ledgers import LedgerScanner
from ckptfs.store.lifecycle import read_retired, read_tombstone, write_retired
from ckptfs.store.listing import object_paths
from ckptfs.store.repository import Repository, Snapshot

MAX_REASON = 4096


@attrs.frozen
class EraseReport:
    """What an erase did: its final tombstone, and the packs it kept although no retained
    snapshot uses them (younger than the grace period, no record names them: a commit in
    flight or one that crashed, of any run; ``erase_containers.Unresolved``). An erase or gc
    run once they are older than the grace period removes them."""

    tombstone: Tombstone
    unresolved: tuple[Unresolved, ...] = ()
    #: when the unresolved packs become removable (ms since the epoch; None: there are none)
    removable_at: int | None = None
    #: the files erase removed from the store that had other names outside it (hard links):
    #: their bytes, the erased content among them, survive under those names
    linked: tuple[str, ...] = ()

    def to_json(self) -> dict[str, object]:
        return {**self.tombstone.to_json(),
                "unresolved": [u.to_json() for u in self.unresolved],
                "unresolved_removable_at": self.removable_at,
                "linked_elsewhere": list(self.linked)}


def erase(repo: Repository, run_id: str, *, reason: str, seq: int | None = None,
          now: int | None = None, lease_ttl_ms: int = DEFAULT_TTL_MS,
          keep: Iterable[int] = ()) -> Tombstone:
    """Erase run ``run_id`` (or only its snapshot ``seq``) and return the final tombstone.
    ``keep`` (one snapshot only): seqs the fence keeps besides the run's visible ones, although
    the store holds no record there yet: those a copy is about to bring (spec/retention.md 9,
    "Erase fences"); the fence still refuses a writer at them (section 3, writer rule)."""
    return erase_run(repo, run_id, reason=reason, seq=seq, now=now,
                     lease_ttl_ms=lease_ttl_ms, keep=keep).tombstone


def erase_run(repo: Repository, run_id: str, *, reason: str, seq: int | None = None,
              now: int | None = None, lease_ttl_ms: int = DEFAULT_TTL_MS,
              keep: Iterable[int] = ()) -> EraseReport:
    """``erase``, reporting also the packs it could not attribute (``EraseReport``). On an
    encrypted store, erasing a whole run that has a key scope of its own then destroys that
    key (spec/encryption.md 7): copies made before can no longer open the run either."""
    report = _erase_run(repo, run_id, reason=reason, seq=seq, now=now,
                        lease_ttl_ms=lease_ttl_ms, keep=keep)
    if seq is None:
        from ckptfs.ops.erase_scope import erase_run_scope

        erase_run_scope(repo.storage, run_id)
    return report


def _erase_run(repo: Repository, run_id: str, *, reason: str, seq: int | None = None,
               now: int | None = None, lease_ttl_ms: int = DEFAULT_TTL_MS,
               keep: Iterable[int] = ()) -> EraseReport:
    if not reason.strip() or len(reason) > MAX_REASON:
        raise ValueError(f"erase needs a reason of 1-{MAX_REASON} characters (who asked, why)")
    keeps = frozenset(keep)
    if keeps and (seq is None or seq in keeps):
        raise ValueError("erase keeps other seqs only when it erases one snapshot, not that one")
    t0_ns = observe.now_ns()
    st = repo.storage
    repo.check_writable()  # a version 1 store is upgraded first
    grace = grace_of(repo)
    with MaintenanceLease(st, ttl_ms=lease_ttl_ms, config=repo.config) as lease:
        t0 = int(time.time() * 1000) if now is None else now
        stone = read_tombstone(st, run_id, seq)
        had = repo.record_seqs(run_id)
        if stone is None and not (had if seq is None else seq in had):
            raise NotFound(f"run {run_id!r} has no snapshot to erase" if seq is None else
                           f"run {run_id!r} has no snapshot {seq} to erase")
        if seq is not None and stone is None:
            _refuse_a_base(repo, run_id, seq)
        # 1. fence; everything below is decided from what the store holds once it is there
        _fence(repo, run_id, seq, t0, keeps)
        records = repo.record_seqs(run_id)
        targets = records if seq is None else [s for s in records if s == seq]
        # which manifests are the erased snapshots' (their own run and seq say so), and which
        # chunks something else still uses
        victims, victim_chunks, protected = _scan(repo, run_id, seq, (t0 - grace) / 1000)
        # 2. tombstone (what: the erased snapshot ids; reason; when)
        ids: dict[int, Digest] = dict(stone.snapshots) if stone else {}
        target_chunks: set[Digest] = set()
        for s in targets:
            d = _owned_id(repo, run_id, s, target_chunks)
            if d is not None:
                ids[s] = d
                victims.add(d)
        if stone is None:
            stone = Tombstone(run=run_id, seq=seq, reason=reason, requested=t0, snapshots=())
        stone = attrs.evolve(stone, snapshots=tuple(sorted(ids.items())))
        st.replace(tombstone_path(run_id, seq), stone.to_bytes())
        # 3. records: they hold bodies, deleted with the containers below
        lease.check()
        protected |= _retained_chunks(repo, run_id, set(targets), victims)
        # 4. chunks, while the (now invisible) manifests still name them for a rerun
        lease.check()
        deleted = nbytes = 0
        unresolved: tuple[Unresolved, ...] = ()
        # files with other names (hard links from outside: local disk): deleting the store's
        # name leaves the bytes there, which the report must say (one walk, none on buckets)
        links = st.hard_linked()
        linked = [record_path(run_id, s) for s in targets if record_path(run_id, s) in links]
        # records and packs holding the erased bodies, at once
        victim_chunks |= target_chunks
        gone = victim_chunks - protected
        n = erase_containers(repo, run_id, targets, gone, protected,
                             (t0 - grace) / 1000, lease.check, links)
        deleted, nbytes, unresolved = n.bodies, n.bytes, n.unresolved
        linked += n.linked
        for d in (victim_chunks - protected) if loose_objects(repo) else ():
            size = st.size(chunk_path(d))
            if size is not None:
                st.delete(chunk_path(d))
                deleted += 1
                nbytes += size
                if chunk_path(d) in links:
                    linked.append(chunk_path(d))
        repo.objects.known.clear()  # this process must upload those chunks again if needed
        # (locations stay: what erase moved is found through its forwards, and what it deleted
        # is deleted everywhere)
        # 5. manifests
        manifests_deleted = 0
        for d in victims if loose_objects(repo) else ():
            if st.exists(snapshot_path(d)):
                st.delete(snapshot_path(d))
                manifests_deleted += 1
        if seq is None:
            st.delete(expiry_path(run_id))
            st.delete(head_hint_path(run_id))
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
        at = [int(u.written * 1000) + grace for u in unresolved if u.written is not None]
        observe.maintenance("erase", t0_ns, run=run_id, seq=-1 if seq is None else seq,
                            snapshots=len(targets), bytes_deleted=nbytes)  # never the reason
        return EraseReport(stone, unresolved,
                           (max(at) if at else t0 + grace) if unresolved else None,
                           tuple(sorted(set(linked))))


def _refuse_a_base(repo: Repository, run_id: str, seq: int) -> None:
    """Refuse to erase one snapshot whose record is the header base of a visible record
    (spec/v2.md 9.1, ``delta-headers``): deleting it would leave that record undecodable, and
    its header holds the erased snapshot's manifest, so it cannot be kept either."""
    if not header_bases.allowed(repo.storage):
        return
    above = [s for s in repo.seqs(run_id) if s > seq]
    base = header_bases.bases(repo.storage, run_id, above)

    def uses(s: int) -> bool:
        for _ in range(ct.MAX_BASE_DEPTH + 1):
            b = base.get(s)
            if b is None or b < seq:
                return False
            if b == seq:
                return True
            s = b
        return False

    users = [s for s in above if uses(s)]
    if users:
        raise InvalidArgument(
            f"run {run_id!r}: snapshot {seq} cannot be erased alone: the records of snapshots "
            f"{users} are stored against its record (store feature 'delta-headers') and could "
            "no longer be read. Erase those snapshots first (newest first), or the whole run; "
            "nothing was changed")


def loose_objects(repo: Repository) -> bool:
    """Whether the store may hold v1 loose chunks and manifests: a store upgraded in place
    from version 1 (optional feature ``v1-objects``, spec/v2.md)."""
    return V1_OBJECTS in repo.config.optional


def _fence(repo: Repository, run_id: str, seq: int | None, t0: int,
           keep: frozenset[int] = frozenset()) -> None:
    """Close the run to writers, keeping every snapshot but the erased one (none for a whole
    run), and the seqs ``keep`` (a copy's, about to land: ``erase``). A writer whose commit returned before the fence landed has its record in the store
    by then (it creates the record before it checks for a fence), so the records are listed
    again once the fence is there and the late ones are kept too; a writer that sees the fence
    withdraws its record itself. After that listing no commit can land."""
    st = repo.storage
    old = read_retired(st, run_id)
    visible = repo.seqs(run_id)
    kept = () if seq is None else tuple(sorted({s for s in visible if s != seq} | keep))
    ids = old.ids if old else ()  # what the run's earlier forgets proved (retention.md 3)
    if old is None or not old.fenced or set(old.kept) != set(kept):
        write_retired(st, Retired(run=run_id, through=FENCE_ALL, kept=kept, created=t0)
                      .with_ids(ids))
    if seq is None:
        return
    late = [s for s in repo.record_seqs(run_id)
            if s != seq and s not in kept and (old is None or old.visible(s))]
    if late:
        write_retired(st, Retired(run=run_id, through=FENCE_ALL, kept=tuple(sorted(
            (*kept, *late))), created=t0).with_ids(ids))


def _owns(m: Manifest, run_id: str, seq: int | None) -> bool:
    return m.run == run_id and (seq is None or m.seq == seq)


def _owned_id(repo: Repository, run_id: str, s: int, chunks: set[Digest] | None = None
              ) -> Digest | None:
    """The snapshot id the record ``run_id@s`` names, unless that manifest is another
    snapshot's (its ``run``/``seq`` are not the record's: a forged or misplaced record, whose
    manifest erase must not touch). A missing or unreadable manifest serves nobody: its id is
    kept (the erase removes what is left of it)."""
    try:
        rec = repo.record(run_id, s)
    except CkptfsError:
        return None  # a damaged record: its manifest is still found by the scan
    try:  # by its digest alone: a record's wrong size must not make a sound manifest look damaged
        m = _manifest(repo, rec)
    except CkptfsError:
        return rec.snapshot
    if not _owns(m, run_id, s):
        return None
    if chunks is not None:
        chunks |= _chunks(repo, Snapshot(rec.snapshot, m), LedgerScanner(repo.objects),
                          strict=False)
    return rec.snapshot


def _manifest(repo: Repository, rec: RunRecord) -> Manifest:
    """The manifest a record names: carried by a v2 record, else the v1 manifest object."""
    if rec.manifest is not None:
        return Manifest.from_bytes(rec.manifest, what=f"snapshot {rec.snapshot}")
    return repo.objects.get_manifest(rec.snapshot)


def _scan(repo: Repository, run_id: str, seq: int | None, cutoff_s: float
          ) -> tuple[set[Digest], set[Digest], set[Digest]]:
    """One pass over ``snapshots/``: the erased snapshots' manifests (any manifest whose own
    ``run`` and ``seq`` match, committed or not) and their chunks; and the chunks of other
    manifests younger than the grace period (someone's in-flight commit). Names that are no
    object's are ignored (format.md 3.1), as are manifests that cannot be read."""
    st = repo.storage
    victims: set[Digest] = set()
    victim_chunks: set[Digest] = set()
    protected: set[Digest] = set()
    ledgers = LedgerScanner(repo.objects)
    for path, d in object_paths(st, SNAPSHOTS):
        try:
            m = repo.objects.get_manifest(d)
        except CkptfsError:
            continue
        if _owns(m, run_id, seq):
            victims.add(d)
            victim_chunks |= _chunks(repo, Snapshot(d, m), ledgers, strict=False)
        elif not _old(st, path, cutoff_s):
            protected |= _chunks(repo, Snapshot(d, m), ledgers, strict=False)
    return victims, victim_chunks, protected


def _retained_chunks(repo: Repository, run_id: str, erased: set[int], victims: set[Digest]
                     ) -> set[Digest]:
    """Chunks of every visible snapshot not erased, listed after the fence (so commits that
    returned during the erase are in). A record that vanished meanwhile (withdrawn by a writer
    that saw the fence) needs nothing; a manifest that is missing protects nothing; anything
    unreadable stops the erase before a chunk is deleted (it might use any of them)."""
    out: set[Digest] = set()
    ledgers = LedgerScanner(repo.objects)
    for other in repo.run_ids():
        for s in repo.seqs(other):
            if other == run_id and s in erased:
                continue
            try:
                rec = repo.record(other, s)
            except NotFound:
                continue
            if rec.snapshot in victims:
                continue  # a record naming an erased manifest: readers refuse it already
            try:  # by its digest alone, as above
                m = _manifest(repo, rec)
            except MissingObject:
                continue
            out |= _chunks(repo, Snapshot(rec.snapshot, m), ledgers)
    return out
