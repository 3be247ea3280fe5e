"""Format v2 containers: run records and packs that carry framed chunk bodies (spec/v2.md).

A container is one file:

    magic (8 bytes, b"\\x89CKPFS\\r\\n") | form (1 byte, 0x02 or 0x03) | hlen (4 bytes, big-endian)
    | header (hlen bytes) | BLAKE3-256(header) (32 bytes) | body area

The header is one canonical CBOR map, stored as is (form 0x02) or, in a run record of a store
that requires ``compressed-headers``, as one zstd frame that declares its content size (form
0x03): a record's header is mostly its manifest and locators, which halve under zstd, while a
pack's header is a table of digests that does not shrink (packs are always form 0x02, so a pack
moved whole is readable in any store). The header digest covers the stored bytes, so a damaged
header is found before anything is inflated.

The header's ``bodies`` table lists each chunk body as ``[digest, offset, stored, size]``:
``offset`` counts from the start of the body area (so the header never depends on its own
length), ``stored`` is the length of the body (v1 object framing: a codec byte, then raw bytes
or one zstd frame), ``size`` the chunk's uncompressed length. ``body_length`` is the length of
the body area, so a torn file is told from a whole one without trusting the file system.

Records (``kind: "record"``) are the commit point of one snapshot and carry its manifest's
canonical bytes, the bodies this commit added, and *locators*: where the other chunks it names
were when it was written (hints; every body is verified by its digest when read). Packs
(``kind: "pack"``) hold bulk bodies and are named by the BLAKE3 of the whole file. This module
is pure: it encodes and decodes bytes and checks every rule a reader must check.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import attrs
import blake3

from ckptfs.errors import FormatError
from ckptfs.format import cbor, framing
from ckptfs.format.digest import DIGEST_SIZE, Digest
from ckptfs.format.models import MAX_CHUNK_SIZE, MAX_MANIFEST_SIZE, NONCE_SIZE
from ckptfs.format.names import check_run_id

MAGIC = b"\x89CKPFS\r\n"
CONTAINER_VERSION = 2
#: the form byte of a container whose header is one zstd frame (spec/v2.md 3.1)
CONTAINER_COMPRESSED = 3
#: the form byte of a record whose header is stored by reference: a zstd frame compressed
#: against the header of an earlier record of its run (spec/v2.md 3.1.2, ``delta-headers``)
CONTAINER_BY_BASE = 4
FORMS = (CONTAINER_VERSION, CONTAINER_COMPRESSED, CONTAINER_BY_BASE)
#: the most form 0x04 records a reader follows from one record to a header of another form
#: (spec/v2.md 3.1.2): a longer chain is ``corrupt``
MAX_BASE_DEPTH = 64
#: ``(base seq, depth) -> that record's header``: how a form 0x04 header finds its base (the
#: caller knows the run: the record's path); ``depth`` counts form 0x04 records followed so far
HeaderBase = Callable[[int, int], bytes]
PREFIX_LEN = len(MAGIC) + 1 + 4  # magic, version byte, hlen
#: a header carries at most the manifest (64 MiB) plus its tables
MAX_HEADER_SIZE = MAX_MANIFEST_SIZE + 16 * 1024 * 1024
#: a body's stored length: the codec byte plus at most zstd's worst-case expansion of 16 MiB
MAX_STORED_SIZE = MAX_CHUNK_SIZE + 128 * 1024 + 1
#: a container's body area (packs are written up to 64 MiB; readers refuse more than this)
MAX_BODY_AREA = 256 * 1024 * 1024
MAX_BODIES = 65536
#: the most body bytes a writer puts in a record (setting ``record_bulk_max`` is capped here)
MAX_RECORD_BODIES = 48 * 1024 * 1024
#: the largest files a reader accepts: a record (its header holds the whole manifest) and a
#: pack (64 MiB of bodies and a table of at most MAX_BODIES rows)
MAX_RECORD_FILE = PREFIX_LEN + MAX_HEADER_SIZE + DIGEST_SIZE + MAX_RECORD_BODIES
MAX_PACK_FILE = PREFIX_LEN + 8 * 1024 * 1024 + DIGEST_SIZE + 64 * 1024 * 1024
MAX_FORWARD_SIZE = 8 * 1024 * 1024
#: the length of a locator's digest prefix: locators are hints, a collision costs a fallback
LOCATOR_PREFIX = 8
#: readers fetch this much of a record first: header and small bodies in one request
HEAD_READ = 64 * 1024
HINT_CHECK = 8


def is_container(data: bytes | memoryview) -> bool:
    """True when ``data`` starts like a v2 container (a v1 record starts with a CBOR map)."""
    return bytes(data[: len(MAGIC)]) == MAGIC


@attrs.frozen(slots=True)
class Body:
    """One framed chunk body inside a container (``offset`` relative to the body area)."""

    digest: Digest
    offset: int
    stored: int
    size: int

    def to_cbor(self) -> list[Any]:
        return [self.digest.raw, self.offset, self.stored, self.size]


@attrs.frozen(slots=True)
class RecordRef:
    """A container that is a run record: ``runs/<run>/<seq>``."""

    run: str
    seq: int

    def to_cbor(self) -> list[Any]:
        return [self.run, self.seq]


@attrs.frozen(slots=True)
class PackRef:
    """A container that is a pack: ``packs/<xx>/<hex>``, named by the digest of its bytes."""

    digest: Digest

    def to_cbor(self) -> bytes:
        return self.digest.raw


ContainerRef = RecordRef | PackRef


@attrs.frozen(slots=True)
class Location:
    """Where one chunk body is: a container and the body's absolute byte range in it."""

    container: ContainerRef
    start: int
    stored: int


