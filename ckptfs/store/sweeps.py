"""The writer's side of the collector handshake (spec/retention.md "Sweeps and writers").

A collector (gc; erase) deletes objects it judged unreferenced. Between its judgement and its
delete, a writer may commit a snapshot that names such an object: it re-wrote old garbage (which
refreshed it) or named a chunk it did not write (a fork's parent, a blob stored by another run).
No age check closes that window, on any backend. The handshake does:

* the collector holds the maintenance lease, marks, sets its lease to "deletes" (the sweep),
  marks again the records created since its first mark, and only then deletes;
* the writer, after creating its record, lists ``leases/maintenance/`` (one LIST) and compares
  with what it saw after its previous commit (or before its first write). If no sweep can have
  started since, nothing it relies on was judged garbage by a mark that missed its record. If
  one can have, the commit is *in doubt*: the writer waits until that sweep is over, checks that
  every chunk the snapshot names can still be found (its own record carries the bodies it
  wrote), and withdraws its record (ConflictError: the commit did not happen) if one is gone.

The lease helpers below (reading the highest generation, telling a lease whose holder is gone)
are shared with ``ckptfs.ops.lease``, which takes and renews the lease.
"""

from __future__ import annotations

import functools
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs

from ckptfs.errors import CkptfsError, ConflictError, CorruptObject, FormatError
from ckptfs.format.digest import Digest
from ckptfs.format.ledger import LedgerRef
from ckptfs.format.lifecycle import Lease
from ckptfs.format.models import Captured, Manifest, StoreConfig
from ckptfs.format.names import CONFIG_PATH, LEASES, parse_seq_name, record_path, seq_name
from ckptfs.storage.base import Storage

LEASE_DIR = f"{LEASES}/maintenance"
#: a writer takes a lease for expired only this long after its expiry by the writer's clock
#: (clocks of hosts differ; the holder stops by its own clock at the expiry)
CLOCK_SKEW_MS = 30_000
#: the check window of a version 2 store without the ``check_window_ms`` setting (spec/v2.md
#: section 5.4): a writer re-lists the lease and retired ranges at most this often while no
#: maintenance runs, and every maintenance operation waits this long after taking its lease
DEFAULT_CHECK_WINDOW_MS = 500
#: the largest window a store may set (a maintenance operation waits this long)
MAX_CHECK_WINDOW_MS = 60_000
#: a writer reuses a look only while less than this share of the window has passed by its own
#: clock (margin for clocks that run at slightly different rates and for timer granularity)
WINDOW_SHARE = 0.9


def now_ms() -> int:
    return int(time.time() * 1000)


def elapsed_clock() -> float:
    """Seconds on a clock that never goes back and keeps counting while the machine sleeps
    (CLOCK_BOOTTIME on Linux; elsewhere the monotonic clock): the check window is measured on
    it, so a writer suspended after a look cannot take an old look for a fresh one."""
    boot = getattr(time, "CLOCK_BOOTTIME", None)
    return time.clock_gettime(boot) if boot is not None else time.monotonic()


def check_window_ms(version: int, settings: Mapping[str, Any]) -> int:
    """The store's check window in ms (spec/v2.md section 5.4): the ``check_window_ms`` setting,
    else 500 on version 2 stores and 0 (no window: every commit checks) on version 1 stores.
    A malformed setting is refused (writers and collectors must agree on it)."""
    w = settings.get("check_window_ms")
    if w is None:
        return DEFAULT_CHECK_WINDOW_MS if version >= 2 else 0
    if type(w) is not int or not 0 <= w <= MAX_CHECK_WINDOW_MS:
        raise CorruptObject(f"store setting check_window_ms must be an integer in "
                            f"0..{MAX_CHECK_WINDOW_MS}, not {w!r}")
    return w


@functools.cache
def host_id() -> str:
    """This host, as precisely as a pid can be proven dead on it: hostname, kernel boot id and
    pid namespace (two containers with one hostname do not share pids)."""
    parts = [socket.gethostname()]
    for path in ("/proc/sys/kernel/random/boot_id",):
        try:
            with open(path) as f:
                parts.append(f.read().strip())
        except OSError:
            parts.append("-")
    try:
        parts.append(os.readlink("/proc/self/ns/pid"))
    except OSError:
        parts.append("-")
    return "/".join(parts)


