"""Format v2 over a Storage: where chunk bodies are, reading them, writing records and packs.

A v2 snapshot's chunks are bodies inside containers (run records and packs, spec/v2.md). Their
locations are *hints*: learned from the records a process reads or writes (their body tables
and locators) and verified by digest on every read. When a hint fails (the container is gone,
its bytes do not match) the reader follows, in order (spec/v2.md "Reading a chunk"): the
forward maintenance left for the container (``moved/<container path>``), then the v1 loose
object (``chunks/<xx>/<hex>``), and only then reports the chunk missing.
"""

from __future__ import annotations

import collections
import secrets
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from ckptfs.errors import CkptfsError, CorruptObject, CorruptSnapshot, FormatError, MissingObject
from ckptfs.format import containers as ct
from ckptfs.format import framing
from ckptfs.format.containers import (
    MAX_RECORD_BODIES,
    Container,
    ContainerRef,
    Location,
    PackHeader,
    PackRef,
    RecordRef,
)
from ckptfs.format.digest import Digest
from ckptfs.format.models import ChunkRef
from ckptfs.format.names import chunk_path, forward_path, pack_path, record_path
from ckptfs.storage.base import Storage
from ckptfs.store.header_bases import decode_at

#: how many forwards a reader follows for one chunk before it gives up (maintenance keeps
#: chains at one hop; a longer one means a damaged or hostile store)
MAX_HOPS = 4
#: default bulk thresholds (store settings ``record_bulk_max`` and ``pack_target``)
RECORD_BULK_MAX = 8 * 1024 * 1024
PACK_TARGET = 16 * 1024 * 1024
#: the most bytes one coalesced ranged read may span
MAX_RANGE = 32 * 1024 * 1024
#: record tables a process remembers (the parent of its next commit is the last one)
TABLES_MAX = 64


def record_bulk_max(settings: Mapping[str, Any]) -> int:
    """The most body bytes a record of this store carries: setting ``record_bulk_max``
    (default ``RECORD_BULK_MAX``), capped at the format's ``MAX_RECORD_BODIES``."""
    return min(int(settings.get("record_bulk_max", RECORD_BULK_MAX)), MAX_RECORD_BODIES)


def container_path(ref: ContainerRef) -> str:
    if isinstance(ref, RecordRef):
        return record_path(ref.run, ref.seq)
    return pack_path(ref.digest)


