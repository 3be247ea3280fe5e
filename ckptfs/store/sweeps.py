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
  every object the snapshot names or that it wrote since is present, writes again those it holds
  the bytes of, and withdraws its record (ConflictError: the commit did not happen) if one it
  cannot restore is gone.

The lease helpers below (reading the highest generation, telling a lease whose holder is gone)
are shared with ``ckptfs.ops.lease``, which takes and renews the lease.
"""

from __future__ import annotations

import functools
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable

import attrs

from ckptfs.errors import CkptfsError, ConflictError, FormatError
from ckptfs.format.digest import Digest
from ckptfs.format.ledger import LedgerRef
from ckptfs.format.lifecycle import Lease
from ckptfs.format.models import Captured, Manifest
from ckptfs.format.names import CHUNKS, LEASES, chunk_path, parse_seq_name, record_path, seq_name
from ckptfs.storage.base import Storage

LEASE_DIR = f"{LEASES}/maintenance"
#: above this many objects to check, one listing of chunks/ is cheaper than one request each
_SCAN_ABOVE = 256
#: a writer takes a lease for expired only this long after its expiry by the writer's clock
#: (clocks of hosts differ; the holder stops by its own clock at the expiry)
CLOCK_SKEW_MS = 30_000


def now_ms() -> int:
    return int(time.time() * 1000)


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
    if lease.pid == os.getpid():
        return False  # this process: held by another object here, not gone
    try:
        os.kill(lease.pid, 0)
    except ProcessLookupError:
        return True
    except (PermissionError, OSError):
        return False
    return False


def lease_blocks(lease: Lease | None, now: int) -> bool:
    """A lease that excludes other maintenance now (held, unexpired, undamaged, holder alive)."""
    return lease is not None and lease.blocks(now) and not holder_gone(lease)


def generations(storage: Storage) -> list[int]:
    """The lease generations present, ascending (names that are not 20 digits are ignored)."""
    return sorted(g for g in (parse_seq_name(n) for n in storage.list(LEASE_DIR))
                  if g is not None)


def read_lease(storage: Storage, gen: int) -> Lease | None:
    """Generation ``gen``'s lease; None when absent or damaged (a damaged lease blocks nobody)."""
    try:
        return Lease.from_bytes(storage.read(f"{LEASE_DIR}/{seq_name(gen)}"),
                                what=f"lease {gen}")
    except (FileNotFoundError, FormatError):
        return None


@attrs.frozen
class Seen:
    """What a writer last saw of the lease: the highest generation (0: none), its lease, and
    whether that lease could not start deleting any more (released, expired, damaged, holder
    gone: a later delete would need a new generation)."""

    gen: int
    lease: Lease | None
    final: bool


def look(storage: Storage, prev: Seen | None = None) -> Seen:
    """One LIST; the lease is read only when the generation is new or was not final."""
    gens = generations(storage)
    gen = gens[-1] if gens else 0
    if gen == 0:
        return Seen(0, None, True)
    if prev is not None and prev.gen == gen and prev.final:
        return prev
    lease = read_lease(storage, gen)
    return Seen(gen, lease, not lease_blocks(lease, now_ms() - CLOCK_SKEW_MS))


def may_have_swept(before: Seen, after: Seen) -> bool:
    """Could a sweep have started between the two looks? A new generation may have; the same
    generation may have only if it was held then without deleting and is not final now."""
    if after.gen != before.gen:
        return True
    if before.final:
        return False
    was_deleting = before.lease is None or before.lease.deletes
    return was_deleting or after.lease is None or after.lease.deletes


def named_chunks(manifest: Manifest, results: Iterable[Captured] = ()) -> dict[Digest, int]:
    """Every chunk the manifest's entries and ledger name (and ``results``' chunks): digest ->
    size. Pure: no storage access."""
    out: dict[Digest, int] = {}
    for e in manifest.entries.values():
        if isinstance(e, Captured):
            for c in e.chunks:
                out[c.digest] = c.size
    if manifest.ledger is not None:
        for c in LedgerRef.from_cbor(manifest.ledger).as_entry().chunks:
            out[c.digest] = c.size
    for r in results:
        for c in r.chunks:
            out[c.digest] = c.size
    return out


