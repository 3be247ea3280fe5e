"""Garbage collection: drop expired snapshots, then mark and sweep.

Order (spec/retention.md "Deletion order"): run records first (expired snapshots, stray
records), then unreferenced manifests, then unreferenced chunks, then old temp files, so a
crash at any point never leaves a visible snapshot pointing at a missing object. An
unreferenced object younger than the grace period is kept: a writer may have uploaded it for
a commit that has not happened yet (the "Grace rule"). A mark that could not read every
retained snapshot deletes no manifest and no chunk. Before deleting, the collector announces
its sweep in the lease and marks again what was committed meanwhile ("Sweeps and writers").
"""

from __future__ import annotations

import time

import attrs

from ckptfs import observe
from ckptfs.errors import CkptfsError
from ckptfs.format.digest import Digest
from ckptfs.format.names import CHUNKS, SNAPSHOTS, TMP
from ckptfs.ops.chunks import snapshot_chunks
from ckptfs.ops.lease import DEFAULT_TTL_MS, MaintenanceLease, NoLease, describe
from ckptfs.storage.base import ObjectStat, Storage
from ckptfs.store import header_bases
from ckptfs.store.ledgers import LedgerScanner
from ckptfs.store.lifecycle import retire
from ckptfs.store.listing import loose_digest
from ckptfs.store.repository import Repository, Snapshot
from ckptfs.format.containers import ContainerRef, PackRef, RecordHeader, RecordRef
from ckptfs.ops import gc_locators
from ckptfs.ops.repack import Held, RepackReport, held, packs, repack
from ckptfs.ops.runscan import RecordCache

#: the writer name packs written by maintenance carry
WRITER = "ckptfs gc"

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
    #: chunks gone, by digest; v2 with complete locators: only those of containers gc read
    #: (a stray deleted unread counts in ``containers`` and its bytes, spec/v2.md 9.2)
    chunks_deleted: int = 0
    tmp_deleted: int = 0
    #: the one total: bytes of every kind gc removed (loose objects, containers less what
    #: their live bodies took in new packs, temp files); dry run: what it would remove
    bytes_freed: int = 0
    #: what gc would remove if it were older than the grace period (objects or containers,
    #: never what a retained snapshot uses), their bytes, and how many forgotten or expired
    #: snapshots' records among them (format v2)
    young_kept: int = 0
    bytes_kept_young: int = 0
    snapshots_kept_young: int = 0
    #: candidates spared because a snapshot committed during the collection names them
    spared_by_new_commits: int = 0
    problems: list[str] = attrs.field(factory=list)
    #: the lease this collection broke (break_lease=True), for the caller's warning
    broken_lease: str | None = None
    #: format v2: containers deleted and repacked, bodies moved
    containers: RepackReport = attrs.field(factory=RepackReport)

    def to_json(self) -> dict[str, object]:
        return attrs.asdict(self)


def _objects(storage: Storage, top: str) -> dict[Digest, tuple[str, ObjectStat]]:
    """Digest -> (path, listing stat) of the objects of a two-level fan-out folder
    (``chunks/ab/<hex>``), in one listing (object stores: paginated, no request per object).
    Names that are no object's are ignored (``store.listing.loose_digest``, format.md 3.1)."""
    out: dict[Digest, tuple[str, ObjectStat]] = {}
    for path, stat in storage.scan(top).items():
        d = loose_digest(path)
        if d is not None:
            out[d] = (path, stat)
    return out


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


@attrs.define
class _Mark:
    """The marked set, which (run, seq) it covers, and whether every read succeeded."""

    manifests: set[Digest] = attrs.field(factory=set)
    chunks: set[Digest] = attrs.field(factory=set)
    #: (run, seq) -> the snapshot its record named when marked
    seen: dict[tuple[str, int], Digest] = attrs.field(factory=dict)
    sound: bool = True
    #: v2: the visible records and the containers their locators name (ckptfs.ops.gc_locators)
    named: set[ContainerRef] = attrs.field(factory=set)


