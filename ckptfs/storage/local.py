"""Local POSIX directories: temp file inside the store, fsync, link(2) into place, fsync dir.

``link`` fails with EEXIST when the name exists, which makes it an atomic create-only commit
even across processes; a reader never sees a half-written file because the final name only
appears once the bytes are durable.
"""

from __future__ import annotations

import ctypes
import errno
import os
import secrets
import stat
import sys
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ckptfs.errors import CorruptObject, StorageError
from ckptfs.format.limits import kind_of, stored_size_limit
from ckptfs.format.names import TMP
from ckptfs.storage.base import Capabilities, ObjectStat, Storage, check_path

_HAVE_TMPFILE = hasattr(os, "O_TMPFILE") and os.path.isdir("/proc/self/fd")


def _drop_temp(tmp: str) -> None:
    """Remove a named temp file; unnamed ones vanish when their descriptor closes."""
    if tmp and not tmp.startswith("/proc/"):
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass


_PROC_FD: tuple[int, int] | None = None  # (pid, descriptor of /proc/self/fd)


def _proc_fd() -> int:
    """A descriptor of this process's /proc/self/fd, opened once per process (a child after
    fork must not use its parent's, which would name the parent's descriptors)."""
    global _PROC_FD
    pid = os.getpid()
    if _PROC_FD is None or _PROC_FD[0] != pid:
        _PROC_FD = (pid, os.open("/proc/self/fd", os.O_RDONLY | os.O_DIRECTORY))
    return _PROC_FD[1]


def _link(src: str, dst: str) -> None:
    """Hard-link a temp file to its final name; EEXIST (FileExistsError) if the name is taken.

    An unnamed temp file is linked through ``/proc/self/fd`` with linkat(AT_SYMLINK_FOLLOW),
    which Python only issues when a ``src_dir_fd`` is given."""
    if src.startswith("/proc/self/fd/"):
        os.link(src.rsplit("/", 1)[1], dst, src_dir_fd=_proc_fd(), follow_symlinks=True)
    else:
        os.link(src, dst)


#: from this many files (or folders) on, one syncfs(2) of the store's filesystem replaces their
#: fsyncs: streaming a large blob then costs a few flushes instead of two per 64 KiB chunk
SYNCFS_MIN = 32
#: most temp files (each an open descriptor until it is linked) a batch stages at once: a large
#: copy or blob must not run into the process's descriptor limit (often 1024)
STAGE_SLICE = 256


def _load_syncfs() -> Any:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.syncfs
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


_SYNCFS = _load_syncfs() if sys.platform.startswith("linux") else None


def _syncfs(fd: int) -> bool:
    """Flush every dirty page and inode of the filesystem holding ``fd``; False if the call is
    not available (the caller then fsyncs file by file)."""
    if _SYNCFS is None:
        return False
    if _SYNCFS(fd) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return True


_SYNC_POOL = ThreadPoolExecutor(max_workers=8, thread_name_prefix="ckptfs-fsync")


def _parallel(fn: object, items: list[int] | list[str]) -> None:
    """Run fsyncs concurrently: the filesystem can group them into one journal commit."""
    if len(items) <= 1:
        for i in items:
            fn(i)  # type: ignore[operator]
        return
    for _ in _SYNC_POOL.map(fn, items):  # type: ignore[arg-type]
        pass


