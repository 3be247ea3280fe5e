"""The maintenance lease: forget, gc and erase run one at a time per store.

Leases are generations ``leases/maintenance/<n>`` created only if absent, so two processes
taking over a stale lease cannot both win; the holder of the highest generation holds the lease
while it blocks (spec/retention.md "Maintenance lease"): not released, not expired, an expiry at
most MAX_LEASE_TTL_MS after its last renewal (a larger one is damaged), and a holder that is not
provably gone (same host id, pid no longer running). Release marks the generation released
instead of deleting it, so generations only grow: writers compare them (ckptfs.store.sweeps).

The default TTL is short (two minutes); the holder renews it with ``check()`` between steps and
``keep()`` inside long loops (cheap: it writes only when a third of the TTL has passed). A
holder that finds its own lease expired by its clock stops before changing more: writers stop
waiting for an expired lease, so its holder must not delete anything after that.
"""

from __future__ import annotations

import os
import socket
import time
from types import TracebackType

from ckptfs.errors import Busy, CkptfsError, utc_time
from ckptfs.format.lifecycle import MAX_LEASE_TTL_MS, Lease
from ckptfs.format.names import seq_name
from ckptfs.storage.base import Storage
from ckptfs.format.models import StoreConfig
from ckptfs.store.sweeps import (
    LEASE_DIR,
    check_window_ms,
    elapsed_clock,
    store_check_window_ms,
    generations,
    host_id,
    lease_blocks,
    read_lease,
)

DEFAULT_TTL_MS = 2 * 60 * 1000
__all__ = ["DEFAULT_TTL_MS", "LEASE_DIR", "MAX_LEASE_TTL_MS", "MaintenanceLease"]


def _now() -> int:
    return int(time.time() * 1000)


def describe(lease: Lease) -> str:
    """``owner pid N until <time>`` for messages."""
    where = f" pid {lease.pid}" if lease.pid is not None else ""
    return f"{lease.owner}{where} until {utc_time(lease.expires)}"


