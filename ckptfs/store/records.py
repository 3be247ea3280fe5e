"""Run records of both layouts: parsing (v1 CBOR map or v2 container), building v2 records,
finding a run's head from its hint, and finding a snapshot by id without a manifest object.

v1 record: a small CBOR map naming a manifest object. v2 record (spec/v2.md): a container
whose header carries the manifest's canonical bytes, the chunk bodies the commit added and
locators for the others. Which one a file is, its first bytes say (a CBOR map head, or the v2
magic); a v1 store never holds v2 records (writers follow the store's config version).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence

from ckptfs.errors import CkptfsError, CorruptSnapshot, FormatError, NonCanonical
from ckptfs.format import containers as ct
from ckptfs.format import record_bytes
from ckptfs.format.containers import Container, Location, RecordHeader, RecordRef
from ckptfs.format.digest import Digest
from ckptfs.format.models import RunRecord
from ckptfs.format.names import (
    SEQ_WIDTH,
    head_hint_path,
    parse_seq_name,
    record_path,
    run_dir,
    seq_name,
)
from ckptfs.storage.base import Storage
from ckptfs.store.header_bases import decode_record
from ckptfs.store.lifecycle import record_names_of


def parse_record(data: bytes, *, what: str, whole: bool = True,
                 storage: Storage | None = None, run_id: str | None = None
                 ) -> tuple[RunRecord, Container | None]:
    """A record file's commit (and, for v2, its decoded container). ``whole=False``: ``data``
    is a v2 record's first bytes, at least its header (maintenance reads only headers); the
    file's length is then not checked. ``storage``, ``run_id``: where the record is, for a
    header stored by reference (form 0x04: its base records are read from there)."""
    if not ct.is_container(data):
        try:
            return RunRecord.from_bytes(data, what=what), None
        except NonCanonical as e:
            raise NonCanonical(f"{e} (the record was edited or written by a broken writer)") from e
        except FormatError as e:
            raise CorruptSnapshot(f"{e} (the file may be truncated or edited)") from e
    try:
        if storage is not None and run_id is not None:
            c = decode_record(storage, run_id, data, what=what, whole=whole)
        else:
            c = ct.decode(data, what=what, whole=whole)
    except NonCanonical as e:
        raise NonCanonical(f"{e} (the record was edited or written by a broken writer)") from e
    except FormatError as e:
        raise CorruptSnapshot(f"{e} (the file may be truncated or edited)") from e
    h = c.header
    if not isinstance(h, RecordHeader):
        raise CorruptSnapshot(f"{what}: is a pack, not a run record")
    if Digest.of(h.manifest) != h.snapshot:
        raise CorruptSnapshot(f"{what}: the manifest it carries does not match its snapshot id")
    return RunRecord(run=h.run, seq=h.seq, snapshot=h.snapshot, size=h.size,
                     created=h.created, nonce=h.nonce, manifest=h.manifest), c


def read_record_head(storage: Storage, run_id: str, seq: int, *, what: str
                     ) -> tuple[bytes, RunRecord, Container | None]:
    """A run record's bytes up to the end of its commit (a v1 record whole; of a v2 record its
    header only: the bodies are not read), its validated meaning and, for v2, its container.
    FileNotFoundError when absent; CorruptSnapshot (or NonCanonical) when it cannot be parsed
    or names another run or seq than its path."""
    path = record_path(run_id, seq)
    first = storage.read_range(path, 0, ct.HEAD_READ)
    whole = not ct.is_container(first)
    if whole:  # a v1 record: one small CBOR map (read whole if it is longer than the range)
        data = first if len(first) < ct.HEAD_READ else storage.read(path)
    else:
        try:
            end = ct.header_length(first, what=what)
        except FormatError as e:
            raise CorruptSnapshot(f"{e} (the file may be truncated or edited)") from e
        data = first[:end] if end <= len(first) else \
            first + storage.read_range(path, len(first), end)
    rec, container = parse_record(data, what=what, whole=whole, storage=storage, run_id=run_id)
    if rec.run != run_id or rec.seq != seq:
        raise CorruptSnapshot(f"{what}: names run {rec.run!r} seq {rec.seq}, not its own path")
    return data, rec, container


def snapshot_ids(storage: Storage, run_id: str, seqs: Iterable[int]) -> dict[int, Digest]:
    """The snapshot ids the records of ``seqs`` commit (headers only), for a retired marker's
    ``ids`` (spec/retention.md 3). A record that is gone or unreadable is left out: a marker
    never lists an id its store did not read (a copy then has no proof there, and says so)."""
    seqs = list(seqs)
    out: dict[int, Digest] = {}
    try:  # one batch of ranged reads (overlapped on object stores): most headers fit
        firsts = storage.read_ranges([(record_path(run_id, s), 0, ct.HEAD_READ) for s in seqs])
    except (OSError, CkptfsError):
        firsts = [b""] * len(seqs)
    for seq, first in zip(seqs, firsts):
        if first is None:
            continue
        h = _header(first) if first else None
        if h is not None and h.run == run_id and h.seq == seq \
                and Digest.of(h.manifest) == h.snapshot:
            out[seq] = h.snapshot
            continue
        try:  # a v1 record, a long header, or a batch that failed: one by one
            out[seq] = read_record_head(storage, run_id, seq,
                                        what=f"run record {record_path(run_id, seq)}")[1].snapshot
        except (FileNotFoundError, CkptfsError):
            continue
    return out


def build_record(rec: RunRecord, manifest: bytes, framed: Sequence[tuple[Digest, int, bytes]],
                 where: Mapping[Digest, Location], *, compress: bool = False
                 ) -> tuple[bytes, dict[Digest, Location]]:
    """A v2 record's bytes for commit ``rec`` carrying ``manifest`` and the ``framed`` bodies,
    with locators for the chunks at ``where``; also where its own bodies will be.
    ``compress``: the store requires ``compressed-headers`` (the header is a zstd frame)."""
    data, placed, _ = build_record_raw(rec, manifest, framed,
                                       {d.raw: loc for d, loc in where.items()},
                                       compress=compress)
    return data, placed


def build_record_raw(rec: RunRecord, manifest: bytes,
                     framed: Sequence[tuple[Digest, int, bytes]],
                     where: Mapping[bytes, Location], rows: record_bytes.LocatorRows | None = None,
                     *, compress: bool = False, base: tuple[int, bytes] | None = None
                     ) -> tuple[bytes, dict[Digest, Location], bytes]:
    """``build_record`` with ``where`` keyed by the digests' raw bytes (the commit path: no
    model objects per located chunk; ``rows``: encoded locator rows kept across commits,
    ckptfs.format.record_bytes); also the header's canonical bytes. ``base``: ``(seq,
    header)`` of the parent record to store the header against (form 0x04)."""
    assert rec.nonce is not None
    table, area, area_length = ct.layout_parts(framed)
    data, start, plain = record_bytes.encode_record(
        run=rec.run, seq=rec.seq, snapshot=rec.snapshot, created=rec.created, nonce=rec.nonce,
        manifest=manifest, bodies=table, where=where, area=area, body_length=area_length,
        rows=rows, compress=compress, base=base)
    ref = RecordRef(rec.run, rec.seq)
    return data, {b.digest: Location(ref, start + b.offset, b.stored) for b in table}, plain


# -- the head ----------------------------------------------------------------------------------
def read_hint(storage: Storage, run_id: str) -> ct.HeadHint | None:
    """The run's head hint, or None when absent, damaged or unreadable (never an error)."""
    try:
        return ct.HeadHint.parse(storage.read(head_hint_path(run_id)), run_id)
    except (FileNotFoundError, OSError, FormatError):
        return None