@attrs.frozen(slots=True)
class Locator:
    """A record's hint for a chunk that is not one of its bodies."""

    prefix: bytes
    container: int  # index into the record's locator containers
    start: int
    stored: int


@attrs.frozen
class RecordHeader:
    """The header of a v2 run record: the commit of snapshot ``snapshot`` at ``run``/``seq``."""

    run: str
    seq: int
    snapshot: Digest
    created: int
    nonce: bytes
    manifest: bytes = attrs.field(repr=False)
    bodies: tuple[Body, ...] = ()
    containers: tuple[ContainerRef, ...] = ()
    locators: tuple[Locator, ...] = ()
    body_length: int = 0
    extra: Mapping[str, Any] = attrs.field(factory=dict, repr=False)

    @property
    def size(self) -> int:
        return len(self.manifest)

    def to_cbor(self) -> dict[str, Any]:
        return {**self.extra, "kind": "record", "run": self.run, "seq": self.seq,
                "snapshot": self.snapshot.raw, "size": len(self.manifest),
                "created": self.created, "nonce": self.nonce, "manifest": self.manifest,
                "bodies": [b.to_cbor() for b in self.bodies],
                "locators": {"containers": [c.to_cbor() for c in self.containers],
                             "chunks": [[x.prefix, x.container, x.start, x.stored]
                                        for x in self.locators]},
                "body_length": self.body_length}


@attrs.frozen
class PackHeader:
    """The header of a pack: bulk bodies written before the record that names them."""

    created: int
    writer: str
    bodies: tuple[Body, ...] = ()
    body_length: int = 0
    extra: Mapping[str, Any] = attrs.field(factory=dict, repr=False)

    def to_cbor(self) -> dict[str, Any]:
        return {**self.extra, "kind": "pack", "created": self.created, "writer": self.writer,
                "bodies": [b.to_cbor() for b in self.bodies], "body_length": self.body_length}


Header = RecordHeader | PackHeader