def _mark(repo: Repository, into: _Mark, ledgers: LedgerScanner, problems: list[str],
          lease: MaintenanceLease | None, skip: frozenset[str] | set[str] = frozenset(),
          cache: RecordCache | None = None) -> None:
    """Mark what every visible record not yet in ``into.seen`` uses. A record whose manifest
    cannot be read still marks that manifest (its id is in the record); any failure clears
    ``sound``: then nothing may be deleted, since what the unread snapshot uses is unknown.
    One listing per run; records read in batches, and (``cache``) a record this collection
    read already is read again only when the listing's ETag says it changed."""
    cache = RecordCache() if cache is None else cache
    for run_id in repo.run_ids():
        if lease is not None:
            lease.keep()
        listing = cache.listing(repo.storage, run_id)
        seqs = [s for s in listing.visible if f"{run_id}@{s}" not in skip]
        for got in cache.records(repo, listing, seqs):
            seq = got.seq
            if got.error is not None:
                problems.append(f"{run_id}@{seq}: {got.error}")
                into.sound = False
                continue
            rec = got.record
            assert rec is not None
            if got.container is not None:
                h = got.container.header
                into.named.add(RecordRef(run_id, seq))
                if isinstance(h, RecordHeader):
                    into.named.update(gc_locators.locator_containers(h))
            if into.seen.get((run_id, seq)) == rec.snapshot:
                continue  # marked already (a record withdrawn and made again is marked anew)
            into.manifests.add(rec.snapshot)
            try:
                snap = repo._recorded(rec)  # the record read above: not read twice
                into.chunks |= _chunks(repo, snap, ledgers)
            except CkptfsError as e:  # its manifest or ledger cannot be read
                problems.append(f"{run_id}@{seq}: {e}")
                into.sound = False
                continue
            into.seen[(run_id, seq)] = rec.snapshot


def gc(repo: Repository, *, grace_ms: int | None = None, dry_run: bool = False,
       now: int | None = None, lease_ttl_ms: int = DEFAULT_TTL_MS,
       break_lease: bool = False) -> GcReport:
    """Collect the store's garbage; see the module docstring for the order and the rules."""
    t0_ns = observe.now_ns()
    st = repo.storage
    repo.check_writable()  # a version 1 store is upgraded first (dry runs included)
    grace = grace_of(repo) if grace_ms is None else grace_ms
    report = GcReport(dry_run=dry_run, grace_ms=grace)
    # the lease says "deletes: false" until the sweep: writers need not wait for the mark
    taken = (NoLease(st) if dry_run else
             MaintenanceLease(st, ttl_ms=lease_ttl_ms, deletes=False, break_lease=break_lease,
                              config=repo.config))
    with taken as lease:
        if lease.broken is not None:
            report.broken_lease = describe(lease.broken)
        t0 = int(time.time() * 1000) if now is None else now
        cutoff_s = (t0 - grace) / 1000
        # 1. records: strays in retired ranges, then expired snapshots (a head only with its run)
        cache = RecordCache()  # what this collection read: records, run listings
        for run_id in repo.run_ids():
            lease.keep()
            listing = cache.listing(st, run_id)
            visible = listing.visible
            strays = listing.strays
            report.stray_records += len(strays)
            expired = set()
            # the snapshot ids read on the way, for the marker (spec/retention.md 3)
            ids: dict[int, Digest] = {}
            for got in cache.records(repo, listing, visible):
                seq = got.seq
                try:
                    if got.error is not None:
                        raise got.error
                    assert got.record is not None
                    ids[seq] = got.record.snapshot
                    m = repo._recorded(got.record).manifest
                    exp = listing.expiry(st, seq, m.expires)
                except CkptfsError:
                    continue  # unreadable: verify reports it; never collected on a guess
                if exp is not None and exp <= t0:
                    expired.add(seq)
            if visible and expired and expired != set(visible):
                expired.discard(visible[-1])
            report.expired += [f"{run_id}@{s}" for s in sorted(expired)]
            if dry_run:
                continue
            # strays hold bodies: the container sweep repacks them (spec/v2.md)
            if retire(st, run_id, visible, expired, t0,
                      lambda ss: {s: ids[s] for s in ss if s in ids}) or expired:
                cache.relist(run_id)  # its retired range changed: the mark lists it again
        # 2. mark: everything the retained snapshots use
        lease.check()
        ledgers = LedgerScanner(repo.objects)
        mark = _Mark()
        _mark(repo, mark, ledgers, report.problems, lease,
              skip=set(report.expired) if dry_run else set(), cache=cache)
        # 3. candidates: old manifests nobody commits to (young ones may be in flight, so their
        #    chunks stay), then old chunks nothing marked names
        lease.check()
        manifests: dict[Digest, str] = {}
        for d, (path, stat) in _objects(st, SNAPSHOTS).items():
            lease.keep()
            if d in mark.manifests:
                continue
            if stat.mtime is None or stat.mtime >= cutoff_s:  # young or of unknown age: in flight?
                _young(report, stat.size)
                try:
                    mark.chunks |= _chunks(repo, Snapshot(d, repo.objects.get_manifest(d)),
                                           ledgers)
                except CkptfsError as e:
                    report.problems.append(f"young manifest {d}: {e}")
                    mark.sound = False
                continue
            manifests[d] = path
        chunks: dict[Digest, str] = {}
        if mark.sound:
            for d, (path, stat) in _objects(st, CHUNKS).items():
                if d in mark.chunks:
                    continue
                lease.keep()
                if stat.mtime is None or stat.mtime >= cutoff_s:
                    _young(report, stat.size)
                    continue
                chunks[d] = path
        else:  # never sweep on a guess: an unread snapshot may use any of them
            report.problems.append("nothing swept (no manifest, no chunk): some snapshots could "
                                   "not be read; fix or erase them (see 'ckptfs verify')")
            manifests = {}
        plan = (gc_locators.plan_forwards(st, report.problems)
                if mark.sound and gc_locators.applies(repo) else None)
        victims = v2_victims(repo, mark, cutoff_s, report, cache, plan) if mark.sound else []
        if dry_run:
            if victims:
                repack(st, victims, lambda d: d in mark.chunks, writer=WRITER, dry_run=True,
                       report=report.containers)
                _count_v2(report, victims, mark)
            if plan is not None:
                report.manifests_deleted += gc_locators.sweep(
                    st, plan, mark.named, report.containers, dry_run=True)
            report.manifests_deleted += len(manifests)  # v2's counted above: added, not set
            report.chunks_deleted += len(chunks)
            report.bytes_freed = sum(st.size(p) or 0 for p in [*manifests.values(),
                                                               *chunks.values()])
        elif manifests or chunks or victims or (plan is not None and (
                plan.unread or plan.forwards)):
            _sweep(repo, lease, mark, ledgers, manifests, chunks, cutoff_s, report, victims,
                   cache, plan)
        # 5. temp files abandoned by crashed writers
        for name in st.listing(TMP).files:
            path = f"{TMP}/{name}"
            if _old(st, path, cutoff_s):
                report.tmp_deleted += 1
                report.bytes_freed += st.size(path) or 0
                if not dry_run:
                    st.delete(path)
        report.bytes_freed += report.containers.bytes_freed  # one total (issue 35, item 2)
    observe.maintenance("gc", t0_ns, dry_run=dry_run, bytes_freed=report.bytes_freed,
                        snapshots_expired=len(report.expired), bytes_kept=report.bytes_kept_young,
                        problems=len(report.problems))
    return report


