"""What maintenance knows of a run from one listing, and its records read in batches.

forget, gc and du judge every record of a run. Asked one object at a time on an object store,
that is a request per record for its bytes, two more for its expiry overrides and two HEADs for
its age and size: the request count, not the bytes, set their time (issue 15). Here one
listing of ``runs/<run>/`` (S3: one ListObjectsV2 per 1,000 keys, no delimiter) gives every
record's size, modification time and ETag, the retired markers and which expiry overrides
exist; records are then read by their headers only (spec/v2.md 7: the first 64 KiB), many at
once (``Storage.read_ranges`` overlaps them), and an operation keeps what it read
(``RecordCache``) so that a second pass reads only records that changed.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable

import attrs

from ckptfs.errors import CkptfsError, CorruptSnapshot, FormatError, NotFound, StorageError
from ckptfs.format import containers as ct
from ckptfs.format.containers import RecordRef
from ckptfs.format.lifecycle import Retired
from ckptfs.format.models import RunRecord
from ckptfs.format.names import EXPIRY, RETIRED, expiry_path, parse_seq_name, record_path, run_dir
from ckptfs.storage.base import ObjectStat, Storage
from ckptfs.store.lifecycle import read_expiry, read_retired
from ckptfs.store.records import parse_record
from ckptfs.store.repository import Repository, check_record_path

EDITED = "(the file may be truncated or edited)"
#: records read per batch (bounds the memory of one batch: at most this many 64 KiB heads)
BATCH = 256


@attrs.define
class RunListing:
    """One run as one listing shows it: its records (with their listing stats), its retired
    range and the expiry overrides that exist."""

    run: str
    records: dict[int, ObjectStat]
    retired: Retired | None
    expiry_paths: frozenset[str]
    _run_expiry: tuple[int | None] | None = None

    @property
    def seqs(self) -> list[int]:
        """Every seq with a record file, strays included, ascending."""
        return sorted(self.records)

    @property
    def visible(self) -> list[int]:
        """As ``Repository.seqs``: the records outside the retired range."""
        r = self.retired
        return [s for s in self.seqs if r is None or r.visible(s)]

    @property
    def strays(self) -> list[int]:
        v = set(self.visible)
        return [s for s in self.seqs if s not in v]

    def expiry(self, storage: Storage, seq: int, manifest_expires: int | None) -> int | None:
        """``store.lifecycle.effective_expiry`` reading only the overrides the listing shows
        (none, for most snapshots: no request)."""
        own = expiry_path(self.run, seq)
        if own in self.expiry_paths:
            o = read_expiry(storage, self.run, seq)
            if o is not None:
                return o.expires
        if self._run_expiry is None:
            whole = None
            if expiry_path(self.run) in self.expiry_paths:
                r = read_expiry(storage, self.run, None)
                whole = None if r is None else r.expires
            self._run_expiry = (whole,)
        return self._run_expiry[0] if self._run_expiry[0] is not None else manifest_expires


def list_run(storage: Storage, run_id: str) -> RunListing:
    """One listing of the run's folder, at any depth (its records, retired markers, expiry
    overrides; the head hint and anything unknown are ignored)."""
    base = run_dir(run_id) + "/"
    records: dict[int, ObjectStat] = {}
    throughs: list[int] = []
    expiry: set[str] = set()
    for path, stat in storage.scan(run_dir(run_id)).items():
        rest = path[len(base):] if path.startswith(base) else ""
        folder, _, name = rest.rpartition("/")
        if not folder:
            s = parse_seq_name(name)
            if s is not None and s >= 1:
                records[s] = stat
            elif name == EXPIRY or name.startswith(EXPIRY + "-"):
                expiry.add(path)
        elif folder == RETIRED:
            t = parse_seq_name(name)
            if t is not None:
                throughs.append(t)
    retired = read_retired(storage, run_id, throughs) if records and throughs else None
    return RunListing(run_id, records, retired, frozenset(expiry))


@attrs.frozen
class Read:
    """A record read (or why it could not be), with the listing stat it was read under."""

    seq: int
    stat: ObjectStat | None
    record: RunRecord | None
    container: ct.Container | None
    error: CkptfsError | None


#: headers this process read, by (path, ETag), per repository: the same ETag is the same
#: bytes (a record's nonce makes each unique; a pack's name is its digest), so a later
#: operation of this process (``forget --prune``'s gc after its forget) need not read them
#: again. Object stores only (local disk lists no ETag; its reads are cheap). Bounded.
_HEADS: weakref.WeakKeyDictionary[Repository, dict[tuple[str, str], ct.Container]] = (
    weakref.WeakKeyDictionary())
HEADS_MAX = 100_000


def known_header(repo: Repository, path: str, stat: ObjectStat | None) -> ct.Container | None:
    """The header of ``path`` this process read under the ETag ``stat`` shows, if any."""
    if stat is None or stat.etag is None:
        return None
    return _HEADS.get(repo, {}).get((path, stat.etag))


def remember_header(repo: Repository, path: str, stat: ObjectStat | None,
                    c: ct.Container) -> None:
    if stat is None or stat.etag is None:
        return
    heads = _HEADS.setdefault(repo, {})
    if len(heads) >= HEADS_MAX:
        heads.clear()
    heads[(path, stat.etag)] = c


def read_records(repo: Repository, run_id: str, seqs: Iterable[tuple[int, ObjectStat | None]]
                 ) -> list[Read]:
    """The records ``seqs`` of ``run_id`` by their headers, ``BATCH`` ranged reads at a time,
    overlapped. Like ``Repository.record``: each must name its own path, and a v2 record's
    bodies and locators are learned (later chunk reads go straight to them). A record absent
    by now is a ``NotFound`` error (or the erasure that removed it)."""
    todo = list(seqs)
    out: list[Read] = []
    st = repo.storage
    reads: dict[int, Read] = {}
    ask = []
    for seq, stat in todo:
        c = known_header(repo, record_path(run_id, seq), stat)
        got = _from_header(repo, run_id, seq, stat, c) if c is not None else None
        if got is not None:
            reads[seq] = got
        else:
            ask.append((seq, stat))
    for i in range(0, len(ask), BATCH):
        part = ask[i:i + BATCH]
        try:
            data: list[bytes | CkptfsError | None] = list(st.read_ranges(
                [(record_path(run_id, s), 0, ct.HEAD_READ) for s, _ in part]))
        except (CkptfsError, OSError):  # one unreadable record: read each, to know which
            data = [_head(st, record_path(run_id, s)) for s, _ in part]
        for (seq, stat), first in zip(part, data):
            r = reads[seq] = (Read(seq, stat, None, None, first)
                              if isinstance(first, CkptfsError) else
                              _parse(repo, run_id, seq, stat, first))
            if r.container is not None:
                remember_header(repo, record_path(run_id, seq), stat, r.container)
    return [reads[s] for s, _ in todo]


def _head(storage: Storage, path: str) -> bytes | CkptfsError | None:
    """A record's first bytes; None when it is absent, the error when it cannot be read (EIO,
    a FIFO in its place, a 500 outlasting retries): reported for that record, not raised."""
    try:
        return storage.read_range(path, 0, ct.HEAD_READ)
    except FileNotFoundError:
        return None
    except CkptfsError as e:
        return e
    except OSError as e:
        return StorageError(f"{path}: {e}")


def _from_header(repo: Repository, run_id: str, seq: int, stat: ObjectStat | None,
                 c: ct.Container) -> Read | None:
    """A record from a header read before (checked then); None if it is no record of here."""
    h = c.header
    if not isinstance(h, ct.RecordHeader) or h.run != run_id or h.seq != seq:
        return None
    rec = RunRecord(run=h.run, seq=h.seq, snapshot=h.snapshot, size=h.size,
                    created=h.created, nonce=h.nonce, manifest=h.manifest)
    repo.objects.locations.learn(c, RecordRef(run_id, seq))
    repo.ids[rec.snapshot] = (run_id, seq)
    return Read(seq, stat, rec, c, None)


def _parse(repo: Repository, run_id: str, seq: int, stat: ObjectStat | None,
           first: bytes | None) -> Read:
    path = record_path(run_id, seq)
    what = f"run record {path}"
    if first is None:
        err = (repo.erased(run_id, seq) or repo.erased(run_id)
               or NotFound(f"run {run_id!r} has no snapshot with sequence number {seq}"))
        return Read(seq, stat, None, None, err)
    try:
        whole = stat is not None and len(first) == stat.size
        if ct.is_container(first) and not whole:
            end = ct.header_length(first, what=what) if len(first) >= ct.PREFIX_LEN else 0
            if end > len(first):  # a header past 64 KiB: read the rest of it
                first += st_read(repo.storage, path, len(first), end)
        rec, c = parse_record(first, what=what, whole=whole, storage=repo.storage,
                              run_id=run_id)
        check_record_path(rec, run_id, seq, what)
    except FormatError as e:  # header_length's: damaged like parse_record's
        said = str(e) if EDITED in str(e) else f"{e} {EDITED}"
        return Read(seq, stat, None, None, CorruptSnapshot(said))
    except CkptfsError as e:  # a header past 64 KiB that could not be read, among others
        return Read(seq, stat, None, None, e)
    if c is not None:
        repo.objects.locations.learn(c, RecordRef(run_id, seq))
        repo.ids[rec.snapshot] = (run_id, seq)  # as Repository.record: lookups by id
    return Read(seq, stat, rec, c, None)


def st_read(storage: Storage, path: str, start: int, end: int) -> bytes:
    try:
        return storage.read_range(path, start, end)
    except FileNotFoundError:
        return b""


@attrs.define
class RecordCache:
    """The records one maintenance operation read, by (run, seq), with the listing stat each
    was read under. A later pass reuses an entry only when the new listing shows the same
    ETag (the same bytes: a record's nonce makes every record's bytes unique); without an ETag
    (local disk, where a read is cheap) it reads again."""

    reads: dict[tuple[str, int], Read] = attrs.field(factory=dict)
    listings: dict[str, RunListing] = attrs.field(factory=dict)

    def listing(self, storage: Storage, run_id: str) -> RunListing:
        """The run's listing, made once until ``relist``."""
        got = self.listings.get(run_id)
        if got is None:
            got = self.listings[run_id] = list_run(storage, run_id)
        return got

    def relist(self, run_id: str) -> None:
        self.listings.pop(run_id, None)

    def relist_all(self) -> None:
        self.listings.clear()

    def records(self, repo: Repository, listing: RunListing, seqs: Iterable[int]) -> list[Read]:
        """The records ``seqs`` of the listed run, read, or reused when unchanged."""
        out: dict[int, Read] = {}
        todo: list[tuple[int, ObjectStat | None]] = []
        for s in seqs:
            stat = listing.records.get(s)
            old = self.reads.get((listing.run, s))
            if old is not None and old.error is None and _same(old.stat, stat):
                out[s] = old
            else:
                todo.append((s, stat))
        for r in read_records(repo, listing.run, todo):
            self.reads[(listing.run, r.seq)] = r
            out[r.seq] = r
        return [out[s] for s in sorted(out)]


def _same(a: ObjectStat | None, b: ObjectStat | None) -> bool:
    return (a is not None and b is not None and a.etag is not None and a.etag == b.etag
            and a.size == b.size)
