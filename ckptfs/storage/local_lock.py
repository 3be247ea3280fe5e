"""Create-only without hard links: a ``filelock`` lock per folder of the store.

Where ``link(2)`` cannot make a create exclusive (no hard links on the filesystem, or the
fallback forced with ``CKPTFS_LOCAL_MODE=portable``), a create takes the lock of the folder it
creates in, checks that the name is absent, renames its fsynced temp file into place, fsyncs
the folder and releases the lock. Every ckptfs writer of the store creates that way, so two
never both find the name absent.

The lock files live in the store's ``tmp/locks/`` folder, one per folder that had a create
(``<sha256 of the folder's store path>.lock``); they are never removed while in use: gc's
temp-file sweep skips folders. The lock is an OS lock on an open file (flock on POSIX,
LockFileEx on Windows), which the OS releases when its holder dies: a lock file left by a
killed process blocks nobody. The lock's reach is the OS's: every process on this host, and
hosts sharing the filesystem only where its locks work across hosts.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Iterator

from ckptfs.errors import StorageError

#: a create holds its lock for a check, a rename and a folder fsync: milliseconds. A holder
#: that does not let go for this long is stopped or hung (a dead one has released it already)
LOCK_TIMEOUT_S = 120.0
LOCKS = "locks"


def lock_name(folder: str) -> str:
    """The lock file name of a store folder ('' for the root): fixed length, any run id."""
    return hashlib.sha256(folder.encode("utf-8")).hexdigest()[:32] + ".lock"


def soft_only() -> bool:
    """True when filelock can only make soft locks here (no flock: a lock file left by a
    killed process then blocks until removed by hand)."""
    import filelock  # here, not at import: only stores without hard links lock (70 ms)

    return issubclass(filelock.FileLock, filelock.SoftFileLock)


@contextlib.contextmanager
def folder_lock(lock_dir: str, folder: str, timeout: float = LOCK_TIMEOUT_S) -> Iterator[None]:
    """Hold the lock of store folder ``folder``; a StorageError after ``timeout`` seconds."""
    import filelock

    path = os.path.join(lock_dir, lock_name(folder))
    lock = filelock.FileLock(path, timeout=timeout)
    try:
        lock.acquire()
    except filelock.Timeout as e:
        raise StorageError(
            f"{folder or '(store root)'}: another process has held the create lock "
            f"{os.path.relpath(path, os.path.dirname(os.path.dirname(lock_dir)))} for "
            f"{timeout:.0f} s; it is stopped or hung (a process that died has released it). "
            "Find it (lsof on the lock file) and let it finish or end it; the store is "
            "unchanged") from e
    try:
        yield
    finally:
        lock.release()