@attrs.frozen
class Container:
    """A decoded container: its header and where its body area starts in the file."""

    header: Header
    body_start: int
    #: the header's canonical CBOR, inflated (the dictionary a later record's header may be
    #: compressed against, spec/v2.md 3.1.2)
    plain: bytes = attrs.field(default=b"", repr=False, eq=False)
    #: the record whose header this one's is stored against (form 0x04), else None
    base: int | None = None

    def location(self, ref: ContainerRef, body: Body) -> Location:
        return Location(ref, self.body_start + body.offset, body.stored)

    def body_bytes(self, data: bytes | memoryview, body: Body) -> bytes:
        start = self.body_start + body.offset
        return bytes(data[start:start + body.stored])


# -- encoding -------------------------------------------------------------------------------------
def layout(framed: Iterable[tuple[Digest, int, bytes]]) -> tuple[tuple[Body, ...], bytes]:
    """The body table and body area for ``(digest, size, framed bytes)`` items, in order."""
    bodies, parts, _ = layout_parts(framed)
    return bodies, b"".join(parts)


def layout_parts(framed: Iterable[tuple[Digest, int, bytes]]
                 ) -> tuple[tuple[Body, ...], list[bytes], int]:
    """As ``layout``, with the body area left as its parts (and their total length): ``encode``
    joins them with the prefix and header in one copy instead of two (a 16 MiB pack's bodies
    were copied into an area, then the area into the container)."""
    bodies = []
    parts = []
    offset = 0
    for d, size, stored in framed:
        bodies.append(Body(d, offset, len(stored), size))
        parts.append(stored)
        offset += len(stored)
    return tuple(bodies), parts, offset


def frame_bodies(chunks: Iterable[tuple[Digest, bytes | memoryview]]
                 ) -> list[tuple[Digest, int, bytes]]:
    """Frame chunk contents as bodies (v1 object framing), dropping repeated digests."""
    out = []
    seen: set[Digest] = set()
    for d, data in chunks:
        if d not in seen:
            seen.add(d)
            out.append((d, len(data), framing.frame(data)))
    return out


def encode(header_cbor: dict[str, Any], area: bytes | Sequence[bytes], *,
           compress: bool = False) -> tuple[bytes, int]:
    """A container's bytes from its header map and body area (bytes, or its parts in order:
    ``layout_parts``); also the body area's offset. ``compress``: store the header as a zstd
    frame (form 0x03) when that is smaller; only for records, only in a store that requires
    ``compressed-headers`` (the caller knows the store; this module does not)."""
    return encode_bytes(cbor.encode(header_cbor), area, compress=compress)


def encode_bytes(header: bytes, area: bytes | Sequence[bytes], *,
                 compress: bool = False, base: tuple[int, bytes] | None = None
                 ) -> tuple[bytes, int]:
    """``encode`` with the header map already encoded (canonically). ``base``: ``(seq,
    header)`` of an earlier record of the same run: store the header by reference, compressed
    against that record's header (form 0x04; only a store that requires ``delta-headers``,
    only the writer's parent record, spec/v2.md 3.1.2)."""
    if len(header) > MAX_HEADER_SIZE:
        raise FormatError(f"container header would be {len(header)} bytes, over {MAX_HEADER_SIZE}")
    cbor.check_items(header, what="container header")
    form = CONTAINER_VERSION
    if base is not None:
        header = cbor.encode([base[0], framing.deflate_with(header, base[1])])
        form = CONTAINER_BY_BASE
    elif compress:
        z = framing.deflate(header)
        if len(z) < len(header):
            header, form = z, CONTAINER_COMPRESSED
    start = PREFIX_LEN + len(header) + DIGEST_SIZE
    body = [area] if isinstance(area, bytes) else list(area)
    data = b"".join([MAGIC, bytes([form]), len(header).to_bytes(4, "big"), header,
                     blake3.blake3(header).digest(), *body])
    return data, start


def encode_record(header: RecordHeader, area: bytes | Sequence[bytes], *,
                  compress: bool = False) -> tuple[bytes, int]:
    return encode(header.to_cbor(), area, compress=compress)