def holder_gone(lease: Lease) -> bool:
    """True only when the holder provably no longer runs: same host id, and no process with its
    pid exists. Anything else (another host, no pid recorded, a pid that exists) is not proof."""
    if lease.host is None or lease.pid is None or lease.host != host_id():
        return False
    return pid_gone(lease.pid)


def pid_gone(pid: int) -> bool:
    """True only when no process of this host (pid namespace) has ``pid``: the one proof that
    a process named by a lease of this host ended. A pid that exists is no proof either way
    (the holder, or another process that got its pid): the lease then runs its course. This
    process is never gone; nor is anything where signal 0 cannot ask (Windows: ``os.kill``
    would end the process)."""
    if pid <= 0 or pid == os.getpid() or os.name != "posix":
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # PermissionError: it exists, another user's
        return False
    return False


def lease_blocks(lease: Lease | None, now: int) -> bool:
    """A lease that excludes other maintenance now (held, unexpired, undamaged, holder alive)."""
    return lease is not None and lease.blocks(now) and not holder_gone(lease)


def generations(storage: Storage) -> list[int]:
    """The lease generations present, ascending (names that are not 20 digits are ignored)."""
    return sorted(g for g in (parse_seq_name(n) for n in storage.listing(LEASE_DIR).files)
                  if g is not None)


def read_lease(storage: Storage, gen: int) -> Lease | None:
    """Generation ``gen``'s lease; None when absent or damaged (a damaged lease blocks nobody)."""
    try:
        return Lease.from_bytes(storage.read(f"{LEASE_DIR}/{seq_name(gen)}"),
                                what=f"lease {gen}")
    except (FileNotFoundError, FormatError):
        return None


def store_check_window_ms(storage: Storage) -> int:
    """The check window of the store at ``storage`` (read from its config; 0 without one)."""
    try:
        cfg = StoreConfig.from_bytes(storage.read(CONFIG_PATH))
    except FileNotFoundError:
        return 0
    return check_window_ms(cfg.version, cfg.settings)


@attrs.frozen
class Seen:
    """What a writer last saw of the lease: the highest generation (0: none), its lease, and
    whether that lease could not start deleting any more (released, expired, damaged, holder
    gone: a later delete would need a new generation)."""

    gen: int
    lease: Lease | None
    final: bool
    #: when the LIST behind this look was sent (``elapsed_clock``)
    at: float = 0.0

    @property
    def quiet(self) -> bool:
        """No maintenance can act now or later under this generation: none was ever taken, or
        the highest lease was read and is final (released, expired, holder gone). A damaged
        lease is not quiet (its holder may still renew it): writers check every commit."""
        return self.gen == 0 or (self.lease is not None and self.final)


def look(storage: Storage, prev: Seen | None = None) -> Seen:
    """One LIST; the lease is read only when the generation is new or was not final."""
    at = elapsed_clock()
    gens = generations(storage)
    gen = gens[-1] if gens else 0
    if gen == 0:
        return Seen(0, None, True, at)
    if prev is not None and prev.gen == gen and prev.final:
        return attrs.evolve(prev, at=at)
    lease = read_lease(storage, gen)
    return Seen(gen, lease, not lease_blocks(lease, now_ms() - CLOCK_SKEW_MS), at)


def may_have_swept(before: Seen, after: Seen) -> bool:
    """Could a sweep have started between the two looks? A new generation may have; the same
    generation may have only if it was held then without deleting and is not final now."""
    if after.gen != before.gen:
        return True
    if before.final:
        return False
    was_deleting = before.lease is None or before.lease.deletes
    return was_deleting or after.lease is None or after.lease.deletes


#: the chunks of the last few manifests looked at, by identity (a commit asks for its new
#: manifest's and its parent's; the parent was the previous commit's new one): id -> (the
#: manifest, kept alive so that its id is not reused; its chunks)
_NAMED: dict[int, tuple[Manifest, dict[Digest, int]]] = {}
_NAMED_KEEP = 4
_NAMED_LOCK = threading.Lock()