def seqs_after(storage: Storage, run_id: str, after: int) -> tuple[list[int], list[str]] | None:
    """Record seqs above ``after``, ascending, and the run's other names (relative, at any
    depth: ``retired/<seq>``, ``expiry``, ``expiry-<seq>``, ``head``, which all sort after
    the 20-digit record names, so the listing holds every one of them), from one listing that
    starts after record ``after`` (None when the backend cannot list from a key)."""
    names = storage.list_after(run_dir(run_id), seq_name(after))
    if names is None:
        return None
    seqs, other = [], []
    for n in names:
        s = parse_seq_name(n) if "/" not in n else None
        if s is None:
            other.append(n)
        elif s > after:
            seqs.append(s)
    return sorted(seqs), other


def retired_in(names: Iterable[str]) -> list[int]:
    """The ``through`` values of the retired markers among a run listing's names (relative to
    the run's folder, at any depth: ``retired/<seq>``)."""
    cut = len("retired/")
    return [t for t in (parse_seq_name(n[cut:]) for n in names if n.startswith("retired/"))
            if t is not None]


def record_names(names: Iterable[str]) -> list[int]:
    return sorted(s for s in (parse_seq_name(n) for n in names) if s is not None and s >= 1)


def scan_records(storage: Storage, run_ids: Iterable[str]) -> Iterator[tuple[str, int, bytes]]:
    """Every record's first bytes (enough for a v2 header in most cases), newest first per run:
    ``(run, seq, bytes)``. O(records) requests: the cost of a lookup by id without an index."""
    for run_id in run_ids:
        seqs = record_names(record_names_of(storage, storage.listing(run_dir(run_id))))
        for seq in reversed(seqs):
            try:
                yield run_id, seq, storage.read_range(record_path(run_id, seq), 0, ct.HEAD_READ)
            except FileNotFoundError:
                continue


def _header(first: bytes) -> RecordHeader | None:
    """A v2 record's header from its first bytes, when they hold the whole header (a header
    stored by reference, form 0x04, needs its bases: None)."""
    if not ct.is_container(first):
        return None
    try:
        end = ct.header_length(first, what="record")
        if end > len(first):
            return None
        h = ct.decode(first, what="record", whole=False).header
    except FormatError:
        return None
    return h if isinstance(h, RecordHeader) else None


def header_snapshot(first: bytes) -> Digest | None:
    """The snapshot id a record's first bytes commit, when they hold the whole v2 header."""
    h = _header(first)
    return None if h is None else h.snapshot


__all__ = ["parse_record", "build_record", "build_record_raw", "read_hint", "seqs_after", "retired_in", "scan_records",
           "header_snapshot", "SEQ_WIDTH"]