class SweepGuard:
    """One writer's memory of the lease, and what it wrote since it last looked."""

    def __init__(self, storage: Storage, *, poll_s: float = 0.02, max_poll_s: float = 0.5,
                 on_wait: Callable[[], None] | None = None) -> None:
        self.storage = storage
        #: v2 stores: the digests among those given that nothing in the store holds
        self.missing: Callable[[list[Digest]], list[Digest] | None] | None = None
        #: per thread (threads may share a store and commit at once): what it last saw, and
        #: the objects it wrote since (path -> framed bytes; None: not kept)
        self._local = threading.local()
        self.poll_s, self.max_poll_s = poll_s, max_poll_s
        #: called once each time a writer starts waiting for a sweep to end (tests use it)
        self.on_wait = on_wait
        self.in_doubt = 0

    @property
    def seen(self) -> Seen | None:
        return getattr(self._local, "seen", None)

    @seen.setter
    def seen(self, v: Seen | None) -> None:
        self._local.seen = v

    @property
    def pending(self) -> dict[str, bytes | None]:
        p: dict[str, bytes | None] | None = getattr(self._local, "pending", None)
        if p is None:
            p = self._local.pending = {}
        return p

    @pending.setter
    def pending(self, v: dict[str, bytes | None]) -> None:
        self._local.pending = v

    def before_write(self, objects: Iterable[tuple[str, bytes | None]]) -> None:
        """Call before writing ``objects`` (chunks, a manifest): the first write of this writer
        looks at the lease first, so that later looks can tell whether a sweep started."""
        if self.seen is None:
            self.seen = look(self.storage)
        for path, data in objects:
            self.pending[path] = data

    def after_record(self, manifest: Manifest, results: Callable[[], Iterable[Captured]]
                     ) -> None:
        """After the record was created and survived the retired-range check: finish the
        handshake (module docstring). ``results`` gives the ledger's result entries (read
        only when the commit is in doubt)."""
        before = self.seen if self.seen is not None else Seen(0, None, False)
        after = look(self.storage, before)
        if not may_have_swept(before, after):
            self.seen, self.pending = after, {}
            return
        self.in_doubt += 1
        after = self._wait(after)
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
            self.seen, self.pending = after, {}

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
        """Write again what is missing and held; withdraw the record if anything else is.
        v2 stores (``missing`` set): the bodies this commit wrote are in its own record, so
        nothing needs writing again; anything it names that is gone withdraws it."""
        gone = None if self.missing is None else self.missing([])
        if gone is not None:  # a v2 store
            try:
                gone = self.missing(list(named_chunks(manifest, results()))) if self.missing else []
            except CkptfsError as e:
                self._withdraw(manifest, 1, str(e))
            if gone:
                self._withdraw(manifest, len(gone), f"chunk {gone[0]}")
            return
        need: dict[str, bytes | None] = {chunk_path(d): None for d in named_chunks(manifest)}
        for p, data in self.pending.items():
            if data is not None or p not in need:
                need[p] = data
        lost = self._restore(need)
        if not lost:  # the ledger's chunks are there: its large results can be read
            try:
                lost = self._restore({chunk_path(d): self.pending.get(chunk_path(d))
                                      for d in named_chunks(manifest, results())})
            except CkptfsError as e:
                lost = [str(e)]
        if lost:
            self._withdraw(manifest, len(lost), lost[0])

    def _withdraw(self, manifest: Manifest, n: int, example: str) -> None:
        self.storage.delete(record_path(manifest.run, manifest.seq))
        raise ConflictError(
            f"run {manifest.run!r}: a maintenance sweep (gc or erase) that ran during this "
            f"commit deleted {n} object(s) it names that this writer cannot write "
            f"again (e.g. {example}); the commit was withdrawn and did not happen. Resume the "
            "run's head and checkpoint again (with the data in hand).")

    def _restore(self, need: dict[str, bytes | None]) -> list[str]:
        """Write again every missing object of ``need`` whose bytes are held; the others."""
        present = self._present(list(need))
        lost = []
        for path, data in need.items():
            if path in present:
                continue
            if data is None:
                lost.append(path)
            else:
                self.storage.write(path, data)  # restored: written again, hence fresh
        return lost

    def _present(self, paths: list[str]) -> set[str]:
        if len(paths) > _SCAN_ABOVE:
            listed = set(self.storage.scan(CHUNKS))
            rest = [p for p in paths if not p.startswith(f"{CHUNKS}/")]
            return {p for p in paths if p in listed} | {p for p in rest
                                                         if self.storage.exists(p)}
        return {p for p in paths if self.storage.exists(p)}


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
