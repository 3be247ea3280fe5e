"""Turning state values into entries (and back).

The writer is history-aware to keep per-step cost proportional to what changed:

* a top-level ``list`` is stored as a CBOR sequence of its items (``cbor-seq``), so appending
  an item appends bytes instead of re-encoding a new array header and everything after it;
* unchanged leading items are recognised by comparing a fast (non-canonical) encoding of the
  list with the previous one (ckptfs.format.fast_plain: strict msgpack, in C); only new items
  are validated and canonically encoded; when the items committed last time were *pure* (no
  byte string, no integer outside 64 bits), an equal prefix of the fast form also proves the
  list plain data (``proven_plain``), so the exact path walks no committed item in Python;
* every previous chunk is reused as it is; the appended bytes become a new small chunk, and
  small chunks are merged sixteen at a time by size class (size-tiered compaction), so an append
  writes roughly the appended bytes and the chunk list stays short.

Readers only concatenate chunks, so all of this is the writer's choice (spec: "Chunking").
"""

from __future__ import annotations

import os
from collections.abc import Collection, Container, Iterable, Mapping
from typing import IO, Any

import attrs
import cbor2

from ckptfs.errors import FormatError, InvalidArgument, StateMismatch
from ckptfs.format import cbor
from ckptfs.format.cdc import ChunkerParams, cut_lengths
from ckptfs.format.digest import Digest, hasher
from ckptfs.format.fast_plain import Form, extends, fast_items, impure, strict_pack_items
from ckptfs.format.limits import MAX_VALUE_SIZE
from ckptfs.format.models import VALUE_TYPES, Captured, ChunkRef, Entry, Reference
from ckptfs.format.names import check_entry_name
from ckptfs.format.values import Blob, Ref, StoredBlob
from ckptfs.store.blobs import write_stream
from ckptfs.store.objects import ObjectStore

#: how many trailing pieces of one size class are merged into one (size-tiered compaction)
MERGE_FANOUT = 16
#: most open pieces an entry can carry: fewer than MERGE_FANOUT in each of the 2 merged classes
MAX_OPEN = 2 * (MERGE_FANOUT - 1)
#: values and byte blobs up to this size go in the manifest itself: no chunk file, no fsync
INLINE_MAX = 2048


@attrs.define
class _Prev:
    """What the writer remembers of an entry it wrote last time."""

    entry: Captured
    #: bytes, or a bytearray the append path grows in place (never exported to ``pending``)
    content: bytes | bytearray
    fast: bytes | bytearray | None
    count: int
    sealed: int
    hash_state: Any
    #: the value object committed (``checkpoint(changed=)`` compares identities) and, for a
    #: list, its last item then
    obj: Any = None
    last: Any = None
    #: ``audit``'s cursor in a list entry: the next item to compare and its byte offset
    audit_i: int = 0
    audit_off: int = 0
    #: the committed items are pure (ckptfs.format.fast_plain.impure is false for each);
    #: None: not known yet (worked out, once, by ``proven_plain``)
    pure: bool | None = None
    #: where the items start in ``fast`` (a list's msgpack head is skipped, not copied off)
    fast_at: int = 0


