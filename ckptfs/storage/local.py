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

from ckptfs.errors import StorageError
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
                pass
            self._dirty.add(os.path.dirname(m))
        self._known_dirs.add(d)

    def _temp_open(self, data: bytes) -> tuple[str, int]:
        """Write ``data`` to a new unnamed (O_TMPFILE) or named temp file in the store's tmp/;
        return a path that ``os.link`` can link from, and the still-open descriptor.

        Unnamed temp files leave no directory entries to delete, which keeps file creation fast
        (a directory with many deleted entries makes creates slow for minutes on ext4)."""
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

    def _put(self, temp: tuple[str, int], path: str, *, exclusive: bool) -> str:
        """Link a written (and, if durable, fsynced) temp file to ``path``; close and drop the
        temp. Returns the directory whose entries changed."""
        tmp, fd = temp
        final = self._abs(path)
        try:
            self._ensure_dir(os.path.dirname(final))
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

    def _put_all(self, temps: list[tuple[str, int]], todo: list[tuple[str, bytes]]) -> list[str]:
        """Link every staged temp to its path; on failure close the temps not yet linked."""
        dirs: list[str] = []
        for i, (temp, (path, _)) in enumerate(zip(temps, todo)):
            try:
                dirs.append(self._put(temp, path, exclusive=False))
            except BaseException:
                self._discard(temps[i + 1:])
                raise
        return dirs

    def _discard(self, temps: list[tuple[str, int]]) -> None:
        for tmp, fd in temps:
            os.close(fd)
            _drop_temp(tmp)

    def _write_one(self, data: bytes, path: str, *, exclusive: bool) -> None:
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
        self._sync_dirs([self._put(temp, path, exclusive=exclusive)])

    def _stage(self, items: list[tuple[str, bytes]], extra: list[int]) -> list[tuple[str, int]]:
        """Write temp files for ``items`` and make them durable together with ``extra``
        descriptors: one fsync each, or one syncfs(2) for a large batch (a streamed blob)."""
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

    # -- primitives --------------------------------------------------------------------------
    def read(self, path: str) -> bytes:
        try:
            fd = os.open(self._abs(path), os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:
            raise
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise StorageError(f"{path}: is a symbolic link; stores hold no links") from e
            raise _wrap(e, path) from e
        try:
            with os.fdopen(fd, "rb") as f:
                return f.read()
        except OSError as e:
            raise _wrap(e, path) from e

    def _freshen(self, path: str) -> bool:
        """Touch an existing object so garbage collection's grace period starts again
        (spec/retention.md "Grace rule"); False when it does not exist."""
        try:
            os.utime(self._abs(path))
            return True
        except FileNotFoundError:
            return False
        except OSError as e:
            raise _wrap(e, path) from e

    def write(self, path: str, data: bytes) -> None:
        if not self._freshen(path):
            self._write_one(data, path, exclusive=False)

    def write_many(self, items: Iterable[tuple[str, bytes]]) -> None:
        todo = [(p, d) for p, d in items if not self._freshen(p)]
        temps = self._stage(todo, [])
        self._sync_dirs(self._put_all(temps, todo))

    def commit(self, objects: list[tuple[str, bytes]], path: str, data: bytes) -> None:
        """Three rounds of fsync instead of two per file: all temp files (objects and the
        record) together, then the directories of the objects, then the record's directory."""
        todo = [(p, d) for p, d in objects if not self._freshen(p)]
        record = self._temp_open(data)
        try:
            temps = self._stage(todo, [record[1]])
        except BaseException:
            self._discard([record])
            raise
        try:
            self._sync_dirs(self._put_all(temps, todo))
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
        except NotADirectoryError:
            return []
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
                continue
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

    def size(self, path: str) -> int | None:
        try:
            st = os.lstat(self._abs(path))
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as e:
            raise _wrap(e, path) from e
        return None if stat.S_ISDIR(st.st_mode) else st.st_size  # folders are not objects

    def mtime(self, path: str) -> float | None:
        try:
            st = os.lstat(self._abs(path))
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as e:
            raise _wrap(e, path) from e
        return None if stat.S_ISDIR(st.st_mode) else st.st_mtime  # like size(): objects only


def _wrap(e: OSError, path: str) -> StorageError:
    return StorageError(f"{path}: {e.strerror or e} (errno {e.errno}); the store is unchanged")