class Locations:
    """Where this process last saw each chunk body: by full digest (bodies it read in a
    container's table or wrote), and by 8-byte prefix (record locators). Hints only. Keyed
    by the digests' raw bytes (hashed in C: a commit looks up every chunk it names)."""

    def __init__(self) -> None:
        self.exact: dict[bytes, Location] = {}
        self.hints: dict[bytes, Location] = {}
        #: bodies this process wrote itself (records, packs): a writer may locate a chunk it
        #: wrote within ``REUSE_WINDOW`` here (spec/v2.md 5.2), never in ``exact``, which also
        #: holds what it read in other records
        self.own: dict[bytes, Location] = {}
        #: the table of each record this process read or wrote recently (bounded): its own
        #: bodies by full digest, its locators by prefix; a commit locates what it relies on
        #: through its parent from the parent's table (spec/v2.md 5.2, "complete locators")
        self.tables: collections.OrderedDict[
            ContainerRef, tuple[Mapping[bytes, Location], Mapping[bytes, Location]]] = (
                collections.OrderedDict())
        #: the record of the snapshot being read (``Repository.ensure_located``) and the
        #: chunks (raw digests) its entries and ledger name: such a chunk is read only from
        #: the places that record gives, so that the outcome of reading a snapshot never
        #: depends on what was read before it (spec/v2.md 6, "One outcome")
        self.focus: ContainerRef | None = None
        self.focus_needs: frozenset[bytes] = frozenset()

    def learn(self, c: Container, ref: ContainerRef) -> None:
        """Remember the bodies (and, for a record, the locators) of container ``c``."""
        bodies = {b.digest.raw: c.location(ref, b) for b in c.header.bodies}
        self.exact.update(bodies)
        h = c.header
        if isinstance(h, ct.RecordHeader):
            prefixed = {x.prefix: Location(h.containers[x.container], x.start, x.stored)
                        for x in h.locators}
            self.hints.update(prefixed)
            self._table(ref, bodies, prefixed)

    def wrote_record(self, ref: ContainerRef, bodies: Mapping[bytes, Location],
                     located: Mapping[bytes, Location]) -> None:
        """Remember the table of a record this process created: its bodies (``bodies``, by
        raw digest) and the locators it wrote (``located``, by raw digest)."""
        self.exact.update(bodies)
        self.own.update(bodies)
        self._table(ref, bodies, located)

    def _table(self, ref: ContainerRef, exact: Mapping[bytes, Location],
               other: Mapping[bytes, Location]) -> None:
        self.tables[ref] = (exact, other)
        self.tables.move_to_end(ref)
        while len(self.tables) > TABLES_MAX:
            self.tables.popitem(last=False)

    def table(self, ref: ContainerRef | None
              ) -> tuple[Mapping[bytes, Location], Mapping[bytes, Location]] | None:
        """The remembered table of record ``ref`` (None: not remembered): a map by full
        digest, and one by full digest or locator prefix (see ``relied``)."""
        return None if ref is None else self.tables.get(ref)

    def relied(self, raw: bytes, parent: ContainerRef | None, wrote: bool) -> Location | None:
        """Where a writer may say chunk ``raw`` is (spec/v2.md 5.2): the parent record's own
        body or locator, else (``wrote``: this writer wrote it within REUSE_WINDOW) the
        container this writer wrote it in. Never a place learned from another record."""
        t = self.table(parent)
        if t is not None:
            loc = t[0].get(raw)
            if loc is None:
                loc = t[1].get(raw) or t[1].get(raw[:ct.LOCATOR_PREFIX])
            if loc is not None:
                return loc
        return self.own.get(raw) if wrote else None

    def only(self, ref: ContainerRef) -> Locations | None:
        """A Locations that knows nothing but record ``ref``'s table (None: not remembered):
        what a process that read only that record knows, so that a read through it has the
        outcome any reader of that one snapshot gets (``verify`` checks each snapshot so)."""
        t = self.table(ref)
        if t is None:
            return None
        fresh = Locations()
        fresh.exact.update(t[0])
        fresh.hints.update({k[:ct.LOCATOR_PREFIX]: v for k, v in t[1].items()})
        fresh._table(ref, *t)
        fresh.focus = ref
        return fresh

    def add(self, where: Mapping[Digest, Location]) -> None:
        """Remember bodies this process wrote (packs, its records' bodies)."""
        raws = {d.raw: loc for d, loc in where.items()}
        self.exact.update(raws)
        self.own.update(raws)

    def put(self, d: Digest, loc: Location) -> None:
        self.exact[d.raw] = loc

    def get(self, d: Digest) -> Location | None:
        return self.get_raw(d.raw)

    def get_raw(self, raw: bytes) -> Location | None:
        """``get`` by the digest's raw bytes."""
        return self.exact.get(raw) or self.hints.get(raw[:ct.LOCATOR_PREFIX])

    def candidates(self, d: Digest) -> list[Location]:
        """Every place this process knows for ``d``, best first: the body it last saw in a
        container's table, then the last record locator with ``d``'s prefix. The first can be
        stale while the second is right (another process's gc deleted the container this
        process once read the body in, keeping the copy a newer record locates), so a reader
        tries them all before it reports the chunk missing (spec/v2.md 3.5, 6)."""
        out: list[Location] = []
        for loc in (self.exact.get(d.raw), self.hints.get(d.raw[:ct.LOCATOR_PREFIX])):
            if loc is not None and loc not in out:
                out.append(loc)
        return out

    def forget(self, containers: Iterable[ContainerRef]) -> None:
        """Drop every location inside ``containers`` (they were deleted or rewritten)."""
        gone = set(containers)
        self.exact = {d: loc for d, loc in self.exact.items() if loc.container not in gone}
        self.hints = {p: loc for p, loc in self.hints.items() if loc.container not in gone}
        self.own = {d: loc for d, loc in self.own.items() if loc.container not in gone}
        for ref in gone:
            self.tables.pop(ref, None)

    def clear(self) -> None:
        self.exact.clear()
        self.hints.clear()
        self.own.clear()
        self.tables.clear()


