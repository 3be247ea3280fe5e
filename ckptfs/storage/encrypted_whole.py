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

Memory: at most ``LIMIT`` bytes of plaintext are kept (least recently used dropped; a stream
that needs a dropped pack again opens it again), and every buffer is released when the last
stream reader of the store view closes. A buffer is reused only under the lock that copies
out of it, so no reader ever copies from a buffer being refilled.
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
    docstring): loaded once per pack, on a worker thread, bounded by ``LIMIT``."""

    def __init__(self, limit: int = LIMIT) -> None:
        self.limit = limit
        self.lock = threading.Lock()
        self.items: OrderedDict[str, Future[tuple[bytes | bytearray, int]]] = OrderedDict()
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
        return bytearray(n)

    def give(self, buf: bytes | bytearray) -> None:
        """``buf`` is free for the next ``take`` (a bytes plaintext of layout 1: dropped)."""
        if isinstance(buf, bytearray):
            with _SPARE_LOCK:
                if len(_SPARE) < SPARE:
                    _SPARE.append(buf)

    # -- readers -----------------------------------------------------------------------------
    def opened(self, path: str, load: Loader) -> None:
        """A stream reader of ``path`` opened: its loading starts on the worker (once)."""
        with self.lock:
            self.readers += 1
            if path in self.items:
                return
            fut: Future[tuple[bytes | bytearray, int]] = Future()
            self.items[path] = fut
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
            for fut in self.items.values():
                if fut.done() and fut.exception() is None:
                    self.give(fut.result()[0])
            self.items.clear()
            self.held = 0
            pool, self.pool = self.pool, None
        if pool is not None:
            pool.shutdown(wait=False)

    def _load(self, path: str, fut: Future[tuple[bytes | bytearray, int]],
              load: Loader) -> None:
        if not fut.set_running_or_notify_cancel():
            return
        try:
            got = load(self.take, self.give)
        except BaseException as e:
            with self.lock:
                if self.items.get(path) is fut:
                    del self.items[path]
            fut.set_exception(e)
            return
        with self.lock:
            if self.items.get(path) is fut:
                self.held += got[1]
                self._evict(keep=path)
        fut.set_result(got)

    def done(self, path: str) -> None:
        """A stream has read every byte it expected of ``path``: its buffer serves the next
        pack (a stream that reads it again after all opens it again)."""
        with self.lock:
            fut = self.items.get(path)
            if fut is None or not fut.done():
                return
            del self.items[path]
            if fut.exception() is None:
                buf, n = fut.result()
                self.held -= n
                self.give(buf)

    def _evict(self, keep: str) -> None:
        """Drop the least recently used loaded packs beyond ``limit`` (under the lock)."""
        for path in list(self.items):
            if self.held <= self.limit:
                return
            fut = self.items[path]
            if path == keep or not fut.done():
                continue
            del self.items[path]
            if fut.exception() is None:
                buf, n = fut.result()
                self.held -= n
                self.give(buf)

    def read_into(self, path: str, load: Loader, start: int, buf: memoryview) -> int:
        """Plaintext of ``path`` from ``start`` into ``buf``; how many bytes (fewer when the
        object ends first). Waits for the pack's loading (loads it here when it was dropped);
        its DecryptionError when it did not authenticate."""
        while True:
            with self.lock:
                fut = self.items.get(path)
                if fut is None:
                    fut = Future()
                    self.items[path] = fut
                    mine = True
                else:
                    self.items.move_to_end(path)
                    mine = False
            if mine:
                self._load(path, fut, load)
            data, size = fut.result()
            with self.lock:  # copied under the lock: the buffer is not reused meanwhile
                if self.items.get(path) is fut:
                    n = max(0, min(len(buf), size - start))
                    buf[:n] = memoryview(data)[start:start + n]
                    return n

    def read(self, path: str, load: Loader, start: int, n: int) -> bytes:
        """``n`` bytes of ``path``'s plaintext from ``start`` (fewer at its end), one copy."""
        while True:
            with self.lock:
                fut = self.items.get(path)
            if fut is None or not fut.done():
                # load (or wait) through read_into's path, then copy from the loaded pack
                self.read_into(path, load, start, memoryview(bytearray(0)))
                continue
            data, size = fut.result()
            with self.lock:
                if self.items.get(path) is fut:
                    self.items.move_to_end(path)
                    return bytes(memoryview(data)[start:max(start, min(size, start + n))])