def encode_pack(header: PackHeader, area: bytes | Sequence[bytes]) -> tuple[bytes, Digest, int]:
    """A pack's bytes, its name (the digest of those bytes) and its body area's offset."""
    data, start = encode(header.to_cbor(), area)
    return data, Digest.of(data), start


# -- decoding -------------------------------------------------------------------------------------
def header_length(prefix: bytes | memoryview, *, what: str) -> int:
    """How many bytes the magic, form byte, stored header and header digest take (from the
    first 13)."""
    if len(prefix) < PREFIX_LEN or not is_container(prefix):
        raise FormatError(f"{what}: not a ckptfs v2 container (bad magic or truncated)")
    if prefix[len(MAGIC)] not in FORMS:
        raise FormatError(f"{what}: container form byte {prefix[len(MAGIC)]} is not 2, 3 or 4 "
                          "(a newer ckptfs may have written it; or the file is damaged)")
    hlen = int.from_bytes(prefix[len(MAGIC) + 1:PREFIX_LEN], "big")
    if not 1 <= hlen <= MAX_HEADER_SIZE:
        raise FormatError(f"{what}: header length {hlen} is out of range")
    return PREFIX_LEN + hlen + DIGEST_SIZE


def base_of(data: bytes | memoryview, *, what: str) -> int | None:
    """The seq of the record whose header a form 0x04 record's header is stored against, from
    the record's first bytes (no inflating, no base needed); None for the other forms.
    FormatError when the stored header is not ``[base, frame]``."""
    end = header_length(data, what=what)
    if data[len(MAGIC)] != CONTAINER_BY_BASE:
        return None
    if len(data) < end:
        raise FormatError(f"{what}: truncated inside its header ({len(data)} of {end} bytes)")
    return _by_base(bytes(data[PREFIX_LEN:end - DIGEST_SIZE]), what)[0]


#: bytes of a record's start that hold a form 0x04 record's base seq (``peek_base``)
PEEK_BASE = PREFIX_LEN + 1 + 9


def peek_base(first: bytes | memoryview) -> int | None:
    """The base seq a form 0x04 record names, from its first PEEK_BASE bytes only (the
    stored header starts with the array head and the base's uint): no digest check, no
    inflating. For maintenance that keeps bases (spec/v2.md 9.1), which keeps more when in
    doubt; readers decode (``decode``). None for another form or bytes that do not say."""
    if len(first) < PREFIX_LEN + 2 or not is_container(first) \
            or first[len(MAGIC)] != CONTAINER_BY_BASE or first[PREFIX_LEN] != 0x82:
        return None
    head = first[PREFIX_LEN + 1]
    if head >> 5 != 0:
        return None
    info = head & 0x1F
    if info < 24:
        return info or None
    n = {24: 1, 25: 2, 26: 4, 27: 8}.get(info)
    at = PREFIX_LEN + 2
    if n is None or len(first) < at + n:
        return None
    return int.from_bytes(first[at:at + n], "big") or None


def _by_base(stored: bytes, what: str) -> tuple[int, bytes]:
    """A form 0x04 stored header: ``[base, frame]``, base >= 1 (spec/v2.md 3.1.2)."""
    v = cbor.decode(stored, what=f"{what} header reference")
    if not (isinstance(v, list) and len(v) == 2 and type(v[0]) is int and v[0] >= 1
            and type(v[1]) is bytes):
        raise FormatError(f"{what}: a form 0x04 header must be [base seq, zstd frame]")
    return v[0], v[1]