def read_container(storage: Storage, path: str, *, what: str) -> tuple[Container, bytes]:
    """The whole container at ``path`` (FileNotFoundError when absent), decoded and checked."""
    data = storage.read(path)
    try:
        return decode_at(storage, path, data, what=what), data
    except FormatError as e:
        raise CorruptObject(str(e)) from e


def read_header(storage: Storage, path: str, *, what: str) -> Container:
    """A container's header only: one ranged read of its first 64 KiB, a second one when the
    header is longer (FileNotFoundError when absent)."""
    return header_from(storage, path, storage.read_range(path, 0, ct.HEAD_READ), what=what)


def header_from(storage: Storage, path: str, first: bytes, *, what: str) -> Container:
    """A container's header from its first bytes (read already, say in a batch of ranged
    reads), reading the rest of the header when it is longer than they are."""
    try:
        end = ct.header_length(first, what=what)
        if end > len(first):
            first += storage.read_range(path, len(first), end)
        return decode_at(storage, path, first, what=what, whole=False)
    except FormatError as e:
        raise CorruptObject(str(e)) from e


def unframe_body(stored: bytes | memoryview | None, ref: ChunkRef, *, where: str
                 ) -> bytes | None:
    """A body's content if ``stored`` holds ``ref``'s chunk, else None (absent, short, damaged
    or another chunk: the caller falls back to the next place the chunk may be)."""
    if not stored:
        return None
    try:
        data = framing.unframe(stored, ref.size, what=where)
    except CorruptObject:
        return None
    return data if Digest.of(data) == ref.digest else None


