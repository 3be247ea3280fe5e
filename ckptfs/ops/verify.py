"""Verify every retained snapshot of a store, not only heads.

Without ``read_data`` it proves every manifest parses and validates and every chunk it names
exists (and has a plausible size); with ``read_data`` it re-reads every chunk and recomputes
every digest (restic's ``check --read-data``). Problems are reported, never repaired.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable

import attrs

from ckptfs.errors import CkptfsError
from ckptfs.format import framing
from ckptfs.format.digest import Digest
from ckptfs.format.models import Captured, ChunkRef
from ckptfs.format.names import chunk_path
from ckptfs.format.containers import ContainerRef, Location, RecordRef
from ckptfs.ops import gc_locators
from ckptfs.ops.chunks import snapshot_chunks
from ckptfs.ops.locator_holes import locator_holes
from ckptfs.ops.repair import repaired_seqs
from ckptfs.ops.verify_links import check_hard_links
from ckptfs.store.containers import ChunkReader, Locations, locatable
from ckptfs.store.ledgers import LedgerScanner
from ckptfs.store.listing import foreign_names
from ckptfs.store.repository import Repository, Snapshot


#: categories of a damaged record (as opposed to an erased, unreachable or newer one)
DAMAGE = ("corrupt", "missing", "non-canonical")


@attrs.frozen
class Problem:
    """One thing wrong, with the category of the spec's error list."""

    category: str
    run: str | None
    seq: int | None
    snapshot: str | None
    message: str

    def to_json(self) -> dict[str, object]:
        return attrs.asdict(self)


@attrs.define
class VerifyReport:
    runs: int = 0
    snapshots: int = 0
    chunks_checked: int = 0
    #: entries whose content is in their manifest (small values, v2): checked with it, since a
    #: snapshot's id is the BLAKE3 of its manifest bytes; they have no chunk to check
    inline_entries: int = 0
    bytes_read: int = 0
    #: run records read and checked, and the bytes of the manifests they name, each hashed
    #: against its snapshot id (in a v2 store whose data is inline, that is all there is)
    records: int = 0
    manifest_bytes: int = 0
    problems: list[Problem] = attrs.field(factory=list)
    #: damaged records that a later repair record of their run set aside (``ckptfs repair``):
    #: kept as evidence, reported as notes, not problems (format.md 8.4)
    repaired: list[Problem] = attrs.field(factory=list)
    #: files in the store's object folders that are no object (a ``.DS_Store``, an rsync
    #: partial): ignored by every reader and by maintenance, named for the operator to remove
    foreign: list[str] = attrs.field(factory=list)
    #: v2: which containers were found present (one existence check each per verify)
    containers_seen: dict[ContainerRef, bool] = attrs.field(factory=dict, repr=False)

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, object]:
        return {"ok": self.ok, "runs": self.runs, "snapshots": self.snapshots,
                "chunks_checked": self.chunks_checked, "inline_entries": self.inline_entries,
                "bytes_read": self.bytes_read, "records": self.records,
                "manifest_bytes": self.manifest_bytes,
                "problems": [p.to_json() for p in self.problems],
                "repaired": [p.to_json() for p in self.repaired], "foreign": self.foreign}