class LocalStorage(Storage):
    def __init__(self, root: str, *, durable: bool = True, create: bool = True) -> None:
        self.root = os.path.abspath(root)
        self.url = self.root
        self.durable = durable
        self.capabilities = Capabilities(create_only=True, create_only_how="link(2)",
                                         durable=durable)
        self._known_dirs: set[str] = set()
        self._safe_dirs: set[str] = set()
        self._dirty: set[str] = set()
        self._tmp = os.path.join(self.root, TMP)
        self._tmpfile_ok = True

    # -- helpers -----------------------------------------------------------------------------
    def _abs(self, path: str) -> str:
        """The absolute path of ``path``; its folders inside the store must not be links."""
        full = os.path.join(self.root, *check_path(path).split("/"))
        self._check_no_links(os.path.dirname(full))
        return full

    def _check_no_links(self, d: str) -> None:
        """Refuse a folder inside the store that is (or lies below) a symbolic link: a link
        would let reads and writes escape the store root. Checked once per folder."""
        if d in self._safe_dirs or d == self.root:
            return
        rel = os.path.relpath(d, self.root)
        cur = self.root
        for part in rel.split(os.sep):
            cur = os.path.join(cur, part)
            if cur in self._safe_dirs:
                continue
            try:
                if stat.S_ISLNK(os.lstat(cur).st_mode):
                    raise StorageError(
                        f"{os.path.relpath(cur, self.root)}: is a symbolic link; a store holds no "
                        "links (they could lead outside it). Replace it with a real folder.")
            except FileNotFoundError:
                return  # not created yet; _ensure_dir creates real folders
            except NotADirectoryError as e:
                raise _below_a_file(os.path.relpath(cur, self.root)) from e
            self._safe_dirs.add(cur)

    def _fsync_dir(self, d: str) -> None:
        if not self.durable:
            return
        fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def _ensure_dir(self, d: str) -> None:
        """Create folder ``d`` (and parents) if missing. The parents of created folders must be
        fsynced before anything below them is committed: they join ``_dirty`` and are synced
        by the next ``_sync_dirs``."""
        if d in self._known_dirs:
            return
        missing = []
        cur = d
        while not os.path.isdir(cur):
            missing.append(cur)
            parent = os.path.dirname(cur)
            if parent == cur:
                break
            cur = parent
        for m in reversed(missing):
            try:
                os.mkdir(m)
            except FileExistsError:
                if not os.path.isdir(m):
                    raise _not_a_folder(os.path.relpath(m, self.root)) from None
            except NotADirectoryError:
                raise _not_a_folder(os.path.relpath(os.path.dirname(m), self.root)) from None
            self._dirty.add(os.path.dirname(m))
        self._known_dirs.add(d)

    def _temp_open(self, data: bytes) -> tuple[str, int]:
        """Write ``data`` to a new unnamed (O_TMPFILE) or named temp file in the store's tmp/;
        return a path that ``os.link`` can link from, and the still-open descriptor.

        Unnamed temp files leave no directory entries to delete, which keeps file creation fast
        (a directory with many deleted entries makes creates slow for minutes on ext4).
        ``tmp/`` must be a real folder of the store: a link there would put temp files (and so
        the objects linked from them) outside it."""
        if self._tmp not in self._known_dirs:
            self._check_no_links(self._tmp)
            self._ensure_dir(self._tmp)
        fd = -1
        tmp = ""
        if _HAVE_TMPFILE and self._tmpfile_ok:
            try:
                fd = os.open(self._tmp, os.O_TMPFILE | os.O_WRONLY, 0o644)
                tmp = f"/proc/self/fd/{fd}"
            except OSError:
                self._tmpfile_ok = False
        if fd < 0:
            tmp = os.path.join(self._tmp, f"{os.getpid()}-{secrets.token_hex(8)}")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            view = memoryview(data)
            while view:
                n = os.write(fd, view)
                view = view[n:]
            if tmp.startswith("/proc/"):
                os.fchmod(fd, 0o644)
        except BaseException:
            os.close(fd)
            _drop_temp(tmp)
            raise
        return tmp, fd

    def _sync_dirs(self, dirs: Iterable[str]) -> None:
        """fsync the folders whose entries changed, and the parents of folders just created."""
        todo = sorted(set(dirs) | self._dirty)
        self._dirty.clear()
        if self.durable and len(todo) >= SYNCFS_MIN:
            fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY)
            try:
                if _syncfs(fd):
                    return
            finally:
                os.close(fd)
        _parallel(self._fsync_dir, todo)

    def _put(self, temp: tuple[str, int], path: str, *, exclusive: bool,
             replace: bool = False) -> str:
        """Link a written (and, if durable, fsynced) temp file to ``path``; close and drop the
        temp. With ``replace`` the new file takes the place of whatever is at ``path`` (a link,
        a hard-linked or damaged file: see ``_existing``) by rename, so the old inode and
        anything it leads to are never modified. Returns the directory whose entries changed."""
        tmp, fd = temp
        final = self._abs(path)
        try:
            self._ensure_dir(os.path.dirname(final))
            if replace:
                side = f"{final}.{secrets.token_hex(6)}.tmp"
                _link(tmp, side)
                try:
                    os.replace(side, final)
                except BaseException:
                    _drop_temp(side)
                    raise
            else:
                _link(tmp, final)
        except FileExistsError:
            if exclusive:
                raise
        except OSError as e:
            raise _wrap(e, path) from e
        finally:
            os.close(fd)
            _drop_temp(tmp)
        return os.path.dirname(final)

    def _put_all(self, temps: list[tuple[str, int]], todo: list[tuple[str, bytes]],
                 replace: set[str]) -> list[str]:
        """Link every staged temp to its path; on failure close the temps not yet linked."""
        dirs: list[str] = []
        for i, (temp, (path, _)) in enumerate(zip(temps, todo)):
            try:
                dirs.append(self._put(temp, path, exclusive=False, replace=path in replace))
            except BaseException:
                self._discard(temps[i + 1:])
                raise
        return dirs

    def _discard(self, temps: list[tuple[str, int]]) -> None:
        for tmp, fd in temps:
            os.close(fd)
            _drop_temp(tmp)

    def _write_one(self, data: bytes, path: str, *, exclusive: bool,
                   replace: bool = False) -> None:
        try:
            temp = self._temp_open(data)
        except OSError as e:
            raise _wrap(e, path) from e
        try:
            if self.durable:
                os.fsync(temp[1])
        except OSError as e:
            self._discard([temp])
            raise _wrap(e, path) from e
        self._sync_dirs([self._put(temp, path, exclusive=exclusive, replace=replace)])

    def _stage(self, items: list[tuple[str, bytes]], extra: list[int]) -> list[tuple[str, int]]:
        """Write temp files for ``items`` and make them durable together with ``extra``
        descriptors: one fsync each, or one syncfs(2) for a large batch (a streamed blob).
        Holds one descriptor per item: callers pass at most STAGE_SLICE items."""
        temps: list[tuple[str, int]] = []
        try:
            for _, data in items:
                temps.append(self._temp_open(data))
            if self.durable:
                fds = [fd for _, fd in temps] + extra
                if not (len(fds) >= SYNCFS_MIN and _syncfs(fds[0])):
                    _parallel(os.fsync, fds)
        except OSError as e:
            self._discard(temps)
            raise _wrap(e, "(batch)") from e
        return temps

    def _write_slices(self, todo: list[tuple[str, bytes]], replace: set[str],
                      extra: list[int]) -> list[str]:
        """Stage and link ``todo`` in slices of STAGE_SLICE, so that a large batch never holds
        more than that many temp descriptors at once (a process may have only 1024); each slice
        is made durable with one grouped fsync (or syncfs), and ``extra`` descriptors with the
        last. Returns the directories to fsync: the caller syncs them all in one round."""
        dirs: list[str] = []
        for k in range(0, max(len(todo), 1), STAGE_SLICE):
            part = todo[k:k + STAGE_SLICE]
            last = k + STAGE_SLICE >= len(todo)
            temps = self._stage(part, extra if last else [])
            dirs += self._put_all(temps, part, replace)
        return dirs

    # -- primitives --------------------------------------------------------------------------
    def _open_object(self, path: str) -> int:
        """A read-only descriptor of the regular file at ``path``: refused before it is opened
        unless it is one (opening a device can have effects of its own), opened without
        following links and without blocking (a FIFO in place of an object would block)."""
        full = self._abs(path)
        try:
            mode = os.lstat(full).st_mode
            if not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
                raise _not_a_file(path, mode)
            fd = os.open(full, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY
                         | os.O_CLOEXEC)
        except (FileNotFoundError, StorageError):
            raise
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise StorageError(f"{path}: is a symbolic link; a store holds no links (they "
                                   "could lead outside it). Replace it with the real file.") from e
            if e.errno == errno.ENOTDIR:
                raise _below_a_file(path) from e
            raise _wrap(e, path) from e
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise _not_a_file(path, st.st_mode)
            limit = stored_size_limit(path)
            if st.st_size > limit:
                raise _too_large(path, st.st_size, limit)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def read(self, path: str) -> bytes:
        """The whole file at ``path``, refused unless it is a regular file no larger than the
        spec allows for what the path holds (``stored_size_limit``)."""
        fd = self._open_object(path)
        try:
            limit = stored_size_limit(path)
            with os.fdopen(fd, "rb", closefd=False) as f:
                data = f.read(limit + 1)
            if len(data) > limit:  # grew after the fstat
                raise _too_large(path, len(data), limit)
            return data
        except (StorageError, CorruptObject):
            raise
        except OSError as e:
            raise _wrap(e, path) from e
        finally:
            os.close(fd)

    def read_range(self, path: str, start: int, end: int) -> bytes:
        fd = self._open_object(path)
        try:
            return os.pread(fd, max(0, min(end, stored_size_limit(path)) - start), start)
        except OSError as e:
            raise _wrap(e, path) from e
        finally:
            os.close(fd)

    def hint(self, path: str, data: bytes) -> None:
        """Overwritten in place, never fsynced: a torn hint is detected by its reader."""
        full = self._abs(path)
        try:
            fd = os.open(full, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
                         | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
        except OSError as e:
            raise _wrap(e, path) from e
        try:
            os.write(fd, data)
        except OSError as e:
            raise _wrap(e, path) from e
        finally:
            os.close(fd)

    def _existing(self, path: str) -> bool | None:
        """Whether a sound object is already at ``path``: True (it was touched so that garbage
        collection's grace period starts again, spec/retention.md "Grace rule"), False (absent),
        or None when something else is there: a symbolic link, a file with other hard links
        (its inode may be a file outside the store), a FIFO, a file of impossible size. Those
        are never touched or followed: the caller writes a fresh copy in their place."""
        full = self._abs(path)
        try:
            st = os.lstat(full)
        except FileNotFoundError:
            return False
        except NotADirectoryError as e:
            raise _below_a_file(path) from e
        except OSError as e:
            raise _wrap(e, path) from e
        if stat.S_ISDIR(st.st_mode):
            raise StorageError(f"{path}: is a folder where a {kind_of(path)} belongs; remove "
                               "it (the store holds no folder of that name)")
        if (not stat.S_ISREG(st.st_mode) or st.st_nlink != 1 or st.st_size < 2
                or st.st_size > stored_size_limit(path)):
            return None
        try:
            os.utime(full, follow_symlinks=False)
        except FileNotFoundError:
            return False
        except OSError as e:
            raise _wrap(e, path) from e
        return True

    def _todo(self, items: Iterable[tuple[str, bytes]]) -> tuple[list[tuple[str, bytes]], set[str]]:
        """The items to write (absent or unsound at their path) and which of them replace."""
        todo: list[tuple[str, bytes]] = []
        replace: set[str] = set()
        for p, d in items:
            there = self._existing(p)
            if there is True:
                continue
            todo.append((p, d))
            if there is None:
                replace.add(p)
        return todo, replace

    def write(self, path: str, data: bytes) -> None:
        there = self._existing(path)
        if there is not True:
            self._write_one(data, path, exclusive=False, replace=there is None)

    def write_many(self, items: Iterable[tuple[str, bytes]]) -> None:
        todo, replace = self._todo(items)
        if todo:
            self._sync_dirs(self._write_slices(todo, replace, []))

    def commit(self, objects: list[tuple[str, bytes]], path: str, data: bytes) -> None:
        """Three rounds of fsync instead of two per file: all temp files (objects and the
        record) together, then the directories of the objects, then the record's directory.
        (Above STAGE_SLICE objects, the temps are fsynced one slice at a time.)"""
        todo, replace = self._todo(objects)
        try:
            record = self._temp_open(data)
        except OSError as e:  # e.g. a read-only store: a StorageError, not a raw OSError
            raise _wrap(e, path) from e
        try:
            self._sync_dirs(self._write_slices(todo, replace, [record[1]]))
        except BaseException:
            self._discard([record])
            raise
        self._sync_dirs([self._put(record, path, exclusive=True)])

    def create(self, path: str, data: bytes) -> None:
        if not data:
            raise ValueError(f"{path}: create-only objects must not be empty")
        self._write_one(data, path, exclusive=True)

    def replace(self, path: str, data: bytes) -> None:
        final = self._abs(path)
        d = os.path.dirname(final)
        try:
            self._ensure_dir(d)
            tmp = os.path.join(d, f".{os.path.basename(final)}.{secrets.token_hex(6)}.tmp")
            try:
                with open(tmp, "wb") as f:
                    f.write(data)
                    if self.durable:
                        f.flush()
                        os.fsync(f.fileno())
                os.replace(tmp, final)
            except BaseException:
                _drop_temp(tmp)  # a failed replace leaves no temp file behind
                raise
        except OSError as e:
            raise _wrap(e, path) from e
        self._sync_dirs([d])

    def list(self, prefix: str) -> list[str]:
        d = self._abs(prefix) if prefix else self.root
        self._check_no_links(d)
        try:
            return sorted(os.listdir(d))
        except FileNotFoundError:
            return []
        except NotADirectoryError as e:
            raise _below_a_file(prefix or ".", folder=True) from e
        except OSError as e:
            raise _wrap(e, prefix) from e

    def scan(self, prefix: str) -> dict[str, ObjectStat]:
        """One os.scandir per folder; the stat comes with the directory entry. A symbolic link
        below ``prefix`` is refused, as everywhere in a store."""
        d = self._abs(prefix) if prefix else self.root
        self._check_no_links(d)
        out: dict[str, ObjectStat] = {}
        todo = [(d, prefix)]
        while todo:
            folder, rel = todo.pop()
            try:
                with os.scandir(folder) as it:
                    for e in it:
                        path = f"{rel}/{e.name}" if rel else e.name
                        st = e.stat(follow_symlinks=False)
                        if stat.S_ISLNK(st.st_mode):
                            raise StorageError(f"{path}: is a symbolic link; a store holds no "
                                               "links (they could lead outside it). Replace it "
                                               "with a real file or folder.")
                        if stat.S_ISDIR(st.st_mode):
                            todo.append((e.path, path))
                        else:
                            out[path] = ObjectStat(st.st_size, st.st_mtime)
            except (FileNotFoundError, NotADirectoryError):
                continue  # scan of a file: nothing below it, as on object stores
            except OSError as e:
                raise _wrap(e, rel) from e
        return out

    def delete(self, path: str) -> None:
        try:
            os.unlink(self._abs(path))
        except FileNotFoundError:
            return
        except OSError as e:
            raise _wrap(e, path) from e

    def _lstat_object(self, path: str) -> os.stat_result | None:
        """The lstat of the object at ``path``; None when absent or a folder (folders are not
        objects). A symbolic link, a FIFO or a device there is refused: it is not an object a
        store can hold, and reporting its own size would pass it off as one."""
        try:
            st = os.lstat(self._abs(path))
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as e:
            raise _wrap(e, path) from e
        if stat.S_ISDIR(st.st_mode):
            return None
        if not stat.S_ISREG(st.st_mode):
            raise _not_a_file(path, st.st_mode)
        return st

    def size(self, path: str) -> int | None:
        st = self._lstat_object(path)
        return None if st is None else st.st_size

    def mtime(self, path: str) -> float | None:
        st = self._lstat_object(path)
        return None if st is None else st.st_mtime


def _not_a_file(path: str, mode: int) -> StorageError:
    what = ("a symbolic link" if stat.S_ISLNK(mode) else "a FIFO" if stat.S_ISFIFO(mode)
            else "a folder" if stat.S_ISDIR(mode) else "a socket" if stat.S_ISSOCK(mode)
            else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a regular file")
    return StorageError(f"{path}: is {what} where a {kind_of(path)} file belongs; a store holds "
                        "only regular files and folders (no links, FIFOs or devices). Replace "
                        "it with the real file from a copy of the store, or remove it.")


def _too_large(path: str, size: int, limit: int) -> CorruptObject:
    return CorruptObject(f"{path}: {size} bytes, larger than a {kind_of(path)} can be ({limit} "
                         "bytes, spec/format.md 'Limits'); the file is damaged or not a ckptfs "
                         "object. Replace it from a copy of the store.")


def _below_a_file(path: str, *, folder: bool = False) -> StorageError:
    what = "is a file where a folder belongs" if folder else "lies below a file, not a folder"
    return StorageError(f"{path}: {what}: a folder of the store (runs/, a run's folder, tmp/, "
                        "...) is a regular file. Restore the folder from a copy of the store.")


def _not_a_folder(path: str) -> StorageError:
    return StorageError(f"{path}: is a file where a folder of the store belongs; move it away "
                        "(ckptfs recreates an empty tmp/ by itself, other folders come from a "
                        "copy of the store)")


#: errno values that mean "this process may not write here", with what to do about it
_CANNOT_WRITE = {errno.EROFS: "the store's file system is mounted read-only",
                 errno.EACCES: "this user may not write to the store",
                 errno.EPERM: "this user may not write to the store"}


def _wrap(e: OSError, path: str) -> StorageError:
    hint = _CANNOT_WRITE.get(e.errno or 0)
    todo = (f"; {hint}: read commands (ls, show, verify, du, the dry runs) still work, and to "
            "write, remount it read-write, fix its permissions or copy it ('ckptfs copy') to "
            "a writable place" if hint else "")
    return StorageError(f"{path}: {e.strerror or e} (errno {e.errno}); the store is unchanged"
                        f"{todo}")