class MaintenanceLease:
    """Context manager holding the store's maintenance lease; ``check()`` renews it.

    ``deletes`` False promises that the holder deletes nothing until ``set_deletes(True)``
    (writers do not wait for such a lease). ``break_lease`` takes the lease even from a holder
    that looks alive; ``broken`` then says whose lease was broken (callers warn about it)."""

    def __init__(self, storage: Storage, *, ttl_ms: int = DEFAULT_TTL_MS,
                 owner: str | None = None, deletes: bool = True,
                 break_lease: bool = False, config: StoreConfig | None = None) -> None:
        if not 0 < ttl_ms <= MAX_LEASE_TTL_MS:
            raise ValueError(f"lease ttl_ms must be in 1..{MAX_LEASE_TTL_MS}, not {ttl_ms}")
        self.storage = storage
        #: the store config the caller already holds (its check window); None: read it here
        self.config = config
        self.ttl_ms = ttl_ms
        self.owner = owner or f"{socket.gethostname()}:{os.getpid()}:{id(self):x}"
        self.deletes = deletes
        self.break_lease = break_lease
        self.generation: int | None = None
        self.broken: Lease | None = None
        self._written = 0  # when this holder last wrote its lease (its clock, ms)
        self._expires = 0

    def _lease(self, now: int, *, released: bool = False) -> Lease:
        return Lease(self.owner, now, now if released else now + self.ttl_ms, host=host_id(),
                     pid=os.getpid(), deletes=self.deletes, released=released)

    def _path(self) -> str:
        assert self.generation is not None
        return f"{LEASE_DIR}/{seq_name(self.generation)}"

    def acquire(self) -> MaintenanceLease:
        # a bad setting stops before the lease
        window = (store_check_window_ms(self.storage) if self.config is None
                  else check_window_ms(self.config.version, self.config.settings))
        gens = generations(self.storage)
        top = gens[-1] if gens else 0
        held = read_lease(self.storage, top) if gens else None
        now = _now()
        if lease_blocks(held, now):
            assert held is not None
            if not self.break_lease:
                raise Busy(
                    f"{self.storage.url}: {describe(held)} holds the maintenance lease (another "
                    "forget, gc or erase is running); retry later. If you know that process is "
                    "gone (killed, or on a host that went down), pass --break-lease (CLI) or "
                    "break_lease=True.")
            self.broken = held
        gen = top + 1
        try:
            self.storage.create(f"{LEASE_DIR}/{seq_name(gen)}", self._lease(now).to_bytes())
        except FileExistsError:
            raise Busy(f"{self.storage.url}: another process took the maintenance lease just "
                       "now; retry later") from None
        self.generation, self._written, self._expires = gen, now, now + self.ttl_ms
        for g in gens:
            self.storage.delete(f"{LEASE_DIR}/{seq_name(g)}")
        self._settle(window)
        return self

    def _settle(self, window: int) -> None:
        """Wait the store's check window after taking the lease, before anything is decided
        or changed (spec/v2.md section 5.4): a writer that looked at the lease just before
        this generation existed may reuse that look, and skip its listings, for less than the
        window; every record it creates meanwhile exists before this holder lists anything."""
        if window <= 0:
            return
        end = elapsed_clock() + window / 1000
        while (left := end - elapsed_clock()) > 0:
            time.sleep(min(left, self.ttl_ms / 3000))
            if _now() - self._written >= self.ttl_ms // 3:
                self._renew()  # held all along: writers must not take it for final

    def check(self) -> None:
        """Fail if the lease was lost (a higher generation exists: taken over or broken);
        otherwise renew it. Between steps; before deletions that writers may depend on, use
        ``keep()``. A holder whose lease expired by its own clock stops here too: writers took
        that lease for final, so it must not come back (spec/v2.md section 5.4)."""
        self._still_held()
        gens = generations(self.storage)
        if not gens or gens[-1] != self.generation:
            self.generation = None
            raise Busy(f"{self.storage.url}: the maintenance lease was taken over (this "
                       "operation stalled past its expiry, or someone broke the lease); it "
                       "stopped before changing more")
        self._renew()

    def keep(self) -> None:
        """Inside loops, before each deletion: fail if the lease expired by this holder's
        clock; renew (with the takeover check) once a third of the TTL has passed."""
        self._still_held()
        if _now() - self._written >= self.ttl_ms // 3:
            self.check()

    def set_deletes(self, deletes: bool) -> None:
        """Announce (True) or withdraw the right to delete objects; renews the lease."""
        self._still_held()  # an expired lease is final to writers: it must not come back
        self.deletes = deletes
        self.check()

    def _still_held(self) -> None:
        if self.generation is None:
            raise CkptfsError("maintenance lease not held")
        if _now() >= self._expires:
            raise Busy(f"{self.storage.url}: this operation's maintenance lease expired (it "
                       "stalled for longer than the lease TTL); it stopped before changing more. "
                       "Run it again.")

    def _renew(self) -> None:
        now = _now()
        self.storage.replace(self._path(), self._lease(now).to_bytes())
        self._written, self._expires = now, now + self.ttl_ms

    def release(self) -> None:
        """Mark the generation released (kept, so that generation numbers only grow)."""
        if self.generation is not None:
            try:
                gens = generations(self.storage)
                if gens and gens[-1] == self.generation:
                    self.storage.replace(self._path(), self._lease(_now(), released=True)
                                         .to_bytes())
            finally:
                self.generation = None

    def __enter__(self) -> MaintenanceLease:
        return self.acquire()

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release()


def break_held_lease(storage: Storage) -> Lease | None:
    """Take the maintenance lease whoever holds it, then release it (``--break-lease``); the
    holder's next check stops it. The lease that was broken, or None when none blocked. Only
    for a holder known to be gone: a live holder may be deleting while a new one starts."""
    lease = MaintenanceLease(storage, break_lease=True, deletes=False)
    with lease:
        return lease.broken


def break_warning(storage: Storage, broken: Lease | None) -> str | None:
    """The warning the CLI prints after ``--break-lease`` (None when nothing was broken)."""
    if broken is None:
        return None
    return (f"warning: broke the maintenance lease of {describe(broken)} on {storage.url}. If "
            "that process is still running, it stops at its next lease check, but it may have "
            "been deleting objects meanwhile: run 'ckptfs verify' after this operation.")


class NoLease(MaintenanceLease):
    """Stands in for the lease where nothing will change (dry runs): takes nothing, so that no
    writer sees a new generation and checks its commit for nothing."""

    def __init__(self, storage: Storage) -> None:
        super().__init__(storage)

    def acquire(self) -> MaintenanceLease:
        return self

    def check(self) -> None:
        return None

    def keep(self) -> None:
        return None

    def set_deletes(self, deletes: bool) -> None:
        raise CkptfsError("a dry run deletes nothing")

    def release(self) -> None:
        return None