class EntryWriter:
    """Encodes a state mapping into entries, writing the chunks they need."""

    def __init__(self, objects: ObjectStore, params: ChunkerParams) -> None:
        self.objects = objects
        self.params = params
        self.prev: dict[str, _Prev] = {}
        self.bytes_new = 0
        #: chunks of value entries that the next commit must write (with its manifest)
        self.pending: list[tuple[Digest, bytes | memoryview]] = []
        #: raw digests of the chunks the next commit may locate instead of writing, because
        #: its parent names them (``Repository.reusable``, set by the run before each commit:
        #: spec/v2.md 5.2); cut content (values, blobs) skips them as it skips ``known`` ones
        self.reuse: Container[bytes] = frozenset()

    # -- public ------------------------------------------------------------------------------
    def encode_state(self, state: Mapping[str, Any],
                     entry_labels: Mapping[str, Mapping[str, str]] | None = None, *,
                     changed: Collection[str] | None = None,
                     proven: Mapping[str, Form] | None = None) -> dict[str, Entry]:
        """The entries of ``state``. ``changed`` (None: unknown, everything is compared): the
        names the caller says changed; every other entry is taken as it was last time only when
        the library can see that it is: the same object (``is``) as last committed and, for a
        list, the same length; otherwise it is encoded in full. A declared list that is the
        same object, no shorter and still has the last committed item at its place is taken as
        appended to: only the new items are encoded. What this cannot see is a change made in
        place inside an item (or a slot) that was already committed. ``proven``: list entries
        ``proven_plain`` proved plain data just now, with their fast form (not computed again)."""
        if not isinstance(state, Mapping):
            raise TypeError(f"state must be a mapping of entry name -> value, not {type(state).__name__}")
        entries: dict[str, Entry] = {}
        pending = self.pending = []
        for name, value in state.items():
            check_entry_name(name)
            labels = dict((entry_labels or {}).get(name, {}))
            if isinstance(value, Ref):
                entries[name] = _reference(value, labels)
            elif isinstance(value, Blob):
                entries[name] = self._blob(name, value, labels)
            elif isinstance(value, StoredBlob) and value.size and not value.chunks:
                # a small blob restored from its manifest (inline): write it again from bytes
                entries[name] = self._blob(name, Blob(value.read(), type=value.type),
                                           labels or dict(value.labels))
            elif isinstance(value, StoredBlob):
                entries[name] = _restored_blob(value, labels)
            elif changed is not None:
                entries[name] = self._declared(name, value, labels, pending, name in changed,
                                               (proven or {}).get(name))
            else:
                entries[name] = self._value(name, value, labels, pending,
                                            (proven or {}).get(name))
        for name in list(self.prev):
            if name not in state:
                del self.prev[name]
        return entries

    def seed(self, name: str, entry: Captured, content: bytes, value: Any) -> None:
        """Remember a restored entry so the next checkpoint after a resume reuses its chunks."""
        fast, at = None, 0
        if entry.encoding == "cbor-seq":
            fast, at = fast_items(value)
        h = hasher()
        h.update(content)
        sealed = 0
        for c in entry.chunks:
            if c.size < self.params.min_size:
                break
            sealed += 1
        self.prev[name] = _Prev(entry, content, fast, len(value) if fast is not None else 0,
                                sealed, h, value, _last(value), fast_at=at)
        self.objects.known.seed(c.digest for c in entry.chunks)  # restored, not written

    def forget(self, names: Iterable[str]) -> None:
        """Drop what the writer remembers of ``names`` (after a failed commit that had moved
        it ahead): their next commit encodes them in full."""
        for name in names:
            self.prev.pop(name, None)

    def proven_plain(self, name: str, value: Any) -> Form | None:
        """The fast form of list ``value`` (the next state of entry ``name``) when it is proved
        plain data without walking its committed items in Python, else None (walk it): its
        strict msgpack form (ckptfs.format.fast_plain) starts with the form of the items
        committed last time, which were pure, and every new item is plain data. The committed
        items' purity is worked out once (a walk) and then kept up by the new items'."""
        prev = self.prev.get(name)
        if (prev is None or prev.pure is False or prev.fast is None or type(value) is not list
                or len(value) < prev.count or prev.entry.kind != "value"):
            return None
        fast = strict_pack_items(value)
        if fast is None or not extends(fast, prev.fast, prev.fast_at):
            return None
        k = prev.count
        try:
            if not all(cbor._is_plain(x, cbor.SEQ_ITEM_DEPTH) for x in value[k:]):
                return None
        except RecursionError:
            return None
        if prev.pure is None:
            # equal bytes: these are the committed items, so their purity is the committed one
            prev.pure = not any(impure(x) for x in value[:k])
            if not prev.pure:
                return None
        return fast

    # -- declared changes (O(change)) --------------------------------------------------------
    def _declared(self, name: str, value: Any, labels: dict[str, str],
                  pending: list[tuple[Digest, bytes | memoryview]], declared: bool,
                  proven: Form | None = None) -> Entry:
        prev = self.prev.get(name)
        if prev is None or prev.obj is not value or prev.entry.kind != "value":
            return self._value(name, value, labels, pending, proven)
        is_list = type(value) is list
        if not declared:
            if not is_list or len(value) == prev.count:
                if labels == dict(prev.entry.labels):
                    return prev.entry  # the same object: its manifest bytes stay cached
                prev.entry = attrs.evolve(prev.entry, labels=labels)
                return prev.entry
            return self._value(name, value, labels, pending, proven)  # grew or shrank
        if (is_list and prev.fast is not None and len(value) >= prev.count
                and (prev.count == 0 or value[prev.count - 1] is prev.last)):
            return self._append(name, prev, value, labels, pending)
        return self._value(name, value, labels, pending, proven)

    def _append(self, name: str, prev: _Prev, value: list[Any], labels: dict[str, str],
                pending: list[tuple[Digest, bytes | memoryview]]) -> Captured:
        """``value`` is the committed list plus ``value[prev.count:]``: encode only those."""
        what = f"state[{name!r}]"
        k = prev.count
        if k == len(value) and labels == dict(prev.entry.labels):
            return prev.entry
        new = value[k:]
        for i, x in enumerate(new, k):
            cbor.check_plain(x, what=f"{what}[{i}]", max_depth=cbor.SEQ_ITEM_DEPTH)
        add = b"".join([cbor.encode(x) for x in new])
        add_b, add_at = fast_items(new)
        old = len(prev.content)
        if old + len(add) > MAX_VALUE_SIZE:
            raise FormatError(
                f"{what}: {old + len(add)} bytes of CBOR, more than the {MAX_VALUE_SIZE} bytes "
                "a plain value may hold (spec/format.md 'Limits'). Store large data as "
                "ckptfs.Blob or split it into several entries.")
        assert prev.fast is not None
        content = prev.content if type(prev.content) is bytearray else bytearray(prev.content)
        fast = (prev.fast if type(prev.fast) is bytearray
                else bytearray(memoryview(prev.fast)[prev.fast_at:]))
        content += add
        fast += memoryview(add_b)[add_at:]
        h = prev.hash_state.copy()
        h.update(add)
        if len(content) <= INLINE_MAX:
            entry = Captured(kind="value", type=VALUE_TYPES["cbor-seq"], size=len(content),
                             digest=Digest(h.digest()), chunks=(), encoding="cbor-seq",
                             labels=labels, inline=bytes(content))
            sealed = 0
        else:
            if prev.entry.inline is not None:
                chunks, sealed = self._fresh_chunks(bytes(content), pending)
            else:
                chunks, sealed = self._append_chunks(prev, content, pending, old=old)
            entry = Captured(kind="value", type=VALUE_TYPES["cbor-seq"], size=len(content),
                             digest=Digest(h.digest()), chunks=tuple(chunks),
                             encoding="cbor-seq", labels=labels)
        self.prev[name] = _Prev(entry, content, fast, len(value), sealed, h, value, _last(value),
                                prev.audit_i, prev.audit_off,  # the committed prefix is kept
                                _still_pure(prev.pure, new))
        return entry

    # -- audit -------------------------------------------------------------------------------
    def audit(self, state: Mapping[str, Any], names: Iterable[str] | None, *, window: int,
              run: str) -> int:
        """Re-encode up to ``window`` committed items of each list entry (a cursor that
        wraps around) and every other remembered value entry whole, and compare with the bytes
        last committed; StateMismatch at the first difference. Returns the items compared."""
        compared = 0
        for name in (list(state) if names is None else list(names)):
            prev = self.prev.get(name)
            value = state.get(name)
            if prev is None or prev.entry.kind != "value" or prev.obj is not value:
                continue  # not committed through this writer's memory: the full path ran
            where = f"run {run!r}: entry {name!r}"
            fix = ("it was changed in place after it was committed, which an O(change) commit "
                   "(checkpoint(changed=) or append) cannot see; commit it with "
                   "run.checkpoint(state) (no changed=) to store what you hold")
            if prev.fast is None or type(value) is not list:
                try:
                    same = cbor.encode(value) == prev.content
                except Exception:
                    same = False
                if not same:
                    raise StateMismatch(f"{where} no longer equals its committed value: {fix}")
                compared += 1
                continue
            count = min(prev.count, len(value))
            if count == 0:
                continue
            i, off = prev.audit_i, prev.audit_off
            if i >= count:
                i, off = 0, 0
            view = memoryview(prev.content)
            try:
                for _ in range(min(window, count)):
                    try:
                        enc = cbor.encode(value[i])
                    except Exception:
                        enc = b""
                    if not enc or view[off:off + len(enc)] != enc:
                        raise StateMismatch(f"{where} item {i} differs from what was committed: "
                                            f"{fix}")
                    off += len(enc)
                    i += 1
                    compared += 1
                    if i >= count:
                        i, off = 0, 0
            finally:
                view.release()
            prev.audit_i, prev.audit_off = i, off
        return compared

    # -- values ------------------------------------------------------------------------------
    def _value(self, name: str, value: Any, labels: dict[str, str],
               pending: list[tuple[Digest, bytes | memoryview]],
               proven: Form | None = None) -> Captured:
        what = f"state[{name!r}]"
        prev = self.prev.get(name)
        fast: bytes | None = None
        at = 0
        appended = False
        pure: bool | None = None
        if type(value) is list:
            encoding = "cbor-seq"
            try:
                form = proven or fast_items(value)
            except (cbor2.CBOREncodeError, TypeError, ValueError, RecursionError):
                cbor.check_plain(value, what=what)
                raise
            fast, at = form
            if (prev is not None and prev.fast is not None and len(value) >= prev.count
                    and (proven is not None or extends(form, prev.fast, prev.fast_at))):
                k = prev.count
                pure = _still_pure(prev.pure, value[k:])
                for i in range(k, len(value)):
                    cbor.check_plain(value[i], what=f"{what}[{i}]",
                                     max_depth=cbor.SEQ_ITEM_DEPTH)
                content = b"".join([prev.content, *(cbor.encode(x) for x in value[k:])])
                appended = True
            else:
                cbor.check_plain(value, what=what)
                content = b"".join(cbor.encode(x) for x in value)
        else:
            encoding = "cbor"
            cbor.check_plain(value, what=what)
            content = cbor.encode(value)
        if len(content) > MAX_VALUE_SIZE:
            raise FormatError(
                f"{what}: {len(content)} bytes of CBOR, more than the {MAX_VALUE_SIZE} bytes a "
                "plain value may hold (spec/format.md 'Limits': readers assemble a value in "
                "memory to decode it). Store large data as ckptfs.Blob, which is streamed and "
                "has no size limit, or split it into several entries.")
        if prev is not None and prev.entry.encoding == encoding and prev.content == content:
            entry = attrs.evolve(prev.entry, labels=labels)
            prev.entry, prev.fast, prev.count = entry, fast, len(value) if fast is not None else 0
            prev.fast_at = at
            prev.obj, prev.last = value, _last(value)
            if not appended:
                prev.pure = None  # equal content, but the fast form may differ (key order)
            return entry
        if len(content) <= INLINE_MAX:
            h = hasher()
            h.update(content)
            entry = Captured(kind="value", type=VALUE_TYPES[encoding], size=len(content),
                             digest=Digest(h.digest()), chunks=(), encoding=encoding,
                             labels=labels, inline=content)
            self.prev[name] = _Prev(entry, content, fast, len(value) if fast is not None else 0,
                                    0, h, value, _last(value), pure=pure, fast_at=at)
            return entry
        if appended and prev is not None and prev.entry.inline is None:
            h = prev.hash_state.copy()
            h.update(memoryview(content)[len(prev.content):])
            chunks, sealed = self._append_chunks(prev, content, pending)
        else:
            h = hasher()
            h.update(content)
            chunks, sealed = self._fresh_chunks(content, pending)
        entry = Captured(kind="value", type=VALUE_TYPES[encoding], size=len(content),
                         digest=Digest(h.digest()), chunks=tuple(chunks), encoding=encoding,
                         labels=labels)
        self.prev[name] = _Prev(entry, content, fast, len(value) if fast is not None else 0,
                                sealed, h, value, _last(value), pure=pure, fast_at=at)
        return entry

    def _piece(self, content: bytes | bytearray, start: int, length: int,
               pending: list[tuple[Digest, bytes | memoryview]]) -> ChunkRef:
        view: bytes | memoryview
        if type(content) is bytearray:
            # a copy: a view would pin the buffer that the next append grows (BufferError)
            view = bytes(content[start:start + length])
        else:
            view = memoryview(content)[start:start + length]
        d = Digest.of(view)
        if d not in self.objects.known and d.raw not in self.reuse:
            pending.append((d, view))
            self.bytes_new += length
        return ChunkRef(d, length)

    def _fresh_chunks(self, content: bytes, pending: list[tuple[Digest, bytes | memoryview]]
                      ) -> tuple[list[ChunkRef], int]:
        chunks: list[ChunkRef] = []
        pos = 0
        for length in cut_lengths(content, self.params):
            chunks.append(self._piece(content, pos, length, pending))
            pos += length
        return chunks, max(0, len(chunks) - 1)

    def _tier(self, size: int) -> int:
        """Size class of a piece: 0 below avg/16, 1 below avg, 2 from avg on (never merged)."""
        avg = self.params.avg_size
        return 2 if size >= avg else 1 if size >= avg // MERGE_FANOUT else 0

    def _append_chunks(self, prev: _Prev, content: bytes | bytearray,
                       pending: list[tuple[Digest, bytes | memoryview]], *,
                       old: int | None = None) -> tuple[list[ChunkRef], int]:
        """Keep every previous chunk; add the appended bytes as new piece(s); then merge the
        trailing pieces of one size class once there are ``MERGE_FANOUT`` of them (size-tiered
        compaction: each byte is rewritten about log16(max / append) times, and the chunk list
        stays short)."""
        chunks = list(prev.entry.chunks)
        sealed = prev.sealed
        if old is None:
            old = len(prev.content)
        new = len(content) - old
        if new > self.params.avg_size:  # a large append is cut like fresh content
            pos = old
            for length in cut_lengths(bytes(content[old:]), self.params):
                chunks.append(self._piece(content, pos, length, pending))
                pos += length
            return chunks, len(chunks) - 1
        if new > 0:
            chunks.append(self._piece(content, old, new, pending))
        while len(chunks) > sealed:
            tier = self._tier(chunks[-1].size)
            if tier >= 2:
                return chunks, len(chunks)
            n = 0
            for c in reversed(chunks[sealed:]):
                if self._tier(c.size) != tier:
                    break
                n += 1
            if n < MERGE_FANOUT:
                break
            total = sum(c.size for c in chunks[-n:])
            if total > self.params.max_size:
                return chunks, len(chunks)
            chunks[-n:] = [self._piece(content, len(content) - total, total, pending)]
        return chunks, sealed

    # -- blobs -------------------------------------------------------------------------------
    def _blob(self, name: str, blob: Blob, labels: dict[str, str]) -> Captured:
        src = blob.source
        labels = labels or dict(blob.labels)
        if isinstance(src, bytes):
            prev = self.prev.get(name)
            if prev is not None and prev.entry.kind == "blob" and prev.content == src:
                return attrs.evolve(prev.entry, labels=labels, type=blob.type)
            h = hasher()
            h.update(src)
            chunks: list[ChunkRef] = []
            sealed, inline = 0, None
            if len(src) <= INLINE_MAX:
                inline = src
            else:
                chunks, sealed = self._fresh_chunks(src, self.pending)
            entry = Captured(kind="blob", type=blob.type, size=len(src), digest=Digest(h.digest()),
                             chunks=tuple(chunks), labels=labels, inline=inline)
            if len(src) <= 4 * 1024 * 1024:
                self.prev[name] = _Prev(entry, src, None, 0, sealed, h)
            return entry
        self.prev.pop(name, None)
        if isinstance(src, (str, os.PathLike)):
            try:
                f = open(src, "rb")
            except OSError as e:
                raise InvalidArgument(
                    f"state[{name!r}]: Blob({os.fspath(src)!r}) cannot be read: "
                    f"{e.strerror or e}. A Blob's file is read at the checkpoint: give the path "
                    "of a readable file (or bytes, or an open binary file)") from e
            with f:
                return self._stream(f, blob.type, labels)
        return self._stream(src, blob.type, labels)

    def _stream(self, f: IO[bytes], typ: str, labels: dict[str, str]) -> Captured:
        entry, new = write_stream(self.objects, f, self.params, typ, labels, self.reuse)
        self.bytes_new += new
        return entry


def _still_pure(pure: bool | None, new: list[Any]) -> bool | None:
    """The purity of committed items ``pure`` grown by ``new`` (None stays unknown)."""
    if not pure:
        return pure
    return not any(impure(x) for x in new)


def _last(value: Any) -> Any:
    return value[-1] if type(value) is list and value else None


def _restored_blob(blob: StoredBlob, labels: dict[str, str]) -> Captured:
    """A restored blob checkpointed again: its chunks as they are, or its inline bytes (a blob
    with no chunks was inline, so reading it touches no storage)."""
    inline = None if blob.chunks or not blob.size else blob.read()
    return Captured(kind="blob", type=blob.type, size=blob.size, digest=blob.digest,
                    chunks=tuple(blob.chunks), labels=labels or blob.labels, inline=inline)


def _reference(ref: Ref, labels: dict[str, str]) -> Reference:
    expires = None if ref.expires_at is None else int(ref.expires_at * 1000)
    return Reference(uri=ref.uri, digest=ref.digest, size=ref.size, expires=expires,
                     labels=labels or dict(ref.labels))