class ChunkReader:
    """Reads chunks of v2 (and v1) stores by location, with the fallbacks of spec/v2.md."""

    def __init__(self, storage: Storage, locations: Locations) -> None:
        self.storage = storage
        self.locations = locations
        #: reads a record again so that its table is remembered (set by the Repository)
        self.reload: Callable[[ContainerRef], None] | None = None

    def read(self, refs: Sequence[ChunkRef], *, where: str) -> list[bytes]:
        """Every chunk of ``refs``, verified; MissingObject / CorruptSnapshot otherwise."""
        out: dict[int, bytes] = {}
        damaged: set[int] = set()  # found at its location, but not with the right digest
        located = [(i, r, self._first(r.digest)) for i, r in enumerate(refs)]
        batch = [(i, r, loc) for i, r, loc in located if loc is not None]
        for (i, r, _), got in zip(batch, self._fetch([loc for _, _, loc in batch])):
            data = unframe_body(got, r, where=f"{where}: chunk {r.digest}")
            if data is not None:
                out[i] = data
            elif got is not None:
                damaged.add(i)
        for i, r in enumerate(refs):
            if i not in out:
                out[i] = self._fallback(r, where=where, damaged=i in damaged)
        return [out[i] for i in range(len(refs))]

    def read_stored(self, refs: Sequence[ChunkRef], *, where: str) -> list[bytes]:
        """Every chunk of ``refs`` as its stored (framed) body, verified by digest: what a copy
        writes again without framing it afresh. A chunk found only through a fallback (a
        forward, a loose v1 object) is read as ``read`` does and framed anew."""
        out: dict[int, bytes] = {}
        located = [(i, r, self._first(r.digest)) for i, r in enumerate(refs)]
        batch = [(i, r, loc) for i, r, loc in located if loc is not None]
        for (i, r, _), got in zip(batch, self._fetch([loc for _, _, loc in batch])):
            if got is not None and unframe_body(got, r, where=f"{where}: chunk {r.digest}"
                                                ) is not None:
                out[i] = bytes(got)
        rest = [i for i in range(len(refs)) if i not in out]
        for i, data in zip(rest, self.read([refs[i] for i in rest], where=where)):
            out[i] = framing.frame(data)
        return [out[i] for i in range(len(refs))]

    def _fetch(self, locs: Sequence[Location]) -> list[bytes | None]:
        """The stored bytes at each location, in as few ranged reads as coalescing allows."""
        if not locs:
            return []
        spans = [s for s in ct.body_ranges(locs) if s[2] - s[1] <= MAX_RANGE]
        got = self.storage.read_ranges([(container_path(c), a, b) for c, a, b in spans])
        held: dict[ContainerRef, list[tuple[int, int, bytes | None]]] = {}
        for (c, a, b), data in zip(spans, got):
            held.setdefault(c, []).append((a, b, data))
        out: list[bytes | None] = []
        for loc in locs:  # each against its own container's spans (usually one), not all
            piece: bytes | None = None
            for a, b, data in held.get(loc.container, ()):
                if a <= loc.start and loc.start + loc.stored <= b:
                    if data is not None:
                        piece = data[loc.start - a:loc.start - a + loc.stored]
                    break
            out.append(piece)
        return out

    def _owned(self, d: Digest) -> bool:
        """Whether ``d`` is a chunk the snapshot being read names: then only its record's
        places count (spec/v2.md 6, "One outcome"; other chunks, say those of a Snapshot held
        across another read, keep every place this process knows)."""
        return self.locations.focus is not None and d.raw in self.locations.focus_needs

    def _first(self, d: Digest) -> Location | None:
        """The first place to read ``d`` at: its own record's body or locator for a chunk of
        the snapshot being read (None: a hole), else the last place this process saw it."""
        return self._focused(d) if self._owned(d) else self.locations.get(d)

    def _places(self, digest: Digest, tried: list[Location]) -> Iterator[Location]:
        """The remembered places, then the snapshot's own record's (spec/v2.md 6), which is
        looked up (and its record read again if need be) only when those failed."""
        yield from tried
        own = self._focused(digest)
        if own is not None and own not in tried:
            yield own

    def _fallback(self, ref: ChunkRef, *, where: str, damaged: bool = False) -> bytes:
        """Each place this process knows for the chunk (``Locations.candidates``; the first
        was tried already) and the forwards of each, then the loose v1 object, then missing
        (``damaged``: bytes were found somewhere but they are not the chunk; then a chunk no
        other place holds is corrupt, not missing, spec/v2.md 6 step 5)."""
        what = f"{where}: chunk {ref.digest}"
        if self._owned(ref.digest):  # the record's own place only (tried already), a hole: none
            own = self._focused(ref.digest)
            tried = [] if own is None else [own]
            places: Iterable[Location] = tried
        else:
            tried = self.locations.candidates(ref.digest)
            places = self._places(ref.digest, tried)
        for n, loc in enumerate(places):
            if n or not tried:  # the first remembered place was tried already
                got = self._fetch([loc])[0]
                data = unframe_body(got, ref, where=what)
                if data is not None:
                    self.locations.put(ref.digest, loc)
                    return data
                damaged = damaged or got is not None
            found, damaged = self._forwarded(ref, loc, what, damaged)
            if found is not None:
                return found
        try:
            stored: bytes | None = self.storage.read(chunk_path(ref.digest))
        except FileNotFoundError:
            stored = None
        if stored is not None:
            data = unframe_body(stored, ref, where=what)
            if data is not None:
                return data
            damaged = True
        if damaged:
            raise CorruptSnapshot(f"{what} does not match its digest where the store holds it "
                                  "(bytes flipped on disk?). Run 'ckptfs verify'.")
        raise MissingObject(
            f"{what} is missing from the store (no container, forward or loose object holds "
            "it); the snapshot cannot be restored. Run 'ckptfs verify' to list every affected "
            "snapshot.")

    def _focused(self, d: Digest) -> Location | None:
        """Where the record of the snapshot being read says ``d`` is (read again when this
        process no longer remembers its table), or None."""
        focus = self.locations.focus
        if focus is None:
            return None
        if self.locations.table(focus) is None and self.reload is not None:
            try:
                self.reload(focus)
            except CkptfsError:
                return None
        return self.locations.relied(d.raw, focus, wrote=False)

    def _forwarded(self, ref: ChunkRef, loc: Location | None, what: str, damaged: bool
                   ) -> tuple[bytes | None, bool]:
        """The chunk through the forwards of ``loc``'s container (at most MAX_HOPS), or None;
        and whether damaged bytes were met on the way."""
        hops = 0
        while loc is not None and hops < MAX_HOPS:
            hops += 1
            try:
                fwd = ct.Forward.from_bytes(
                    self.storage.read(forward_path(container_path(loc.container))), what=what)
            except FileNotFoundError:
                break
            except FormatError:  # a damaged forward is absent for reading (spec/v2.md 8)
                break
            loc = fwd.bodies.get(ref.digest)
            if loc is None:
                break
            got = self._fetch([loc])[0]
            data = unframe_body(got, ref, where=what)
            if data is not None:
                self.locations.put(ref.digest, loc)
                return data, damaged
            damaged = damaged or got is not None
        return None, damaged


