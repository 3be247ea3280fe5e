"""The format's values: store config, snapshot manifest, entries and run records.

Each has ``to_cbor()`` (the plain map written canonically) and ``from_cbor()`` (strict
validation of a decoded map: missing or mistyped fields raise FormatError). Unknown keys are
ignored by readers (forward-compatible optional additions); anything a reader must understand is
announced in ``required`` feature lists instead, which fail closed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import attrs

from ckptfs.errors import FormatError, UnsupportedFeature, UnsupportedVersion
from ckptfs.format import cbor
from ckptfs.format.cdc import ChunkerParams
from ckptfs.format.digest import Digest
from ckptfs.format.names import check_boundary, check_entry_name, check_label_key, check_run_id

FORMAT_NAME = "ckptfs"
#: the newest store layout this implementation reads and writes (spec/v2.md); it reads 1 too
FORMAT_VERSION = 2
SUPPORTED_VERSIONS = (1, 2)
#: manifests keep version 1 in every store layout: a snapshot id never changes (spec/v2.md)
MANIFEST_VERSION = 1
#: Features this implementation understands (a store or manifest may require any of these).
#: ``typed-values``: value entries may hold tag 27 typed values (spec/format.md 18, issue 17)
#: ``complete-locators`` (store config only, spec/v2.md 2 and 9.2): every writer of this store
#: locates every chunk a record does not carry (3.5 MUST, 5.2), so gc deletes old containers no
#: visible record locates without reading them
COMPLETE_LOCATORS = "complete-locators"
#: ``compressed-headers`` (store config only, spec/v2.md 2 and 3.1): run records' headers may
#: be stored as one zstd frame (container form 0x03); readers of earlier releases refuse the
#: store at its config instead of taking such a record for damage
COMPRESSED_HEADERS = "compressed-headers"
#: ``delta-headers`` (store config only, spec/v2.md 2 and 3.1.2): a run record's header may be
#: stored by reference, as a zstd frame compressed against its parent record's header
#: (container form 0x04), so a commit's header costs what changed; maintenance keeps a
#: visible record's bases visible (9.1)
DELTA_HEADERS = "delta-headers"
KNOWN_FEATURES: frozenset[str] = frozenset({"typed-values", COMPLETE_LOCATORS,
                                            COMPRESSED_HEADERS, DELTA_HEADERS, "encrypted"})
#: features of a store's config that say how its writers behave, not how its data reads: a copy
#: need not find them in its destination (its own writers follow the rule or not)
WRITER_FEATURES: frozenset[str] = frozenset({COMPLETE_LOCATORS, COMPRESSED_HEADERS,
                                             DELTA_HEADERS})
#: the required features a writer gives a version 2 store it creates (spec/v2.md 2)
V2_REQUIRED: tuple[str, ...] = (COMPLETE_LOCATORS, COMPRESSED_HEADERS)
#: Which ckptfs releases read each format version and each feature, for the error a reader gives
#: when it meets one it does not (spec "Versioning"). Add a row with every new version or
#: feature; never edit one.
FORMAT_READERS: dict[int, str] = {1: ">= 0.1.0", 2: ">= 0.2.0"}
#: which release reads each manifest format version (manifests stay at 1 in both layouts)
MANIFEST_READERS: dict[int, str] = {1: ">= 0.1.0"}
FEATURE_READERS: dict[str, str] = {"typed-values": ">= 0.2.0", COMPLETE_LOCATORS: ">= 0.2.0",
                                   COMPRESSED_HEADERS: ">= 0.3.0", DELTA_HEADERS: ">= 0.4.0"}
MAX_CHUNK_SIZE = 16 * 1024 * 1024
MAX_MANIFEST_SIZE = 64 * 1024 * 1024
MAX_RECORD_SIZE = 64 * 1024
MAX_CONFIG_SIZE = 64 * 1024
#: content up to this size MAY be stored in the manifest itself (``inline``) instead of chunks
MAX_INLINE_SIZE = 64 * 1024
MAX_U64 = (1 << 64) - 1
#: bytes of a run record's ``nonce`` (spec 8.1)
NONCE_SIZE = 16

EntryKind = Literal["value", "blob", "ref"]
VALUE_TYPES = {"cbor": "application/cbor", "cbor-seq": "application/cbor-seq"}


def _get(m: Mapping[str, Any], key: str, typ: type | tuple[type, ...], what: str, *,
         optional: bool = False, nullable: bool = False) -> Any:
    """Field ``key`` of ``m``. ``optional`` fields may be absent and ``nullable`` ones null (both
    give None); anything else missing, null, mistyped or out of range is a FormatError."""
    if key not in m:
        if optional:
            return None
        raise FormatError(f"{what}: missing field {key!r}")
    v = m[key]
    if v is None and nullable:
        return None
    ok = isinstance(v, typ) and not (typ is int and isinstance(v, bool))
    if typ is int and ok and not (0 <= v <= MAX_U64):
        ok = False
    if not ok:
        raise FormatError(f"{what}: field {key!r} has the wrong type or range ({v!r:.80})")
    return v


def _digest(v: Any, what: str) -> Digest:
    if type(v) is not bytes or len(v) != 32:
        raise FormatError(f"{what}: a digest must be a 32-byte byte string")
    return Digest(v)


def _opt_digest(v: Any, what: str) -> Digest | None:
    return None if v is None else _digest(v, what)


def _labels(v: Any, what: str) -> dict[str, str]:
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise FormatError(f"{what}: labels must be a map of text to text")
    for k, val in v.items():
        try:
            check_label_key(k)
        except ValueError as e:
            raise FormatError(f"{what}: {e}") from e
        if type(val) is not str or len(val) > 1024:
            raise FormatError(f"{what}: label {k!r} must be text of at most 1024 characters")
    return dict(v)


def check_features(required: Any, what: str) -> tuple[str, ...]:
    if required is None:
        return ()
    if not isinstance(required, list) or not all(type(f) is str for f in required):
        raise FormatError(f"{what}: 'required' must be a list of feature names")
    unknown = sorted(set(required) - KNOWN_FEATURES)
    if unknown:
        raise UnsupportedFeature(
            f"{what} requires feature(s) {', '.join(unknown)} that this ckptfs does not "
            f"implement; {'; '.join(_reader_of_feature(f) for f in unknown)}. Read it with such "
            "a ckptfs (the store is unchanged).")
    return tuple(required)


def _reader_of_feature(feature: str) -> str:
    since = FEATURE_READERS.get(feature)
    if since is None:
        return f"feature {feature!r} is unknown to this ckptfs, so a later release reads it"
    return f"ckptfs {since} reads feature {feature!r}"


def unsupported_version(what: str, version: int, writer: object = None, *,
                        manifest: bool = False) -> UnsupportedVersion:
    """The error for a store (or, ``manifest``, a manifest) in a format version this reader
    does not read. Store layouts and manifests have separate versions (spec/v2.md 1)."""
    readers = MANIFEST_READERS if manifest else FORMAT_READERS
    supported = (MANIFEST_VERSION,) if manifest else SUPPORTED_VERSIONS
    since = readers.get(version)
    if since is not None:
        who = f"ckptfs {since} reads format version {version}"
    else:
        who = (f"format version {version} is newer than this ckptfs knows, so a later ckptfs "
               f"release reads it")
    by = f" (written by {writer})" if isinstance(writer, str) and writer else ""
    return UnsupportedVersion(
        f"{what} is format version {version}{by}; this ckptfs reads format version"
        f"{'s' if len(supported) > 1 else ''} {' and '.join(map(str, supported))} only. {who}: read it with such a ckptfs (the store is unchanged).")


@attrs.frozen(slots=True)
class ChunkRef:
    """One chunk of an entry: its digest and uncompressed size."""

    digest: Digest
    size: int

    def to_cbor(self) -> list[Any]:
        return [self.digest.raw, self.size]


@attrs.frozen(slots=True)
class Captured:
    """An entry whose bytes are in the store: a structured value or a blob."""

    kind: Literal["value", "blob"]
    type: str
    size: int
    digest: Digest
    chunks: tuple[ChunkRef, ...]
    encoding: str | None = None
    labels: Mapping[str, str] = attrs.field(factory=dict)
    #: small content kept in the manifest itself (then ``chunks`` is empty)
    inline: bytes | None = None

    def to_cbor(self) -> dict[str, Any]:
        m: dict[str, Any] = {"kind": self.kind, "type": self.type, "size": self.size,
                             "digest": self.digest.raw}
        if self.inline is not None:
            m["inline"] = self.inline
        else:
            m["chunks"] = [c.to_cbor() for c in self.chunks]
        if self.encoding is not None:
            m["encoding"] = self.encoding
        if self.labels:
            m["labels"] = dict(self.labels)
        return m


@attrs.frozen(slots=True)
class Reference:
    """An entry that names external data without capturing it."""

    uri: str
    digest: Digest | None = None
    size: int | None = None
    expires: int | None = None
    labels: Mapping[str, str] = attrs.field(factory=dict)
    kind: Literal["ref"] = "ref"

    def to_cbor(self) -> dict[str, Any]:
        m: dict[str, Any] = {"kind": "ref", "uri": self.uri}
        if self.digest is not None:
            m["digest"] = self.digest.raw
        if self.size is not None:
            m["size"] = self.size
        if self.expires is not None:
            m["expires"] = self.expires
        if self.labels:
            m["labels"] = dict(self.labels)
        return m


Entry = Captured | Reference


def entry_from_cbor(name: str, m: Any) -> Entry:
    what = f"entry {name!r}"
    if not isinstance(m, dict):
        raise FormatError(f"{what}: must be a map")
    kind = _get(m, "kind", str, what)
    labels = _labels(_get(m, "labels", dict, what, optional=True), what)
    if kind == "ref":
        uri = _get(m, "uri", str, what)
        if not uri or len(uri) > 4096:
            raise FormatError(f"{what}: uri must be 1-4096 characters")
        return Reference(uri=uri,
                         digest=_opt_digest(_get(m, "digest", bytes, what, optional=True), what),
                         size=_get(m, "size", int, what, optional=True),
                         expires=_get(m, "expires", int, what, optional=True), labels=labels)
    if kind not in ("value", "blob"):
        raise FormatError(f"{what}: unknown entry kind {kind!r} (value, blob, ref)")
    size = _get(m, "size", int, what)
    inline = _get(m, "inline", bytes, what, optional=True)
    if inline is not None:
        if "chunks" in m:
            raise FormatError(f"{what}: has both 'inline' and 'chunks'")
        if len(inline) != size or size > MAX_INLINE_SIZE:
            raise FormatError(f"{what}: inline content is {len(inline)} bytes, size says {size} "
                              f"(inline content is at most {MAX_INLINE_SIZE} bytes)")
        raw_chunks: list[Any] = []
    else:
        raw_chunks = _get(m, "chunks", list, what)
    chunks: list[ChunkRef] = []
    total = len(inline) if inline is not None else 0
    for i, c in enumerate(raw_chunks):
        if not (isinstance(c, list) and len(c) == 2):
            raise FormatError(f"{what}: chunk {i} must be [digest, size]")
        csize = c[1]
        if type(csize) is not int or not (0 < csize <= MAX_CHUNK_SIZE):
            raise FormatError(f"{what}: chunk {i} size must be 1..{MAX_CHUNK_SIZE}")
        chunks.append(ChunkRef(_digest(c[0], f"{what} chunk {i}"), csize))
        total += csize
    if total != size:
        raise FormatError(f"{what}: chunk sizes add up to {total}, but size says {size}")
    encoding = _get(m, "encoding", str, what, optional=True)
    if kind == "value":
        if encoding not in VALUE_TYPES:
            raise FormatError(f"{what}: value encoding must be one of {sorted(VALUE_TYPES)}")
    elif encoding is not None:
        raise FormatError(f"{what}: a blob has no encoding")
    typ = _get(m, "type", str, what)
    if kind == "value" and typ != VALUE_TYPES[encoding]:
        raise FormatError(f"{what}: a value with encoding {encoding!r} has type "
                          f"{VALUE_TYPES[encoding]!r}, not {typ!r:.80}")
    if not 1 <= len(typ) <= 255:
        raise FormatError(f"{what}: type must be a media type of 1-255 characters")
    digest = _digest(m.get("digest"), what)
    if inline is not None and Digest.of(inline) != digest:
        raise FormatError(f"{what}: inline content does not match its digest")
    return Captured(kind=kind, type=typ, size=size, digest=digest, chunks=tuple(chunks),
                    encoding=encoding, labels=labels, inline=inline)


@attrs.frozen(slots=True)
class Schema:
    """The application's state schema: a name and an integer version (not the format's)."""

    name: str
    version: int

    def to_cbor(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version}

    def __str__(self) -> str:
        return f"{self.name}@{self.version}"


@attrs.frozen(slots=True)
class Manifest:
    """One snapshot of a run: where it sits in its run's history and what it holds."""

    run: str
    seq: int
    boundary: str
    created: int
    writer: str
    schema: Schema
    entries: Mapping[str, Entry]
    parent: Digest | None = None
    resumed_from: Digest | None = None
    attempt: int = 1
    ledger: Mapping[str, Any] | None = None
    labels: Mapping[str, str] = attrs.field(factory=dict)
    expires: int | None = None
    required: tuple[str, ...] = ()
    extra: Mapping[str, Any] = attrs.field(factory=dict)

    def to_cbor(self) -> dict[str, Any]:
        m: dict[str, Any] = dict(self.extra)
        m.update({
            "format": MANIFEST_VERSION, "run": self.run, "seq": self.seq,
            "boundary": self.boundary, "created": self.created, "writer": self.writer,
            "schema": self.schema.to_cbor(),
            "entries": {k: e.to_cbor() for k, e in self.entries.items()},
            "parent": self.parent.raw if self.parent else None,
            "resumed_from": self.resumed_from.raw if self.resumed_from else None,
            "attempt": self.attempt,
            "ledger": dict(self.ledger) if self.ledger is not None else None,
            "labels": dict(self.labels), "expires": self.expires,
        })
        if self.required:
            m["required"] = list(self.required)
        return m

    def to_bytes(self) -> bytes:
        """The canonical bytes, after the checks every reader makes (a writer never commits a
        manifest that readers would reject, e.g. a label value over 1024 characters)."""
        m = self.to_cbor()
        Manifest.from_cbor(m, what=f"new manifest for run {self.run!r} seq {self.seq}")
        return cbor.check_items(cbor.encode(m), what=f"manifest for run {self.run!r} seq "
                                f"{self.seq}")

    @classmethod
    def from_bytes(cls, data: bytes, *, what: str = "manifest") -> Manifest:
        return cls.from_cbor(cbor.decode(data, what=what), what=what)

    @classmethod
    def from_cbor(cls, m: Any, *, what: str = "manifest") -> Manifest:
        if not isinstance(m, dict):
            raise FormatError(f"{what}: must be a CBOR map")
        version = _get(m, "format", int, what)
        if version != MANIFEST_VERSION:
            raise unsupported_version(what, version, m.get("writer"), manifest=True)
        required = check_features(_get(m, "required", list, what, optional=True), what)
        try:
            run = check_run_id(_get(m, "run", str, what))
            boundary = check_boundary(_get(m, "boundary", str, what))
        except ValueError as e:
            raise FormatError(f"{what}: {e}") from e
        seq = _get(m, "seq", int, what)
        if seq < 1:
            raise FormatError(f"{what}: seq starts at 1")
        sch = _get(m, "schema", dict, what)
        schema = Schema(_get(sch, "name", str, f"{what} schema"),
                        _get(sch, "version", int, f"{what} schema"))
        if not schema.name:
            raise FormatError(f"{what}: schema name must not be empty")
        raw_entries = _get(m, "entries", dict, what)
        entries: dict[str, Entry] = {}
        for name, raw in raw_entries.items():
            try:
                check_entry_name(name)
            except ValueError as err:
                raise FormatError(f"{what}: {err}") from err
            entries[name] = entry_from_cbor(name, raw)
        attempt = _get(m, "attempt", int, what)
        if attempt < 1:
            raise FormatError(f"{what}: attempt starts at 1")
        ledger = _get(m, "ledger", dict, what, nullable=True)
        if ledger is not None:
            from ckptfs.format.ledger import LedgerRef  # the ledger module builds on this one

            LedgerRef.from_cbor(ledger, what=f"{what} ledger")
        known = {"format", "run", "seq", "boundary", "created", "writer", "schema", "entries",
                 "parent", "resumed_from", "attempt", "ledger", "labels", "expires", "required"}
        return cls(
            run=run, seq=seq, boundary=boundary, created=_get(m, "created", int, what),
            writer=_get(m, "writer", str, what), schema=schema, entries=entries,
            parent=_opt_digest(_get(m, "parent", bytes, what, nullable=True), f"{what} parent"),
            resumed_from=_opt_digest(_get(m, "resumed_from", bytes, what, nullable=True),
                                     f"{what} resumed_from"),
            attempt=attempt, ledger=ledger, labels=_labels(_get(m, "labels", dict, what), what),
            expires=_get(m, "expires", int, what, nullable=True), required=required,
            extra={k: v for k, v in m.items() if k not in known},
        )


