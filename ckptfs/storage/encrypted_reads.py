"""Reading an encrypted store's objects through their plaintext paths (spec/encryption.md 5.1):
whole objects (immutable ones decrypted once and kept a while), ranges that open only the
segments that hold them (layout 2), and the readers blob streams take of packs: by segments,
or whole when a stream reads much of a pack (``encrypted_whole``).

``EncryptedReads`` is the read half of ``encrypted.EncryptedStorage`` (which adds names, paths,
sealing and writes); it holds no state of its own beyond what the store's views share."""

from __future__ import annotations

import abc
import builtins
import threading
from collections import OrderedDict
from collections.abc import Callable

from ckptfs.format import crypto, crypto_stream
from ckptfs.format.names import CONFIG_PATH, PACKS, RUNS, TMP, parse_seq_name
from ckptfs.storage.base import RangeReader, Storage
from ckptfs.storage.encrypted_whole import SEALED_GUESS, WHOLE_MIN, Loader, WholeObjects
from ckptfs.storage.keyring import Keyring, Scope

_CACHE_BYTES = 64 << 20
#: how many objects' openers (key and AD from their header) a store view keeps
_OPENERS = 4096
#: per process: openers of immutable objects by (store id, plaintext path, header, scope key)
_MADE: dict[tuple[bytes, str, bytes, bytes], crypto_stream.Opener] = {}
#: per thread: the reused buffer sealed segments are read into before they are opened
_scratch = threading.local()


def _immutable(path: str) -> bool:
    """Objects written once and never changed (packs, run records): their plaintext may be
    kept in memory for the many ranges a reader takes of them."""
    parts = path.split("/")
    return parts[0] == PACKS or (parts[0] == RUNS and len(parts) == 3
                                 and parse_seq_name(parts[2]) is not None)


class _Shared:
    """What every view of one encrypted store shares: the run -> scope map, a small cache of
    opened objects (a pack's ranges are read from one decryption) and the packs blob streams
    read whole."""

    def __init__(self) -> None:
        self.runs: dict[str, Scope] = {}
        #: run id -> (its scope id, its stored path segment)
        self.segs: dict[str, tuple[bytes, str]] = {}
        #: stored segment of a whole run's tombstone -> the run id (those this process named)
        self.stones: dict[str, str] = {}
        self.cache: OrderedDict[str, bytes] = OrderedDict()
        self.cached = 0
        #: plaintext path -> the opener of its segments (None: a layout-1 object, opened whole)
        self.openers: OrderedDict[str, crypto_stream.Opener | None] = OrderedDict()
        self.inflight: dict[str, threading.Lock] = {}
        self.lock = threading.Lock()
        self.whole = WholeObjects()
        #: the config's bytes as read when the store was opened: the first read of the
        #: config takes them instead of reading it again (then None: later reads read it)
        self.config: bytes | None = None


