"""Operating-system calls of the local backend, each with its portable fallback.

Nothing here is chosen by platform name: a call or flag that this Python or this OS lacks is
looked up with ``getattr`` (so that importing ckptfs never fails on Windows or macOS), and
whether it works on the store's filesystem is probed by ``local_caps.probe`` when the store is
first written. These are the primitives ``LocalStorage`` composes.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

try:  # absent on Windows
    import fcntl as _fcntl
except ImportError:  # pragma: no cover - Windows
    _fcntl = None  # type: ignore[assignment]


def flag(name: str) -> int:
    """``os.O_<name>`` where this OS has it, else 0 (Windows has no O_NOFOLLOW, O_NONBLOCK,
    ...: never an AttributeError)."""
    return int(getattr(os, f"O_{name}", 0))


_READ = os.O_RDONLY | flag("NONBLOCK") | flag("NOCTTY") | flag("CLOEXEC") | flag("BINARY")
_NOFOLLOW = flag("NOFOLLOW")


def read_flags(nofollow: bool = False) -> int:
    """Flags for opening an object to read: no blocking on a FIFO, no controlling terminal,
    closed on exec, binary on Windows; O_NOFOLLOW when ``nofollow`` (the caller knows whether
    it works on the store's filesystem). Computed once at import (a restore opens a dozen
    objects: five lookups each were a fifth of a small read's time)."""
    return _READ | _NOFOLLOW if nofollow else _READ


def read_upto(fd: int, n: int) -> bytes:
    """Up to ``n`` bytes from ``fd``'s offset: fewer only where the file ends (a short read
    is read on: a pipe, a network filesystem or Windows may return part of what was asked)."""
    data = os.read(fd, n)
    if len(data) == n or not data:
        return data
    parts = [data]
    got = len(data)
    while got < n:
        more = os.read(fd, n - got)
        if not more:
            break
        parts.append(more)
        got += len(more)
    return b"".join(parts)


def write_flags() -> int:
    """Flags for a new temp file: created, exclusive, binary on Windows."""
    return os.O_WRONLY | os.O_CREAT | os.O_EXCL | flag("CLOEXEC") | flag("BINARY")


def drop_temp(tmp: str) -> None:
    """Remove a named temp file; unnamed (O_TMPFILE) ones vanish when their descriptor closes."""
    if tmp and not tmp.startswith("/proc/"):
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass


def write_all(fd: int, data: bytes | Sequence[bytes | memoryview]) -> None:
    """Write ``data`` whole: one buffer, or a sequence of parts in order (``os.writev`` of up
    to IOV_MAX parts per call where the OS has it: a pack's bodies are not joined first)."""
    if isinstance(data, (bytes, bytearray, memoryview)):
        data = [data]
    writev = getattr(os, "writev", None)
    views = [memoryview(p).cast("B") for p in data if len(p)]
    i = 0
    while i < len(views):
        if writev is None or len(views) - i == 1:
            n = os.write(fd, views[i])
        else:
            n = writev(fd, views[i:i + _IOV_MAX])
        while n and i < len(views):  # drop what was written, split a part written in part
            if n >= len(views[i]):
                n -= len(views[i])
                i += 1
            else:
                views[i] = views[i][n:]
                n = 0


#: the most parts one writev takes (POSIX IOV_MAX is at least 16; Linux and macOS have 1024)
def _iov_max() -> int:
    try:
        return max(16, min(1024, int(os.sysconf("SC_IOV_MAX"))))
    except (AttributeError, ValueError, OSError):  # Windows has no sysconf
        return 16


_IOV_MAX = _iov_max()


def pread_into(fd: int, buf: memoryview, offset: int) -> int:
    """Read into ``buf`` from ``offset`` until it is full or the file ends; the count read
    (``os.preadv`` where it exists, else seek and readinto)."""
    fn = getattr(os, "preadv", None)
    got = 0
    while got < len(buf):
        if fn is not None:
            n = fn(fd, [buf[got:]], offset + got)
        else:  # pragma: no cover - Windows
            os.lseek(fd, offset + got, os.SEEK_SET)
            n = os.readv(fd, [buf[got:]]) if hasattr(os, "readv") else _read_into(fd, buf[got:])
        if n <= 0:
            break
        got += n
    return got


def _read_into(fd: int, buf: memoryview) -> int:  # pragma: no cover - Windows
    data = os.read(fd, len(buf))
    buf[:len(data)] = data
    return len(data)


def pread(fd: int, size: int, offset: int) -> bytes:
    """``os.pread`` where it exists; Windows has none: seek and read (the descriptor is this
    call's own, so moving its offset is harmless)."""
    if size <= 0:
        return b""
    fn = getattr(os, "pread", None)
    if fn is not None:
        return bytes(fn(fd, size, offset))
    os.lseek(fd, offset, os.SEEK_SET)
    return read_upto(fd, size)


# -- unnamed temp files: O_TMPFILE, linked through /proc/self/fd (Linux) ------------------------
_PROC_FD: tuple[int, int] | None = None  # (pid, descriptor of /proc/self/fd)


def _proc_fd() -> int:
    """A descriptor of this process's /proc/self/fd, opened once per process (a child after
    fork must not use its parent's, which would name the parent's descriptors)."""
    global _PROC_FD
    pid = os.getpid()
    if _PROC_FD is None or _PROC_FD[0] != pid:
        _PROC_FD = (pid, os.open("/proc/self/fd", os.O_RDONLY | flag("DIRECTORY")))
    return _PROC_FD[1]


#: whether /proc/self/fd exists (looked at once per process: not a stat per commit)
_HAVE_PROC_FD: bool | None = None


def open_tmpfile(folder: str) -> tuple[str, int]:
    """An unnamed temp file in ``folder`` (O_TMPFILE) and the path ``link`` links it from;
    OSError where the OS or the filesystem has no O_TMPFILE."""
    global _HAVE_PROC_FD
    tmpfile = flag("TMPFILE")
    if _HAVE_PROC_FD is None:
        _HAVE_PROC_FD = os.path.isdir("/proc/self/fd")
    if not tmpfile or not _HAVE_PROC_FD:
        raise OSError(0, "O_TMPFILE is not available")
    fd = os.open(folder, tmpfile | os.O_WRONLY | flag("CLOEXEC"), 0o644)
    return f"/proc/self/fd/{fd}", fd


def link(src: str, dst: str) -> None:
    """Hard-link a temp file to its final name; EEXIST (FileExistsError) if the name is taken.

    An unnamed temp file is linked through ``/proc/self/fd`` with linkat(AT_SYMLINK_FOLLOW),
    which Python only issues when a ``src_dir_fd`` is given."""
    if src.startswith("/proc/self/fd/"):
        os.link(src.rsplit("/", 1)[1], dst, src_dir_fd=_proc_fd(), follow_symlinks=True)
    else:
        os.link(src, dst)


# -- durability: fsync, F_FULLFSYNC (macOS), directory fsync, syncfs(2) (Linux) -------------------
def full_fsync_flag() -> int | None:
    """``fcntl.F_FULLFSYNC`` where the OS has it (macOS): plain fsync there leaves the data in
    the drive's volatile cache; F_FULLFSYNC asks the drive to flush it (SQLite's
    ``PRAGMA fullfsync`` for the same reason)."""
    return getattr(_fcntl, "F_FULLFSYNC", None) if _fcntl is not None else None


def fsync_file(fd: int, full: bool) -> None:
    """fsync ``fd``; with ``full`` (probed to work on the store's filesystem) by F_FULLFSYNC."""
    op = full_fsync_flag() if full else None
    if op is not None and _fcntl is not None:
        _fcntl.fcntl(fd, op)
        return
    os.fsync(fd)


def open_dir(path: str) -> int:
    """A read-only descriptor of a folder (for fsync or syncfs); OSError on Windows, where a
    folder cannot be opened with os.open."""
    return os.open(path, os.O_RDONLY | flag("DIRECTORY"))


def fsync_dir(path: str, full: bool) -> None:
    fd = open_dir(path)
    try:
        fsync_file(fd, full)
    finally:
        os.close(fd)


def _load_syncfs() -> Any:
    """libc's syncfs(2), or None where the C library has none (macOS, Windows, musl before
    1.1.x) or cannot be loaded."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.syncfs
    except Exception:  # OSError, AttributeError, TypeError (Windows: CDLL(None))
        return None
    fn.argtypes = [ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


_SYNCFS: Any = _load_syncfs()


def have_syncfs() -> bool:
    return _SYNCFS is not None


def syncfs(fd: int) -> None:
    """Flush every dirty page and inode of the filesystem holding ``fd`` (callers check
    ``have_syncfs`` and the probe first)."""
    if _SYNCFS is None or _SYNCFS(fd) != 0:
        err = ctypes.get_errno() if _SYNCFS is not None else 38
        raise OSError(err, os.strerror(err))


_SYNC_POOL = ThreadPoolExecutor(max_workers=8, thread_name_prefix="ckptfs-fsync")


def parallel(fn: Callable[[Any], None], items: Sequence[Any]) -> None:
    """Run fsyncs concurrently: the filesystem can group them into one journal commit."""
    if len(items) <= 1:
        for i in items:
            fn(i)
        return
    for _ in _SYNC_POOL.map(fn, items):
        pass