@attrs.frozen(slots=True)
class RunRecord:
    """The commit point of a snapshot: ``runs/<run>/<seq>``, created only if absent.

    ``nonce`` (optional, spec 8.1) is 16 random bytes a writer puts in each record it creates,
    so that two writers never create byte-identical records: after a lost answer a writer
    reads its record back and takes identical bytes as proof that its own create landed.
    Readers ignore it (a missing or malformed nonce is not an error; v1 readers ignore
    unknown record keys)."""

    run: str
    seq: int
    snapshot: Digest
    size: int
    created: int
    nonce: bytes | None = None
    #: format v2: the record carries its manifest's canonical bytes (spec/v2.md); v1: None
    manifest: bytes | None = attrs.field(default=None, repr=False)

    def to_cbor(self) -> dict[str, Any]:
        out = {"run": self.run, "seq": self.seq, "snapshot": self.snapshot.raw,
               "size": self.size, "created": self.created}
        if self.nonce is not None:
            out["nonce"] = self.nonce
        return out

    def to_bytes(self) -> bytes:
        return cbor.encode(self.to_cbor())

    @classmethod
    def from_bytes(cls, data: bytes, *, what: str) -> RunRecord:
        if len(data) > MAX_RECORD_SIZE:
            raise FormatError(f"{what}: {len(data)} bytes is larger than a run record can be")
        m = cbor.decode(data, what=what)
        if not isinstance(m, dict):
            raise FormatError(f"{what}: must be a CBOR map")
        size = _get(m, "size", int, what)
        if size > MAX_MANIFEST_SIZE:
            raise FormatError(f"{what}: manifest size {size} exceeds {MAX_MANIFEST_SIZE}")
        try:
            run = check_run_id(_get(m, "run", str, what))
        except ValueError as e:
            raise FormatError(f"{what}: {e}") from e
        seq = _get(m, "seq", int, what)
        if seq < 1:
            raise FormatError(f"{what}: seq starts at 1")
        nonce = m.get("nonce")
        return cls(run=run, seq=seq,
                   snapshot=_digest(m.get("snapshot"), f"{what} snapshot"), size=size,
                   created=_get(m, "created", int, what),
                   nonce=nonce if type(nonce) is bytes and len(nonce) == NONCE_SIZE else None)