def _young(report: GcReport, size: int, record: bool = False) -> None:
    """Count what gc would remove but for the grace period (and its bytes)."""
    report.young_kept += 1
    report.bytes_kept_young += size
    report.snapshots_kept_young += record


def _sweep(repo: Repository, lease: MaintenanceLease, mark: _Mark, ledgers: LedgerScanner,
           manifests: dict[Digest, str], chunks: dict[Digest, str], cutoff_s: float,
           report: GcReport, victims: list[Held] | None = None,
           cache: RecordCache | None = None, plan: gc_locators.Plan | None = None) -> None:
    """4. Announce the sweep, mark again what was committed since the mark, then delete
    (spec/retention.md "Sweeps and writers"): a writer whose record the second mark misses sees
    the announcement after its record and waits for this sweep, then restores what it needs."""
    st = repo.storage
    lease.set_deletes(True)
    before = (set(manifests), set(chunks))
    if cache is not None:
        cache.relist_all()  # the second mark lists every run again, after the announcement
    _mark(repo, mark, ledgers, report.problems, lease, cache=cache)
    if not mark.sound:
        report.problems.append("nothing swept: a snapshot committed during the collection "
                               "could not be read")
        return
    for d in list(manifests):
        if d in mark.manifests:
            del manifests[d]
    for d in list(chunks):
        if d in mark.chunks:
            del chunks[d]
    report.spared_by_new_commits = (len(before[0]) - len(manifests)
                                    + len(before[1]) - len(chunks))
    if plan is not None:  # v2, complete locators: what nothing names goes unread
        report.manifests_deleted += gc_locators.sweep(st, plan, mark.named,
                                                      report.containers)
        lease.keep()
    if victims:  # v2: containers, judged by the marks of both passes
        try:
            repack(st, victims, lambda d: d in mark.chunks, writer=WRITER,
                   report=report.containers, lease_keep=lease.keep)
            _count_v2(report, victims, mark)
        except CkptfsError as e:
            report.problems.append(f"repack stopped: {e}")
    # manifests before chunks: a crash leaves no manifest whose chunks are gone
    for kind, todo in (("manifest", manifests), ("chunk", chunks)):
        for path in todo.values():
            lease.keep()
            if not _old(st, path, cutoff_s):  # refreshed since it was judged: a writer uses it
                report.young_kept += 1
                continue
            size = st.size(path) or 0
            st.delete(path)
            report.bytes_freed += size
            if kind == "manifest":
                report.manifests_deleted += 1
            else:
                report.chunks_deleted += 1