def plain_header(data: bytes | memoryview, *, what: str, base: HeaderBase | None = None,
                 depth: int = 0) -> tuple[bytes, int | None]:
    """A container's header as canonical CBOR bytes (inflated; for form 0x04 through ``base``,
    which gives the base record's header), after the checks of spec/v2.md 3.1 steps 1-3; also
    the base seq of a form 0x04 record. ``depth``: form 0x04 records followed to get here."""
    end = header_length(data, what=what)
    if len(data) < end:
        raise FormatError(f"{what}: truncated inside its header ({len(data)} of {end} bytes)")
    header = bytes(data[PREFIX_LEN:end - DIGEST_SIZE])
    if blake3.blake3(header).digest() != bytes(data[end - DIGEST_SIZE:end]):
        raise FormatError(f"{what}: header digest mismatch (the header is damaged)")
    form = data[len(MAGIC)]
    if form == CONTAINER_COMPRESSED:
        header = framing.inflate_declared(memoryview(header), MAX_HEADER_SIZE,
                                          what=f"{what} header")
    elif form == CONTAINER_BY_BASE:
        seq, frame = _by_base(header, what)
        if depth >= MAX_BASE_DEPTH:
            raise FormatError(f"{what}: its header is stored against a chain of more than "
                              f"{MAX_BASE_DEPTH} records (spec/v2.md 3.1.2)")
        if base is None:
            raise FormatError(f"{what}: container form 0x04 (a header stored against record "
                              f"{seq} of its run) in a store whose config does not require "
                              "'delta-headers' (spec/v2.md 3.1.2): only 0x02 and 0x03 exist "
                              "there")
        header = framing.inflate_declared(memoryview(frame), MAX_HEADER_SIZE,
                                          what=f"{what} header", base=base(seq, depth + 1))
        return header, seq
    return header, None


def decode(data: bytes | memoryview, *, what: str, whole: bool = True,
           base: HeaderBase | None = None, depth: int = 0) -> Container:
    """Decode and check a container's header (``whole``: ``data`` is the complete file and its
    length must match; otherwise ``data`` holds at least the header). ``base``: where a form
    0x04 record's base headers come from (its run's records; ``plain_header``)."""
    end = header_length(data, what=what)
    header, base_seq = plain_header(data, what=what, base=base, depth=depth)
    m = cbor.decode(header, what=f"{what} header")
    if not isinstance(m, dict):
        raise FormatError(f"{what}: header must be a CBOR map")
    kind = m.get("kind")
    if base_seq is not None and kind != "record":
        raise FormatError(f"{what}: a form 0x04 header is a record's, stored against an "
                          "earlier record of its run")
    parsed: Header
    if kind == "record":
        parsed = _record(m, what)
    elif kind == "pack":  # writers keep packs in form 0x02; readers read either (v2.md 2)
        parsed = _pack(m, what)
    else:
        raise FormatError(f"{what}: unknown container kind {kind!r:.40}")
    if base_seq is not None and not (isinstance(parsed, RecordHeader) and base_seq < parsed.seq):
        raise FormatError(f"{what}: a form 0x04 header is a record's, stored against an "
                          "earlier record of its run")
    if whole and len(data) != end + parsed.body_length:
        raise FormatError(f"{what}: {len(data)} bytes, but its header says "
                          f"{end + parsed.body_length} (torn or padded)")
    return Container(parsed, end, header, base_seq)


def _uint(m: Mapping[str, Any], key: str, what: str, maximum: int = 2 ** 64 - 1) -> int:
    v = m.get(key)
    if type(v) is not int or not 0 <= v <= maximum:
        raise FormatError(f"{what}: {key!r} must be an unsigned integer up to {maximum}")
    return v


def _bodies(v: Any, body_length: int, what: str) -> tuple[Body, ...]:
    if not isinstance(v, list) or len(v) > MAX_BODIES:
        raise FormatError(f"{what}: 'bodies' must be a list of at most {MAX_BODIES}")
    out = []
    end = 0
    seen: set[bytes] = set()
    for i, b in enumerate(v):
        w = f"{what} body {i}"
        if not (isinstance(b, list) and len(b) == 4 and type(b[0]) is bytes
                and len(b[0]) == DIGEST_SIZE and all(type(x) is int for x in b[1:])):
            raise FormatError(f"{w}: must be [digest, offset, stored, size]")
        _, off, stored, size = b
        if off != end:
            raise FormatError(f"{w}: offset {off}, expected {end} (bodies are back to back)")
        if not 2 <= stored <= MAX_STORED_SIZE or not 1 <= size <= MAX_CHUNK_SIZE:
            raise FormatError(f"{w}: stored length {stored} or size {size} out of range")
        if b[0] in seen:
            raise FormatError(f"{w}: digest repeated in one container")
        seen.add(b[0])
        out.append(Body(Digest(b[0]), off, stored, size))
        end = off + stored
    if end != body_length:
        raise FormatError(f"{what}: bodies cover {end} bytes, 'body_length' says {body_length}")
    return tuple(out)