def named_chunks(manifest: Manifest, results: Iterable[Captured] = ()) -> dict[Digest, int]:
    """Every chunk the manifest's entries and ledger name (and ``results``' chunks): digest ->
    size, a new dict the caller may change. Pure: no storage access (the last few manifests'
    answers are remembered: manifests are frozen)."""
    with _NAMED_LOCK:
        hit = _NAMED.get(id(manifest))
    if hit is None or hit[0] is not manifest:
        hit = (manifest, _named(manifest))
        with _NAMED_LOCK:
            while len(_NAMED) >= _NAMED_KEEP:
                _NAMED.pop(next(iter(_NAMED)))
            _NAMED[id(manifest)] = hit
    out = dict(hit[1])
    for r in results:
        for c in r.chunks:
            out[c.digest] = c.size
    return out


def _named(manifest: Manifest) -> dict[Digest, int]:
    out: dict[Digest, int] = {}
    for e in manifest.entries.values():
        if isinstance(e, Captured):
            for c in e.chunks:
                out[c.digest] = c.size
    if manifest.ledger is not None:
        for c in LedgerRef.from_cbor(manifest.ledger).as_entry().chunks:
            out[c.digest] = c.size
    return out


class SweepGuard:
    """One writer's memory of the lease, and what it wrote since it last looked."""

    def __init__(self, storage: Storage, *, poll_s: float = 0.02, max_poll_s: float = 0.5,
                 on_wait: Callable[[], None] | None = None) -> None:
        self.storage = storage
        #: v2 stores: the digests among those given that nothing in the store holds
        self.missing: Callable[[list[Digest]], list[Digest]] | None = None
        #: per thread (threads may share a store and commit at once): what it last saw, and
        #: the objects it wrote since (path -> framed bytes; None: not kept)
        self._local = threading.local()
        self.poll_s, self.max_poll_s = poll_s, max_poll_s
        #: called once each time a writer starts waiting for a sweep to end (tests use it)
        self.on_wait = on_wait
        #: called once a sweep that may have overlapped a commit is over: the writer stops
        #: trusting what it wrote before (erase drops bodies of containers of any age, so a
        #: body written within ``REUSE_WINDOW`` may be gone; spec/v2.md 5.2)
        self.on_swept: Callable[[], None] | None = None
        self.in_doubt = 0
        #: the store's check window in ms (set from the config; 0: look after every commit)
        self.window_ms = 0
        #: looks taken (LISTs of the lease folder) and looks reused within the window
        self.looks = self.reused = 0
        #: the newest quiet look any thread of this writer took (``before_write``)
        self._newest: Seen | None = None
        self._newest_lock = threading.Lock()

    @property
    def seen(self) -> Seen | None:
        return getattr(self._local, "seen", None)

    @seen.setter
    def seen(self, v: Seen | None) -> None:
        self._local.seen = v

    def before_write(self) -> None:
        """Call before this writer's first write: it looks at the lease first, so that later
        looks can tell whether a sweep started."""
        if self.seen is None:
            # A thread's first write (an adapter's turns run in a pool's worker threads):
            # the newest quiet look another thread took is a look at the lease before this
            # write too, which is all the handshake asks of the first look (a sweep that
            # started since shows in the look after the record, as it would after a look of
            # this thread's own), so it costs no LIST. A look that was not quiet is not
            # reused: this thread looks itself.
            with self._newest_lock:
                newest = self._newest
            self.seen = newest if newest is not None else self._took(look(self.storage))

    def _took(self, seen: Seen) -> Seen:
        """Remember ``seen`` as the newest look of this writer when it is quiet."""
        with self._newest_lock:
            if seen.quiet:
                if self._newest is None or seen.at >= self._newest.at:
                    self._newest = seen
            elif self._newest is not None and seen.at >= self._newest.at:
                self._newest = None  # maintenance may act: the next thread looks itself
        return seen

    def look_after(self) -> Seen:
        """The look a commit is judged by, taken after its record was created: the last one
        again while it is quiet and younger than the window by this writer's clock (no
        maintenance can act before the window has passed since it was taken: spec/v2.md
        section 5.4), else a new one (one LIST)."""
        prev = self.seen
        if (prev is not None and prev.quiet and self.window_ms > 0
                and elapsed_clock() - prev.at < self.window_ms * WINDOW_SHARE / 1000):
            self.reused += 1
            return prev
        self.looks += 1
        return self._took(look(self.storage, prev))

    def after_record(self, manifest: Manifest, results: Callable[[], Iterable[Captured]],
                     after: Seen | None = None) -> None:
        """After the record was created and survived the retired-range check: finish the
        handshake (module docstring) with the look ``after`` (``look_after()``, taken after the
        record; one is taken here when None). ``results`` gives the ledger's result entries
        (read only when the commit is in doubt)."""
        before = self.seen if self.seen is not None else Seen(0, None, False)
        if after is None:
            after = self.look_after()
        if not may_have_swept(before, after):
            self.seen = after
            return
        self.in_doubt += 1
        after = self._wait(after)
        if self.on_swept is not None:
            self.on_swept()
        try:
            if not self.storage.exists(record_path(manifest.run, manifest.seq)):
                # the sweep was an erase (or a forget's gc) that removed this very record: what
                # it deleted must stay deleted, so nothing is written back
                raise ConflictError(
                    f"run {manifest.run!r}: a maintenance operation (erase) that ran during this "
                    f"commit removed its record (seq {manifest.seq}); the commit did not happen "
                    "and nothing of it was written back. Check the run ('ckptfs log') before "
                    "continuing.")
            self._repair(manifest, results)
        finally:
            self.seen = after

    def _wait(self, seen: Seen) -> Seen:
        """Until the highest lease no longer blocks while it may delete."""
        delay = self.poll_s
        told = False
        while not seen.final and (seen.lease is None or seen.lease.deletes):
            if not told and self.on_wait is not None:
                self.on_wait()
            told = True
            time.sleep(delay)
            delay = min(delay * 2, self.max_poll_s)
            seen = look(self.storage, seen)
        # final, or held while promising not to delete (forget; a collector still marking):
        # its sweep, if any, marks again after this record exists
        return seen

    def _repair(self, manifest: Manifest, results: Callable[[], Iterable[Captured]]) -> None:
        """Withdraw the record if a chunk it names is gone: the bodies this commit wrote are in
        its own record, so nothing needs writing again (``missing``: the digests no container,
        forward or loose object holds)."""
        if self.missing is None:
            return
        try:
            gone = self.missing(list(named_chunks(manifest, results())))
        except CkptfsError as e:
            self._withdraw(manifest, 1, str(e))
        if gone:
            self._withdraw(manifest, len(gone), f"chunk {gone[0]}")

    def _withdraw(self, manifest: Manifest, n: int, example: str) -> None:
        self.storage.delete(record_path(manifest.run, manifest.seq))
        raise ConflictError(
            f"run {manifest.run!r}: a maintenance sweep (gc or erase) that ran during this "
            f"commit deleted {n} object(s) it names that this writer cannot write "
            f"again (e.g. {example}); the commit was withdrawn and did not happen. Resume the "
            "run's head and checkpoint again (with the data in hand).")


def unprotected(manifest: Manifest, parent: Manifest | None, written: Iterable[Digest],
                mine: Callable[[Digest], bool]) -> list[tuple[Digest, int]]:
    """Chunks ``manifest``'s entries and ledger name that this commit does not write
    (``written``), that its parent does not name while it is the same run's previous snapshot,
    and that this writer did not itself write recently (``mine``): a fork's parent's chunks, a
    blob stored by another run or an older snapshot. The writer must write them again (spec
    "Grace rule"). Pure; its cost is in memory, proportional to the manifest's chunk lists."""
    named = named_chunks(manifest)
    if parent is not None and parent.run == manifest.run and parent.seq == manifest.seq - 1:
        for d in named_chunks(parent):
            named.pop(d, None)
    for d in written:
        named.pop(d, None)
    return [(d, n) for d, n in named.items() if not mine(d)]


__all__ = ["SweepGuard", "host_id", "holder_gone", "lease_blocks", "look",
           "may_have_swept", "named_chunks", "unprotected"]
