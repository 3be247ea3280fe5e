"""Change the expiry of a run or a snapshot after the fact (``ckptfs expire``)."""

from __future__ import annotations

import time

from ckptfs.errors import NotFound
from ckptfs.format.lifecycle import Expiry
from ckptfs.format.names import RUN_ID
from ckptfs.store.lifecycle import write_expiry
from ckptfs.store.repository import Repository


def set_expiry(repo: Repository, target: str, expires: int | None,
               now: int | None = None) -> Expiry:
    """``target`` is a run id (every snapshot of the run, later ones included) or any snapshot
    reference (``RUN@SEQ``, ``blake3:...``, a hex prefix). ``expires`` None means never."""
    repo.check_writable()  # a version 1 store is upgraded first
    now = int(time.time() * 1000) if now is None else now
    if "@" not in target and RUN_ID.match(target) and repo.seqs(target):
        return write_expiry(repo.storage, target, None, expires, now)
    snap = repo.resolve(target)
    if snap.seq not in repo.seqs(snap.run):
        raise NotFound(f"{target!r} is not a retained snapshot")
    return write_expiry(repo.storage, snap.run, snap.seq, expires, now)