def container_ref(v: Any, what: str) -> ContainerRef:
    if type(v) is bytes and len(v) == DIGEST_SIZE:
        return PackRef(Digest(v))
    if (isinstance(v, list) and len(v) == 2 and type(v[0]) is str and type(v[1]) is int
            and v[1] >= 1):
        try:
            return RecordRef(check_run_id(v[0]), v[1])
        except ValueError as e:
            raise FormatError(f"{what}: {e}") from e
    raise FormatError(f"{what}: a container is a pack digest or [run, seq]")


def _locators(v: Any, what: str) -> tuple[tuple[ContainerRef, ...], tuple[Locator, ...]]:
    if not isinstance(v, dict) or not isinstance(v.get("containers"), list) \
            or not isinstance(v.get("chunks"), list):
        raise FormatError(f"{what}: 'locators' must be {{containers: [...], chunks: [...]}}")
    containers = tuple(container_ref(c, f"{what} locator container {i}")
                       for i, c in enumerate(v["containers"]))
    out = []
    prefixes: set[bytes] = set()
    for i, x in enumerate(v["chunks"]):
        if not (isinstance(x, list) and len(x) == 4 and type(x[0]) is bytes
                and len(x[0]) == LOCATOR_PREFIX and all(type(n) is int for n in x[1:])):
            raise FormatError(f"{what} locator {i}: must be [prefix, container, start, stored]")
        if not 0 <= x[1] < len(containers) or x[2] < 0 or not 2 <= x[3] <= MAX_STORED_SIZE:
            raise FormatError(f"{what} locator {i}: container index or range out of bounds")
        if x[0] in prefixes:  # spec/v2.md 3.5: a reader never chooses between two rows
            raise FormatError(f"{what} locator {i}: a second row with prefix {x[0].hex()}")
        prefixes.add(x[0])
        out.append(Locator(x[0], x[1], x[2], x[3]))
    return containers, tuple(out)


_RECORD_KEYS = {"kind", "run", "seq", "snapshot", "size", "created", "nonce", "manifest",
                "bodies", "locators", "body_length"}


def _record(m: dict[str, Any], what: str) -> RecordHeader:
    try:
        run = check_run_id(m.get("run"))
    except ValueError as e:
        raise FormatError(f"{what}: {e}") from e
    seq = _uint(m, "seq", what)
    if seq < 1:
        raise FormatError(f"{what}: seq starts at 1")
    snap = m.get("snapshot")
    nonce = m.get("nonce")
    manifest = m.get("manifest")
    if type(snap) is not bytes or len(snap) != DIGEST_SIZE:
        raise FormatError(f"{what}: 'snapshot' must be a 32-byte digest")
    if type(nonce) is not bytes or len(nonce) != NONCE_SIZE:
        raise FormatError(f"{what}: 'nonce' must be {NONCE_SIZE} bytes")
    if type(manifest) is not bytes:
        raise FormatError(f"{what}: 'manifest' must be the manifest's bytes")
    if _uint(m, "size", what, MAX_MANIFEST_SIZE) != len(manifest):
        raise FormatError(f"{what}: 'size' is not the manifest's length")
    body_length = _uint(m, "body_length", what, MAX_BODY_AREA)
    containers, locators = _locators(m.get("locators"), what)
    return RecordHeader(run=run, seq=seq, snapshot=Digest(snap), created=_uint(m, "created", what),
                        nonce=nonce, manifest=manifest,
                        bodies=_bodies(m.get("bodies"), body_length, what),
                        containers=containers, locators=locators, body_length=body_length,
                        extra={k: v for k, v in m.items() if k not in _RECORD_KEYS})