def verify(repo: Repository, *, runs: Iterable[str] | None = None,
           read_data: bool | float = False,
           progress: Callable[[str], None] | None = None) -> VerifyReport:
    """Check every snapshot of ``runs`` (default: all). Each chunk is checked once.
    ``read_data`` a float in (0, 1]: read that share of the chunks, picked at random (restic's
    ``--read-data-subset``); the others get the existence and size check."""
    report = VerifyReport()
    runs = list(runs) if runs is not None else None
    try:
        repo.config
    except CkptfsError as e:
        report.problems.append(Problem(e.category, None, None, None, str(e)))
        return report
    #: each chunk once per place a snapshot's own record says it is (v2; v1: once per digest)
    checked: dict[tuple[Digest, Location | None], str | None] = {}
    ledgers = LedgerScanner(repo.objects)
    for run_id in (runs if runs is not None else repo.run_ids()):
        report.runs += 1
        seqs = repo.seqs(run_id)
        first = len(report.problems)
        repaired: set[int] = set()
        for seq in seqs:
            report.snapshots += 1
            if progress:
                progress(f"{run_id}@{seq}")
            try:
                rec = repo.record(run_id, seq)
                snap = repo._recorded(rec)
            except CkptfsError as e:
                report.problems.append(Problem(e.category, run_id, seq, None, str(e)))
                continue
            report.records += 1
            report.manifest_bytes += rec.size
            repaired.update(repaired_seqs(snap.manifest))
            if snap.manifest.run != run_id or snap.manifest.seq != seq:
                report.problems.append(Problem(
                    "corrupt", run_id, seq, snap.id,
                    f"manifest says run {snap.manifest.run!r} seq {snap.manifest.seq}"))
            before = len(report.problems)
            report.inline_entries += sum(isinstance(e, Captured) and e.inline is not None
                                         for e in snap.manifest.entries.values())
            named = snapshot_chunks(repo, snap, results=False)
            _check_chunks(repo, named, checked, read_data, report, snap, ledgers)
            if snap.manifest.ledger is not None and len(report.problems) == before:
                try:  # the ledger's chunks are sound: read it for its results' chunks
                    results = snapshot_chunks(repo, snap, ledgers=ledgers)[len(named):]
                except CkptfsError as e:
                    report.problems.append(Problem(e.category, run_id, seq, snap.id, str(e)))
                else:
                    _check_chunks(repo, results, checked, read_data, report, snap, ledgers)
        _sort_run(report, first, seqs, repaired, repo.url)
    if repo.objects.layout >= 2 and gc_locators.applies(repo):
        _check_holes(repo, runs, report)
    if read_data is True and repo.objects.layout >= 2 and runs is None:
        _check_pack_names(repo, report)
    if runs is None:
        check_hard_links(repo, report)
        try:  # a note, not a problem: no reader acts on them (format.md 3.1)
            report.foreign = foreign_names(repo.storage)
        except CkptfsError:
            pass  # a folder that cannot be listed (a link in it): its objects' checks say so
    return report


def _sort_run(report: VerifyReport, first: int, seqs: list[int], repaired: set[int],
              url: str) -> None:
    """The problems of one run (from index ``first``): those of records a later repair set
    aside become notes; an unreadable head says how to make the run resumable again."""
    mine = report.problems[first:]
    del report.problems[first:]
    for p in mine:
        if p.seq in repaired and p.snapshot is None:
            report.repaired.append(attrs.evolve(p, message=(
                f"{p.message}; set aside by 'ckptfs repair' (a later record holds the last "
                "good snapshot) and kept as evidence. gc frees no data while it is there: "
                f"'ckptfs repair {url} {p.run} --forget' forgets it")))
        elif seqs and p.seq == seqs[-1] and p.snapshot is None and p.category in DAMAGE:
            report.problems.append(attrs.evolve(p, message=(
                f"{p.message}. It is the run's head, so the run cannot be resumed: 'ckptfs "
                f"repair {url} {p.run}' makes its last good snapshot the head again (the "
                "damaged record is kept)")))
        else:
            report.problems.append(p)


def _check_holes(repo: Repository, runs: Iterable[str] | None, report: VerifyReport) -> None:
    """In a store that requires complete locators, a visible record that neither carries nor
    locates a chunk its snapshot needs is damage even while the chunk still reads through
    another place this process knows (spec/v2.md 3.5): gc may delete that place unread."""
    _, holes = locator_holes(repo, runs=runs)
    # a record that could not be read is reported once, by the snapshot checks above
    seen = {(p.run, p.seq) for p in (*report.problems, *report.repaired)}
    for h in holes:
        if h.unreadable and (h.run, h.seq) in seen:
            continue
        report.problems.append(Problem(
            "corrupt", h.run, h.seq, None,
            f"run record {h.run}@{h.seq}: {h.why}, although the store requires complete "
            "locators: gc may delete the container that holds it without reading it, and a "
            "reader of this snapshot alone does not find it. 'ckptfs copy' of the store "
            "into a new one writes complete records; if it is the run's head, resuming the "
            "run and committing again also does (a commit carries what its parent does not "
            "locate)."))


def _check_pack_names(repo: Repository, report: VerifyReport) -> None:
    """Format v2, ``read_data``: every pack's name is the BLAKE3-256 of its bytes (spec/v2.md
    3.4), so a pack whose bytes changed, or a file copied under another pack's name, is found
    even when no snapshot reads the bodies that differ. Each pack is read once, whole."""
    from ckptfs.format.names import pack_path
    from ckptfs.ops.repack import packs

    for ref in sorted(packs(repo.storage), key=lambda r: r.digest.hex):
        path = pack_path(ref.digest)
        try:
            data = repo.storage.read(path)
        except FileNotFoundError:
            continue  # deleted by maintenance since the listing
        except CkptfsError as e:
            report.problems.append(Problem(e.category, None, None, None, f"{path}: {e}"))
            continue
        report.bytes_read += len(data)
        got = Digest.of(data)
        if got != ref.digest:
            report.problems.append(Problem(
                "corrupt", None, None, None,
                f"{path}: its bytes hash to {got.hex[:16]}..., not its name: the pack was "
                "changed or copied under another pack's name. Snapshots reading bodies from it "
                "are checked above; restore the file from a copy of the store."))