@attrs.frozen(slots=True)
class StoreConfig:
    """The store marker ``ckptfs.cbor``: format, hash, chunker and feature flags."""

    chunker: ChunkerParams = attrs.field(factory=ChunkerParams)
    created: int = 0
    required: tuple[str, ...] = ()
    optional: tuple[str, ...] = ()
    settings: Mapping[str, Any] = attrs.field(factory=dict)
    #: the store layout: 1 (loose chunks and manifests) or 2 (containers, spec/v2.md)
    version: int = FORMAT_VERSION

    def to_cbor(self) -> dict[str, Any]:
        return {"format": FORMAT_NAME, "version": self.version, "hash": "blake3",
                "chunker": self.chunker.to_cbor(), "created": self.created,
                "required": list(self.required), "optional": list(self.optional),
                "settings": dict(self.settings)}

    def to_bytes(self) -> bytes:
        return cbor.encode(self.to_cbor())

    @classmethod
    def from_bytes(cls, data: bytes, *, what: str = "store config") -> StoreConfig:
        if len(data) > MAX_CONFIG_SIZE:
            raise FormatError(f"{what}: too large ({len(data)} bytes)")
        m = cbor.decode(data, what=what)
        if not isinstance(m, dict):
            raise FormatError(f"{what}: must be a CBOR map")
        if m.get("format") != FORMAT_NAME:
            raise FormatError(f"{what}: 'format' must be {FORMAT_NAME!r}; this is not a ckptfs store")
        version = _get(m, "version", int, what)
        if version not in SUPPORTED_VERSIONS:
            raise unsupported_version(what, version)
        hash_name = m.get("hash")
        if type(hash_name) is not str:  # a required key of type text (format.md 2): damage
            raise FormatError(f"{what}: 'hash' must be a text (absent or another type)")
        if hash_name != "blake3":
            raise UnsupportedFeature(f"{what}: hash {hash_name!r:.40} is not supported (blake3)")
        required = check_features(_get(m, "required", list, what), what)
        optional = _get(m, "optional", list, what)
        if not all(type(f) is str for f in optional):
            raise FormatError(f"{what}: 'optional' must be a list of feature names")
        settings = _get(m, "settings", dict, what)
        return cls(chunker=ChunkerParams.from_cbor(_get(m, "chunker", dict, what)),
                   created=_get(m, "created", int, what), required=required,
                   optional=tuple(optional), settings=settings, version=version)