_PACK_KEYS = {"kind", "created", "writer", "bodies", "body_length"}


def _pack(m: dict[str, Any], what: str) -> PackHeader:
    writer = m.get("writer")
    if type(writer) is not str:
        raise FormatError(f"{what}: 'writer' must be text")
    body_length = _uint(m, "body_length", what, MAX_BODY_AREA)
    bodies = _bodies(m.get("bodies"), body_length, what)
    if not bodies:
        raise FormatError(f"{what}: a pack holds at least one body")
    return PackHeader(created=_uint(m, "created", what), writer=writer, bodies=bodies,
                      body_length=body_length,
                      extra={k: v for k, v in m.items() if k not in _PACK_KEYS})


def locations(c: Container, ref: ContainerRef) -> dict[Digest, Location]:
    """Where each body of container ``c`` (itself at ``ref``) is."""
    return {b.digest: c.location(ref, b) for b in c.header.bodies}


def record_locations(c: Container, ref: RecordRef) -> tuple[dict[Digest, Location],
                                                          dict[bytes, Location]]:
    """A record's own bodies by digest, and its locators by digest prefix."""
    assert isinstance(c.header, RecordHeader)
    h = c.header
    hints = {x.prefix: Location(h.containers[x.container], x.start, x.stored)
             for x in h.locators}
    return locations(c, ref), hints


def _raw(d: Digest) -> bytes:
    return d.raw


def make_locators(where: Mapping[Digest, Location]
                  ) -> tuple[tuple[ContainerRef, ...], tuple[Locator, ...]]:
    """The locator table for chunks at ``where`` (sorted by digest, containers numbered in
    order of first use)."""
    index: dict[ContainerRef, int] = {}
    out = []
    # sorted by the raw bytes (the same order as Digest's): a C-level key sort, not attrs __lt__
    last = b""
    for d in sorted(where, key=_raw):
        loc = where[d]
        i = index.setdefault(loc.container, len(index))
        prefix = d.raw[:LOCATOR_PREFIX]
        if prefix == last:  # sorted: a shared prefix is adjacent (spec/v2.md 3.5, 2^-64 a pair)
            raise FormatError(f"chunks {d} and the one before it share their first "
                              f"{LOCATOR_PREFIX} bytes, which no record may locate both by; "
                              "the commit is refused (commit again with different content)")
        last = prefix
        out.append(Locator(prefix, i, loc.start, loc.stored))
    return tuple(index), tuple(out)


def _range_key(loc: Location) -> tuple[int, str | bytes, int, int]:
    """Sort key of a body's location: its container's fields, then its start (no ``repr`` of
    the container per body, which cost about a microsecond each)."""
    c = loc.container
    if isinstance(c, RecordRef):
        return (0, c.run, c.seq, loc.start)
    return (1, c.digest.raw, 0, loc.start)


def body_ranges(locs: Sequence[Location], gap: int = 256 * 1024
                ) -> list[tuple[ContainerRef, int, int]]:
    """Coalesce body ranges of one container whose gaps are under ``gap`` into single reads:
    ``(container, start, end)`` each, in order (records by run and seq, then packs; by start
    in each: a container's file is read front to back)."""
    out: list[tuple[ContainerRef, int, int]] = []
    for loc in sorted(locs, key=_range_key):
        end = loc.start + loc.stored
        if out and out[-1][0] == loc.container and loc.start - out[-1][2] <= gap:
            c, s, e = out[-1]
            out[-1] = (c, s, max(e, end))
        else:
            out.append((loc.container, loc.start, end))
    return out


# the files beside containers (spec/v2.md 4, 7), defined with what they point at
from ckptfs.format.pointers import Forward as Forward  # noqa: E402  (re-exported: old home)
from ckptfs.format.pointers import HeadHint as HeadHint  # noqa: E402
