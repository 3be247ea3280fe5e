"""Whole decrypted packs for blob streams of an encrypted store (issue 33 W2).

A blob's chunks fill its packs in turn, but an encrypted store lays out each pack's bodies in
random order (spec/encryption.md 5.3), so the bodies of one read window are scattered over a
16 MiB pack. Read by segments (5.1), a window's bodies cost every 64 KiB segment they touch:
measured on a 64 MiB blob, 1.45x its bytes read and decrypted, half of the segments opened
twice (once by each window that shares them) and through a copy. A stream that will read a
large share of a pack opens it once, whole, instead: the sealed object is read into a reused
buffer, its segments (every one authenticated, the final one as final: ``Opener.open_all``'s
checks) decrypt straight into another, and the stream's bodies are copied out of that
plaintext. The decryption runs on a worker thread as soon as the stream plans a window that
needs the pack (a few windows ahead), so that it overlaps the verification of the windows
before it (``cryptography`` releases the GIL in ``decrypt_into``; ``preadv`` does too).

Memory: at most ``LIMIT`` bytes of plaintext are kept per store (least recently used dropped;
a stream that needs a dropped pack again opens it again); a pack is dropped as soon as the
stream has read the bytes it said it would (``done``), and every one when the store's last
stream reader closes. Freed buffers go to a per-process pool of ``SPARE`` (about 51 MiB at
most, kept for the next stream: a fresh 16 MiB buffer costs 4,096 page faults). A buffer is
reused only under the lock that copies out of it, so no reader ever copies from a buffer
being refilled.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

#: a stream that will read at least this many bytes of a pack opens it whole (a quarter of a
#: 16 MiB pack: whole-pack decryption costs at most about 4x the bytes needed, and segment by
#: segment scattered bodies cost 1.5-2x already)
WHOLE_MIN = 4 << 20
#: decrypted bytes kept for streams per store (three 16 MiB packs: a stream in flight spans two)
LIMIT = 48 << 20
#: spare buffers kept, per process, for the next pack (of any store): a fresh 16 MiB buffer
#: costs 4,096 page faults when first written, about 10 ms on the 2-core machine the bench
#: runs on, as much as decrypting it
SPARE = 3
#: the buffer a sealed pack is first read into (grown when the pack is larger): a 16 MiB pack
#: (the writers' target) with its bodies' overshoot, its segments' tags and its header
SEALED_GUESS = 17 << 20

#: what loads one object: given ``take(n)`` (a buffer of at least n bytes, maybe reused) and
#: ``give(buf)`` (a buffer no longer needed), the plaintext buffer and its size
Loader = Callable[[Callable[[int], bytearray], Callable[[bytearray], None]],
                  tuple[bytes | bytearray, int]]


#: the process's spare buffers (``take`` and ``give`` hold ``_SPARE_LOCK``)
_SPARE: list[bytearray] = []
_SPARE_LOCK = threading.Lock()


class WholeObjects:
    """The decrypted packs that blob streams of one store read from (see the module
    docstring): loaded once per pack, on a worker thread, bounded by ``LIMIT``. ``loading``
    holds a future per pack being loaded (one load per pack, however many readers wait);
    ``ready`` the loaded ones (a view of the buffer and the plaintext size), least recently
    read first; a copy out of a buffer and its reuse both happen under ``lock``."""

    def __init__(self, limit: int = LIMIT) -> None:
        self.limit = limit
        self.lock = threading.Lock()
        self.loading: dict[str, Future[None]] = {}
        self.ready: OrderedDict[str, tuple[memoryview, bytes | bytearray]] = OrderedDict()
        self.held = 0
        self.readers = 0
        self.pool: ThreadPoolExecutor | None = None

    # -- buffers -----------------------------------------------------------------------------
    def take(self, n: int) -> bytearray:
        """A buffer of at least ``n`` bytes: a spare one when one is large enough (its pages
        are mapped already: a fresh 16 MiB buffer costs 4,096 page faults)."""
        with _SPARE_LOCK:
            fits = [b for b in _SPARE if len(b) >= n]
            if fits:
                best = min(fits, key=len)
                _SPARE.remove(best)
                return best
        # one size for every pack up to SEALED_GUESS, so that any spare fits the next pack
        # (packs of one blob differ by a few KiB; a buffer of exactly one size fit few others)
        return bytearray(max(n, SEALED_GUESS))

    def give(self, buf: bytes | bytearray) -> None:
        """``buf`` is free for the next ``take`` (a bytes plaintext of layout 1: dropped)."""
        if isinstance(buf, bytearray):
            with _SPARE_LOCK:
                if len(_SPARE) < SPARE:
                    _SPARE.append(buf)

    def _drop(self, path: str) -> None:
        """Forget the loaded ``path`` and free its buffer (under the lock)."""
        view, buf = self.ready.pop(path)
        self.held -= len(view)
        view.release()
        self.give(buf)

    # -- readers -----------------------------------------------------------------------------
    def opened(self, path: str, load: Loader) -> None:
        """A stream reader of ``path`` opened: its loading starts on the worker (once)."""
        with self.lock:
            self.readers += 1
            if path in self.ready or path in self.loading:
                return
            fut: Future[None] = Future()
            self.loading[path] = fut
            if self.pool is None:
                self.pool = ThreadPoolExecutor(1, thread_name_prefix="ckptfs-decrypt")
            pool = self.pool
        pool.submit(self._load, path, fut, load)

    def closed(self) -> None:
        """A stream reader closed; the last one releases every buffer and the worker."""
        with self.lock:
            self.readers -= 1
            if self.readers > 0:
                return
            for path in list(self.ready):
                self._drop(path)
            pool, self.pool = self.pool, None
        if pool is not None:
            pool.shutdown(wait=False)

    def _load(self, path: str, fut: Future[None], load: Loader) -> None:
        """Load ``path`` (on the worker, or in a reader's thread when it was dropped) into
        ``ready``, then settle ``fut``: with the load's error when it failed (nothing kept)."""
        try:
            buf, size = load(self.take, self.give)
        except BaseException as e:
            with self.lock:
                self.loading.pop(path, None)
            fut.set_exception(e)
            return
        with self.lock:
            self.loading.pop(path, None)
            if path in self.ready:  # loaded meanwhile by a reader whose load began first
                self.give(buf)
            else:
                self.ready[path] = (memoryview(buf)[:size], buf)
                self.held += size
                for old in list(self.ready):
                    if self.held <= self.limit:
                        break
                    if old != path:
                        self._drop(old)
        fut.set_result(None)

    def done(self, path: str) -> None:
        """A stream has read every byte it expected of ``path``: its buffer serves the next
        pack (a stream that reads it again after all opens it again)."""
        with self.lock:
            if path in self.ready:
                self._drop(path)

    def _wait(self, path: str, load: Loader) -> None:
        """Until ``path`` is loaded: wait for its load, or load it here when none is under
        way (it was dropped); the load's error (DecryptionError) when it failed."""
        with self.lock:
            if path in self.ready:
                return
            fut = self.loading.get(path)
            mine = fut is None
            if fut is None:
                fut = self.loading[path] = Future()
        if mine:
            self._load(path, fut, load)
        fut.result()

    def read_into(self, path: str, load: Loader, start: int, buf: memoryview) -> int:
        """Plaintext of ``path`` from ``start`` into ``buf``; how many bytes (fewer when the
        object ends first). Waits for the pack's loading (loads it here when it was dropped);
        its DecryptionError when it did not authenticate."""
        while True:
            with self.lock:  # copied under the lock: the buffer is not reused meanwhile
                hit = self.ready.get(path)
                if hit is not None:
                    self.ready.move_to_end(path)
                    view = hit[0]
                    n = max(0, min(len(buf), len(view) - start))
                    buf[:n] = view[start:start + n]
                    return n
            self._wait(path, load)

    def read(self, path: str, load: Loader, start: int, n: int) -> bytes:
        """``n`` bytes of ``path``'s plaintext from ``start`` (fewer at its end), one copy."""
        while True:
            with self.lock:
                hit = self.ready.get(path)
                if hit is not None:
                    self.ready.move_to_end(path)
                    return hit[0][start:start + n].tobytes()
            self._wait(path, load)