class EncryptedReads(Storage):
    """The read side of an encrypted store's plaintext view (see the module docstring)."""

    inner: Storage
    keyring: Keyring
    store_id: bytes
    _shared: _Shared

    @abc.abstractmethod
    def out(self, path: str) -> str:
        """The stored path of the plaintext path ``path``."""

    @abc.abstractmethod
    def open(self, path: str, data: bytes, stored: str | None = None) -> bytes:
        """The authenticated plaintext of the object read at ``path``."""

    @abc.abstractmethod
    def _legacy_stone(self, path: str) -> str | None:
        """Where a whole run's tombstone at ``path`` was stored by earlier writers, if any."""

    def read(self, path: str) -> bytes:
        if path == CONFIG_PATH:
            with self._shared.lock:
                seen, self._shared.config = self._shared.config, None
            return seen if seen is not None else self.inner.read(path)
        stored = self.out(path)
        if not _immutable(path):
            try:
                return self.open(path, self.inner.read(stored), stored)
            except FileNotFoundError:
                legacy = self._legacy_stone(path)
                if legacy is None:
                    raise
                return self.open(path, self.inner.read(legacy), legacy)
        sh = self._shared
        with sh.lock:
            hit = sh.cache.get(path)
            if hit is not None:
                sh.cache.move_to_end(path)
                return hit
            busy = sh.inflight.setdefault(path, threading.Lock())
        with busy:  # threads reading ranges of one pack decrypt it once
            with sh.lock:
                hit = sh.cache.get(path)
            if hit is not None:
                return hit
            plain = self.open(path, self.inner.read(stored), stored)
            with sh.lock:
                sh.inflight.pop(path, None)
                if len(plain) <= _CACHE_BYTES:
                    sh.cache[path] = plain
                    sh.cached += len(plain)
                    while sh.cached > _CACHE_BYTES:
                        sh.cached -= len(sh.cache.popitem(last=False)[1])
        return plain

    def read_range(self, path: str, start: int, end: int) -> bytes:
        got = self.read_ranges([(path, start, end)])[0]
        if got is None:
            raise FileNotFoundError(path)
        return got

    def read_ranges(self, items: builtins.list[tuple[str, int, int]]
                    ) -> builtins.list[bytes | None]:
        """Ranges of immutable objects open only the segments that hold them (layout 2,
        spec/encryption.md 5.1): the header of an object not met before is read first (one
        batch), then every range's segments (one batch: object stores overlap them); a range
        from 0 reads the header with its segments. Anything else is read whole."""
        out: builtins.list[bytes | None] = [None] * len(items)
        sh = self._shared
        todo: builtins.list[int] = []
        for i, (path, start, end) in enumerate(items):
            with sh.lock:
                hit = sh.cache.get(path)
            if hit is not None:
                out[i] = hit[start:end]
            elif path == CONFIG_PATH or path.startswith(f"{TMP}/"):
                out[i] = self._plain_range(path, start, end)
            elif not _immutable(path):
                out[i] = self._whole_range(path, start, end)
            else:
                todo.append(i)
        if not todo:
            return out
        stored = {i: self.out(items[i][0]) for i in todo}
        heads = [i for i in todo if items[i][1] >= crypto_stream.SEGMENT
                 and items[i][0] not in sh.openers]
        if heads:
            got = self.inner.read_ranges([(stored[i], 0, crypto.HEADER_SIZE) for i in heads])
            for i, head in zip(heads, got):
                if head is not None:
                    self._opener(items[i][0], stored[i], head)
        spans: builtins.list[tuple[int, int, bool, int]] = []
        reads: builtins.list[tuple[str, int, int]] = []
        for i in todo:
            path, start, end = items[i]
            first, a, b = crypto_stream.span(start, end)
            known = path in sh.openers
            if known and sh.openers[path] is None:  # layout 1: opened whole
                out[i] = self._whole_range(path, start, end)
                continue
            spans.append((i, first, known, a))
            reads.append((stored[i], a if known else 0, b))
        for (i, first, known, a), data in zip(spans, self.inner.read_ranges(reads)):
            if data is None:
                continue
            path, start, end = items[i]
            # read from a (the opener known) or from 0 (header first, then the segments)
            opener = sh.openers.get(path) if known else self._opener(path, stored[i], data)
            if opener is None:  # layout 1 (or an opener dropped meanwhile): opened whole
                out[i] = self._whole_range(path, start, end)
                continue
            out[i] = opener.open_range(first, memoryview(data)[0 if known else a:], start, end)
        return out

    def _opener(self, path: str, stored: str, head: bytes) -> crypto_stream.Opener | None:
        """The opener of the object at ``path`` from its first bytes ``head`` (remembered);
        None for a layout-1 object."""
        opener: crypto_stream.Opener | None = None
        if crypto_stream.layout(head, where=stored) == 2:
            # the scope first, from this view's keyring (an erased scope fails here), then the
            # opener of these exact header bytes, if this process made it already (an
            # immutable object read again by the next store object: no key derivation)
            scope = self.keyring.scope(crypto_stream.scope_of(head, where=stored))
            key = (self.store_id, path, bytes(head[:crypto.HEADER_SIZE]), scope.key)
            opener = _MADE.get(key)
            if opener is None:
                opener = crypto_stream.Opener(scope.key, head, store_id=self.store_id,
                                              path=path, where=stored)
                if len(_MADE) >= _OPENERS:
                    _MADE.clear()
                _MADE[key] = opener
        sh = self._shared
        with sh.lock:
            sh.openers[path] = opener
            if len(sh.openers) > _OPENERS:
                sh.openers.popitem(last=False)
        return opener

    def _whole_range(self, path: str, start: int, end: int) -> bytes | None:
        try:
            return self.read(path)[start:end]
        except FileNotFoundError:
            return None

    def _plain_range(self, path: str, start: int, end: int) -> bytes | None:
        try:
            return self.inner.read_range(path, start, end)
        except FileNotFoundError:
            return None

    def open_ranges(self, path: str) -> RangeReader:
        """Ranges of one immutable object (a pack's bodies, streamed by a blob read) from the
        inner storage's reader of it (local disk: one descriptor, ``preadv``), each range
        opening only its segments, straight into the caller's buffer. Not ``per_call``: a
        range costs a decryption, so readers coalesce a container's bodies into few ranges."""
        if not _immutable(path):
            return super().open_ranges(path)
        stored = self.out(path)
        inner = self.inner.open_ranges(stored)
        sh = self._shared

        def opener() -> crypto_stream.Opener | None:
            if path in sh.openers:
                return sh.openers.get(path)
            return self._opener(path, stored, inner.read(0, crypto.HEADER_SIZE))

        def read_into(start: int, buf: memoryview) -> int:
            op = opener()
            if op is None:  # layout 1: opened whole
                whole = self.read(path)[start:start + len(buf)]
                buf[:len(whole)] = whole
                return len(whole)
            first, a, b = crypto_stream.span(start, start + len(buf))
            scratch = getattr(_scratch, "buf", None)
            if scratch is None or len(scratch) < b - a:
                scratch = _scratch.buf = bytearray(b - a)
            view = memoryview(scratch)[:b - a]
            got = inner.read_into(a, view)
            return op.open_into(first, view[:got], start, buf)

        def read(start: int, n: int) -> bytes:
            buf = bytearray(n)
            return bytes(memoryview(buf)[:read_into(start, memoryview(buf))])

        return RangeReader(read_into=read_into, read=read, close=inner.close, per_call=False)

    def open_stream(self, path: str, expect: int) -> RangeReader:
        """A blob stream's reader of a pack it will read ``expect`` bytes of: from
        ``WHOLE_MIN`` on, the pack is opened whole, once, on a worker thread from now on
        (``encrypted_whole``: every segment authenticated before a byte of it is copied out),
        and its bodies are read from the plaintext with one copy each (``per_call``: a read is
        a copy, so the stream reads each body by itself); below it, ``open_ranges``."""
        if expect < WHOLE_MIN or not _immutable(path):
            return self.open_ranges(path)
        stored = self.out(path)  # an absent pack: FileNotFoundError from its reads
        whole = self._shared.whole
        load = self._whole_loader(path, stored)
        whole.opened(path, load)
        left = [expect]

        def served(n: int) -> None:
            left[0] -= n
            if left[0] <= 0:  # the stream is done with it (a repeated read opens it again)
                whole.done(path)

        def read_into(start: int, buf: memoryview) -> int:
            n = whole.read_into(path, load, start, buf)
            served(n)
            return n

        def read(start: int, n: int) -> bytes:
            got = whole.read(path, load, start, n)
            served(len(got))
            return got

        return RangeReader(read_into=read_into, read=read, close=whole.closed, per_call=True)

    def _whole_loader(self, path: str, stored: str) -> Loader:
        """What loads the whole plaintext of the pack at ``path`` for ``WholeObjects``: its
        sealed bytes read into a reused buffer, its segments opened into another."""
        def load(take: Callable[[int], bytearray], give: Callable[[bytearray], None]
                 ) -> tuple[bytes | bytearray, int]:
            sealed = take(SEALED_GUESS)
            try:
                reader = self.inner.open_ranges(stored)
                try:
                    got = 0
                    while True:
                        n = reader.read_into(got, memoryview(sealed)[got:])
                        got += n
                        if got < len(sealed):
                            break
                        sealed.extend(bytes(len(sealed)))  # larger than guessed: read on
                finally:
                    reader.close()
                with memoryview(sealed)[:got] as data:  # released before the buffer is
                    op = self._opener(path, stored, bytes(data[:crypto.HEADER_SIZE]))
                    if op is None:  # layout 1: opened whole
                        plain = self.open(path, bytes(data), stored)
                        return plain, len(plain)
                    size = crypto_stream.plain_size(got)
                    out = take(size)
                    try:
                        return out, op.open_all_into(data, memoryview(out))
                    except BaseException:
                        give(out)  # zeroed by open_all_into on a refusal
                        raise
            finally:
                give(sealed)  # free for the next pack (its views released)

        return load