def _check_chunks(repo: Repository, named: list[tuple[str, ChunkRef]],
                  checked: dict[tuple[Digest, Location | None], str | None],
                  read_data: bool | float, report: VerifyReport,
                  snap: Snapshot, ledgers: LedgerScanner) -> None:
    """Check each chunk once per place it is read from; report every snapshot that needs a
    bad one. In a v2 store that place is where the snapshot's own record says the chunk is
    (its body or locator): two records may hold two copies of one chunk, and a reader of
    either snapshot alone reads its own (spec/v2.md 6), so a damaged copy is found even when
    another record's copy of the same chunk is sound. Ledger chunks read here are handed to
    ``ledgers`` so that it does not read them again."""
    own = RecordRef(snap.run, snap.seq)
    alone = repo.objects.locations.only(own) if repo.objects.layout >= 2 else None
    for what, ref in named:
        key = (ref.digest, alone.relied(ref.digest.raw, own, wrote=False)
               if alone is not None else None)
        if key not in checked:
            keep = ledgers.offer if what == "(ledger)" else None
            checked[key] = _check_chunk(repo, ref, read_data, report, keep, alone)
        why = checked[key]
        if why is not None:
            cat, _, msg = why.partition(":")
            report.problems.append(Problem(cat, snap.run, snap.seq, snap.id,
                                           f"{what}: chunk {ref.digest}: {msg}"))


def _check_body(repo: Repository, ref: ChunkRef, read_data: bool, report: VerifyReport,
                keep: Callable[[Digest, bytes], None] | None,
                alone: Locations | None) -> str | None:
    """Format v2: the chunk through its location and every fallback (spec/v2.md)."""
    if not read_data:
        try:
            lost = locatable(repo.storage, repo.objects.locations, [ref.digest],
                             report.containers_seen)
        except CkptfsError as e:
            return f"{e.category}:{e}"
        return "missing:no container, forward or loose object holds it" if lost else None
    try:
        if alone is None:
            data = repo.objects.get_chunk(ref, where="verify")
        else:  # as a reader of this snapshot alone reads it: its record's place, then fallbacks
            reader = ChunkReader(repo.storage, alone)
            reader.reload = repo.objects.reader.reload
            data = reader.read([ref], where="verify")[0]
    except CkptfsError as e:
        return f"{e.category}:{e}"
    report.bytes_read += ref.size
    if keep is not None:
        keep(ref.digest, data)
    return None


def _check_chunk(repo: Repository, ref: ChunkRef, read_data: bool | float, report: VerifyReport,
                 keep: Callable[[Digest, bytes], None] | None = None,
                 alone: Locations | None = None) -> str | None:
    path = chunk_path(ref.digest)
    report.chunks_checked += 1
    if read_data is not True and read_data and random.random() >= read_data:
        read_data = False  # --read-data-subset: this chunk is only checked for presence
    if repo.objects.layout >= 2:
        return _check_body(repo, ref, bool(read_data), report, keep, alone)
    if not read_data:
        try:
            size = repo.storage.size(path)
        except CkptfsError as e:  # a link, a FIFO, a device: no chunk a store can hold
            return f"{e.category}:{e}"
        if size is None:
            return "missing:chunk file is missing"
        if size < 2 and ref.size > 0:
            return "corrupt:chunk file is truncated"
        if size > ref.size + 1:
            return f"corrupt:chunk file is {size} bytes, larger than its content could be"
        return None
    try:
        stored = repo.storage.read(path)
    except FileNotFoundError:
        return "missing:chunk file is missing"
    except CkptfsError as e:  # not a regular file, or larger than any chunk can be
        return f"{e.category}:{e}"
    report.bytes_read += len(stored)
    try:
        data = framing.unframe(stored, ref.size, what="chunk")
    except CkptfsError as e:
        return f"corrupt:{e}"
    if Digest.of(data) != ref.digest:
        return "corrupt:content does not match its digest"
    if keep is not None:
        keep(ref.digest, data)
    return None