def v2_victims(repo: Repository, mark: _Mark, cutoff_s: float, report: GcReport,
               cache: RecordCache | None = None, plan: gc_locators.Plan | None = None
               ) -> list[Held]:
    """Containers to delete or repack (spec/v2.md "Maintenance"): stray records (forgotten,
    expired, withdrawn: invisible, never read again as snapshots) and packs at least half
    dead, both older than the grace period (younger ones may belong to a commit in flight).
    ``plan`` (complete locators): only the containers the mark named are read and judged
    here; the other old ones go to ``plan.unread``, deleted unread by the sweep."""
    st = repo.storage
    refs: list[tuple[RecordRef | PackRef, ObjectStat | None]] = []
    cache = RecordCache() if cache is None else cache
    for run_id in repo.run_ids():  # the mark's listings: their stats, no request per record
        listing = cache.listing(st, run_id)
        refs += [(RecordRef(run_id, s), listing.records[s]) for s in listing.strays]
    refs += list(packs(st).items())
    young_refs: list[RecordRef | PackRef] = []
    if plan is not None:
        refs, young = gc_locators.split(refs, gc_locators.reached(mark.named, plan.forwards),
                                        cutoff_s, plan)
        for ref, stat in young:  # named by nothing: garbage once old
            _young(report, 0 if stat is None else stat.size, isinstance(ref, RecordRef))
            young_refs.append(ref)
    out = []
    plain: list[str] = []  # v1 strays of an upgraded store: no bodies, deleted as in v1
    found = held(st, refs, report.problems, plain, repo=repo)
    if plain and not report.dry_run:
        st.delete_many(plain)
    for h in found:
        bodies = h.container.header.bodies
        dead = sum(b.stored for b in bodies if b.digest not in mark.chunks)
        if isinstance(h.ref, PackRef) and dead * 2 < h.container.header.body_length:
            continue  # mostly live: repacking would copy more than it frees (not "young")
        if h.mtime is None or h.mtime >= cutoff_s:  # what a gc after the grace period frees
            live = sum(b.stored for b in bodies if b.digest in mark.chunks)
            _young(report, h.stored - live, isinstance(h.ref, RecordRef))
            continue
        out.append(h)
    chosen = {id(h) for h in out}
    return _spare_bases(st, out, young_refs + [h.ref for h in found if id(h) not in chosen],
                        plan)


def _spare_bases(st: Storage, victims: list[Held], kept: list[RecordRef | PackRef],
                 plan: gc_locators.Plan | None) -> list[Held]:
    """``victims`` without the header bases of the stray records this collection keeps
    (spec/v2.md 9.1, ``delta-headers``): a kept record stays decodable, so that a later
    collection can still judge it. Their chains are read from the records' first bytes."""
    by_run: dict[str, list[int]] = {}
    for ref in kept:
        if isinstance(ref, RecordRef):
            by_run.setdefault(ref.run, []).append(ref.seq)
    spare = {RecordRef(run_id, b) for run_id, seqs in by_run.items()
             for b in header_bases.chains(st, run_id, seqs)}
    if not spare:
        return victims
    if plan is not None:
        plan.unread = [u for u in plan.unread if u.ref not in spare]
    return [h for h in victims if h.ref not in spare]


def _count_v2(report: GcReport, victims: list[Held], mark: _Mark) -> None:
    """The v1 counters for a v2 sweep: a deleted record is a manifest gone, a body not copied
    out a chunk gone (by digest: a body held twice counts once)."""
    report.manifests_deleted += sum(1 for h in victims if isinstance(h.ref, RecordRef))
    report.chunks_deleted += len({b.digest for h in victims for b in h.container.header.bodies
                                  if b.digest not in mark.chunks})