def created_now() -> int:
    """A new pack's ``created`` (ms since the epoch; the conformance generator fixes this
    module's clock, so every writer of packs takes it from here)."""
    return int(time.time() * 1000)


def random_order(storage: Storage) -> bool:
    """Whether packs written to ``storage`` take their bodies in random order: on an encrypted
    store (spec/encryption.md 5.3: the order of bodies in a pack does not follow the order a
    manifest names them, restic 0.18's random assignment)."""
    from ckptfs.storage.encrypted import EncryptedStorage

    return isinstance(storage, EncryptedStorage)


def shuffled(items: list[Any]) -> list[Any]:
    """``items`` in an order drawn from the operating system's CSPRNG (a new list)."""
    out = list(items)
    secrets.SystemRandom().shuffle(out)
    return out


def pack_bodies(bodies: Sequence[tuple[Digest, int, bytes]], *, target: int, writer: str,
                created: int | None = None, shuffle: bool = False
                ) -> tuple[list[tuple[str, bytes]], dict[Digest, Location]]:
    """Packs of at most about ``target`` bytes for framed ``bodies``: their (path, bytes) and
    where each body is in them. ``shuffle`` (``random_order``): each pack's bodies in a random
    order (which bodies share a pack still follows ``bodies``, so a blob's packs are read in
    turn)."""
    created = created_now() if created is None else created
    groups: list[list[tuple[Digest, int, bytes]]] = [[]]
    size = 0
    for b in bodies:
        if groups[-1] and size + len(b[2]) > target:
            groups.append([])
            size = 0
        groups[-1].append(b)
        size += len(b[2])
    objects: list[tuple[str, bytes]] = []
    where: dict[Digest, Location] = {}
    for g in groups:
        if not g:
            continue
        table, area, area_length = ct.layout_parts(shuffled(g) if shuffle else g)
        data, name, start = ct.encode_pack(
            PackHeader(created=created, writer=writer, bodies=table, body_length=area_length),
            area)
        objects.append((pack_path(name), data))
        ref = PackRef(name)
        where.update({b.digest: Location(ref, start + b.offset, b.stored) for b in table})
    return objects, where


def container_exists(storage: Storage, ref: ContainerRef) -> bool:
    return storage.exists(container_path(ref))


def locatable(storage: Storage, locations: Locations, digests: Iterable[Digest],
              seen: dict[ContainerRef, bool] | None = None,
              fixed: Mapping[bytes, Location] | None = None) -> list[Digest]:
    """The digests among ``digests`` that no existing container, forward or loose object
    holds (one existence check per distinct container, remembered in ``seen``; used after a
    sweep overlapped a commit, and by verify without read_data). ``fixed``: the locators of
    the record just committed: a digest it locates counts as held only where that locator
    (or its forward) says, since that is where every reader of the record finds it."""
    lost = []
    seen = {} if seen is None else seen
    for d in digests:
        mine = None if fixed is None else fixed.get(d.raw)
        places = [mine] if mine is not None else locations.candidates(d)
        if any(_held_at(storage, loc, d, seen) for loc in places):
            continue
        if not storage.exists(chunk_path(d)):
            lost.append(d)
    return lost


def _held_at(storage: Storage, loc: Location, d: Digest, seen: dict[ContainerRef, bool]
             ) -> bool:
    """Whether ``loc``'s container exists, or its forward moves ``d`` to one that does."""
    ok = seen.get(loc.container)
    if ok is None:
        ok = seen[loc.container] = container_exists(storage, loc.container)
    if ok:
        return True
    try:
        fwd = ct.Forward.from_bytes(
            storage.read(forward_path(container_path(loc.container))), what="forward")
    except (FileNotFoundError, FormatError):
        return False
    moved = fwd.bodies.get(d)
    return moved is not None and container_exists(storage, moved.container)
