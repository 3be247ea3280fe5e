"""The maintenance lease: forget, gc and erase run one at a time per store.

Leases are generations ``leases/maintenance/<n>`` created only if absent, so two processes
taking over a stale lease cannot both win; the holder of the highest generation whose expiry
has not passed holds the lease. A lease that expired blocks nobody (spec/retention.md "Lease").
"""

from __future__ import annotations

import os
import socket
import time
from types import TracebackType

from ckptfs.errors import Busy, CkptfsError, FormatError
from ckptfs.format.lifecycle import Lease
from ckptfs.format.names import LEASES, parse_seq_name, seq_name
from ckptfs.storage.base import Storage

LEASE_DIR = f"{LEASES}/maintenance"
DEFAULT_TTL_MS = 10 * 60 * 1000


def _now() -> int:
    return int(time.time() * 1000)


class MaintenanceLease:
    """Context manager holding the store's maintenance lease; ``check()`` renews it."""

    def __init__(self, storage: Storage, *, ttl_ms: int = DEFAULT_TTL_MS,
                 owner: str | None = None) -> None:
        self.storage = storage
        self.ttl_ms = ttl_ms
        self.owner = owner or f"{socket.gethostname()}:{os.getpid()}:{id(self):x}"
        self.generation: int | None = None

    def _generations(self) -> list[int]:
        return sorted(g for g in (parse_seq_name(n) for n in self.storage.list(LEASE_DIR))
                      if g is not None)

    def _read(self, gen: int) -> Lease | None:
        try:
            return Lease.from_bytes(self.storage.read(f"{LEASE_DIR}/{seq_name(gen)}"),
                                    what=f"lease {gen}")
        except FileNotFoundError:
            return None
        except FormatError:  # a damaged lease is treated as expired: it must not block forever
            return None

    def acquire(self) -> MaintenanceLease:
        gens = self._generations()
        top = gens[-1] if gens else 0
        held = self._read(top) if gens else None
        if held is not None and held.expires > _now():
            raise Busy(f"{self.storage.url}: {held.owner} holds the maintenance lease until "
                       f"{held.expires} ms (another forget, gc or erase is running); retry later")
        gen = top + 1
        now = _now()
        try:
            self.storage.create(f"{LEASE_DIR}/{seq_name(gen)}",
                                Lease(self.owner, now, now + self.ttl_ms).to_bytes())
        except FileExistsError:
            raise Busy(f"{self.storage.url}: another process took the maintenance lease just "
                       "now; retry later") from None
        self.generation = gen
        for g in gens:
            self.storage.delete(f"{LEASE_DIR}/{seq_name(g)}")
        return self

    def check(self) -> None:
        """Fail if the lease was lost (expired and taken over); otherwise extend it."""
        if self.generation is None:
            raise CkptfsError("maintenance lease not held")
        gens = self._generations()
        if not gens or gens[-1] != self.generation:
            raise Busy(f"{self.storage.url}: the maintenance lease was taken over (this "
                       "operation stalled past its expiry); it stopped before changing more")
        now = _now()
        self.storage.replace(f"{LEASE_DIR}/{seq_name(self.generation)}",
                             Lease(self.owner, now, now + self.ttl_ms).to_bytes())

    def release(self) -> None:
        if self.generation is not None:
            self.storage.delete(f"{LEASE_DIR}/{seq_name(self.generation)}")
            self.generation = None

    def __enter__(self) -> MaintenanceLease:
        return self.acquire()

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release()
