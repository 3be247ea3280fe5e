"""Local directories: temp file inside the store, fsync, into place create-only, fsync folder.

Two create-only modes, chosen by what the store's filesystem can do (``local_caps.probe`` at
the first write; never by platform name):

- **link mode**: ``link(2)`` of the temp file to its final name fails with EEXIST when the
  name exists, an atomic create-only commit even across processes and hosts;
- **filelock mode** (no hard links: exFAT/FAT, some SMB and FUSE mounts; or forced with
  ``CKPTFS_LOCAL_MODE=portable``): under a lock of the folder (``local_lock``), check the name
  is absent and rename the temp file into place.

Either way a reader never sees a half-written file: the final name only appears once the
bytes are durable. The work is split by what it holds: ``local_folders`` (paths, folders,
fsync), ``local_temps`` (temp files, putting them in place), ``local_os`` (the OS calls and
their fallbacks), ``local_caps`` (the probe), ``local_lock``, ``local_errors``; this module
has the Storage primitives.
"""

from __future__ import annotations

import builtins
import collections
import contextlib
import errno
import os
import secrets
import stat
import threading
from collections.abc import Iterable, Iterator, Sequence

from ckptfs.errors import CorruptObject, StorageError
from ckptfs.format.limits import kind_of, stored_size_limit
from ckptfs.format.names import TMP
from ckptfs.storage import local_errors as err
from ckptfs.storage import local_os as los
from ckptfs.storage.base import Listing, ObjectStat, RangeReader, Staged, Storage
from ckptfs.storage.local_folders import SYNCFS_MIN
from ckptfs.storage.local_temps import STAGE_SLICE, LocalTemps

__all__ = ["LocalStorage", "STAGE_SLICE", "SYNCFS_MIN"]


def _holds_a_file(folder: str) -> bool:
    """Whether anything but folders lies below ``folder`` (stops at the first such entry; a
    link or special file counts, so that the reads after the listing refuse it)."""
    todo = [folder]
    while todo:
        try:
            with os.scandir(todo.pop()) as it:
                for e in it:
                    if not e.is_dir(follow_symlinks=False):
                        return True
                    todo.append(e.path)
        except (FileNotFoundError, NotADirectoryError):
            continue  # removed or replaced since the listing: nothing of the store below it
    return False


class LocalStorage(LocalTemps, Storage):
    """A store in a local folder (any OS, any filesystem: see the module docstring)."""

    folders_are_real = True
    staged_workers = 1  # one fsync at a time, up to 8 packs behind it in temp files
    staged_max = 8

    # -- primitives --------------------------------------------------------------------------
    def _open_object(self, path: str) -> tuple[int, int, int]:
        """A read-only descriptor of the regular file at ``path``, its size when opened and
        the largest size the spec allows there (``stored_size_limit``): refused before it is
        opened unless it is one (opening a device can have effects of its own), opened without
        following links and without blocking (a FIFO in place of an object would block).
        Without O_NOFOLLOW the file opened must be the one lstat saw (same device and inode):
        a link swapped in between is refused, though its target was opened (RELIABILITY.md).
        One lstat, open and fstat per object: a restore opens a dozen small ones."""
        full = self._abs(path)
        nofollow = self.features.o_nofollow
        try:
            before = os.lstat(full)
            if stat.S_ISLNK(before.st_mode) and not nofollow:
                raise err.symlink(path)
            if not (stat.S_ISREG(before.st_mode) or stat.S_ISLNK(before.st_mode)):
                raise err.not_a_file(path, before.st_mode)
            fd = os.open(full, los.read_flags(nofollow))
        except (FileNotFoundError, StorageError):
            raise
        except OSError as e:
            if nofollow and e.errno == errno.ELOOP:
                raise err.symlink(path) from e
            if e.errno == errno.ENOTDIR:
                raise err.below_a_file(path) from e
            raise err.wrap(e, path) from e
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise err.not_a_file(path, st.st_mode)
            if not nofollow and (st.st_dev, st.st_ino) != (before.st_dev, before.st_ino):
                raise err.symlink(path)  # replaced (by a link?) between the lstat and the open
            limit = stored_size_limit(path)
            if st.st_size > limit:
                raise err.too_large(path, st.st_size, limit)
        except BaseException:
            os.close(fd)
            raise
        return fd, st.st_size, limit

    def read(self, path: str) -> bytes:
        """The whole file at ``path``, refused unless it is a regular file no larger than the
        spec allows for what the path holds (``stored_size_limit``)."""
        fd, size, limit = self._open_object(path)
        try:
            # read what fstat said is there, plus one byte to see growth: a read of n bytes
            # allocates n first, and the limit of a record is 128 MiB (every read paid that peak)
            data = los.read_upto(fd, size + 1)
            if len(data) > size:  # grew after the fstat: the rest, up to the limit
                data += los.read_upto(fd, limit + 1 - len(data))
            if len(data) > limit:
                raise err.too_large(path, len(data), limit)
            return data
        except (StorageError, CorruptObject):
            raise
        except OSError as e:
            raise err.wrap(e, path) from e
        finally:
            os.close(fd)

    def read_range(self, path: str, start: int, end: int) -> bytes:
        fd, size, limit = self._open_object(path)
        try:
            # clamped to the file's size too: pread allocates what it is asked for, and a
            # damaged header's length (up to 80 MiB) must not cost that much per read
            stop = min(end, limit, size)
            return los.pread(fd, max(0, stop - start), start)
        except OSError as e:
            raise err.wrap(e, path) from e
        finally:
            os.close(fd)

    def read_range_into(self, path: str, start: int, buf: memoryview) -> int:
        fd, _, limit = self._open_object(path)
        try:
            want = max(0, min(len(buf), limit - start))
            return los.pread_into(fd, buf[:want], start)
        except OSError as e:
            raise err.wrap(e, path) from e
        finally:
            os.close(fd)

    def open_ranges(self, path: str) -> RangeReader:
        """One descriptor for every range read of ``path`` (opened with ``read``'s checks, so
        a link or special file is refused here), each range one ``preadv`` straight into the
        caller's buffer (``read_into``) or into a new bytes object (``read``, ``os.pread``):
        a streamed blob reads a pack's bodies without one open, lstat and fstat per range.
        Where the OS has no ``pread`` (Windows: seek, then read) the reads take turns."""
        fd, size, most = self._open_object(path)
        # containers are never changed once written: the size at open bounds every range, so
        # a body length a damaged header claims is never allocated past the file's end
        limit = min(most, size)
        turns = contextlib.nullcontext() if hasattr(os, "pread") else threading.Lock()

        def read_into(start: int, buf: memoryview) -> int:
            try:
                with turns:
                    return los.pread_into(fd, buf[:max(0, min(len(buf), limit - start))], start)
            except OSError as e:
                raise err.wrap(e, path) from e

        def read(start: int, n: int) -> bytes:
            try:
                with turns:
                    return los.pread(fd, max(0, min(n, limit - start)), start)
            except OSError as e:
                raise err.wrap(e, path) from e

        return RangeReader(read_into=read_into, read=read, close=lambda: os.close(fd),
                           per_call=True)

    def hint(self, path: str, data: bytes) -> None:
        """Overwritten in place, never fsynced: a torn hint is detected by its reader. A file
        that has other names (a hard link: its inode may be a file outside the store) is not
        written through but replaced (``replace``: a new file renamed over the name), as
        spec/format.md 9.2 requires of every write. Without O_NOFOLLOW a link there is refused
        by lstat first, and one swapped in before the open is refused after it, before a byte
        is written: the name must still lead to the file opened (same device and inode)."""
        full = self._abs(path)
        nofollow = los.flag("NOFOLLOW") if self.features.o_nofollow else 0
        try:
            if not nofollow and os.path.islink(full):
                raise err.symlink(path)
            # no O_TRUNC: what is there is looked at (fstat) before a byte of it changes
            fd = os.open(full, os.O_WRONLY | os.O_CREAT | nofollow | los.flag("NONBLOCK")
                         | los.flag("CLOEXEC") | los.flag("BINARY"), 0o644)
        except StorageError:
            raise
        except OSError as e:
            raise err.wrap(e, path) from e
        try:
            st = os.fstat(fd)
            if stat.S_ISREG(st.st_mode) and st.st_nlink <= 1:
                named = os.lstat(full)
                if (named.st_dev, named.st_ino) != (st.st_dev, st.st_ino):
                    raise err.symlink(path)  # replaced (by a link?) around the open
                os.ftruncate(fd, 0)
                os.write(fd, data)
                return
        except StorageError:
            raise
        except OSError as e:
            raise err.wrap(e, path) from e
        finally:
            os.close(fd)
        self.replace(path, data)

    def hard_linked(self) -> dict[str, int]:
        """Every file of the store (``tmp/`` aside) that has other names, by store path: how
        many of those names are not the store's own temp files in ``tmp/``. One scandir per
        folder (plus an lstat per file where the OS's directory entries carry no link count,
        as on Windows). Links, FIFOs and devices are skipped: reads refuse those by name."""
        temps: collections.Counter[tuple[int, int]] = collections.Counter()
        shared: dict[str, tuple[tuple[int, int], int]] = {}
        for full, path, st in self._files_below(self.root, ""):
            if not stat.S_ISREG(st.st_mode):
                continue
            if st.st_nlink == 0:  # Windows: not in the directory entry
                st = os.lstat(full)
            if st.st_nlink > 1:
                key = (st.st_dev, st.st_ino)
                if path.startswith(TMP + "/"):
                    temps[key] += 1
                else:
                    shared[path] = (key, st.st_nlink)
        return {p: n - 1 - temps[key] for p, (key, n) in sorted(shared.items())}

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
            raise err.below_a_file(path) from e
        except OSError as e:
            raise err.wrap(e, path) from e
        if stat.S_ISDIR(st.st_mode):
            raise StorageError(f"{path}: is a folder where a {kind_of(path)} belongs; remove "
                               "it (the store holds no folder of that name)")
        if (not stat.S_ISREG(st.st_mode) or st.st_nlink != 1 or st.st_size < 2
                or st.st_size > stored_size_limit(path)):
            return None
        try:
            if os.utime in os.supports_follow_symlinks:
                os.utime(full, follow_symlinks=False)
            else:  # Windows: lstat just saw a regular file
                os.utime(full)
        except FileNotFoundError:
            return False
        except OSError as e:
            raise err.wrap(e, path) from e
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

    def write_parts(self, path: str, parts: Sequence[bytes | memoryview]) -> None:
        there = self._existing(path)
        if there is not True:
            self._write_one(parts, path, exclusive=False, replace=there is None)

    def stage_parts(self, path: str, parts: Sequence[bytes | memoryview]) -> Staged:
        there = self._existing(path)
        if there is True:
            return Staged(finish=lambda: None, discard=lambda: None)
        temp = self._temp_for(parts, path)
        return Staged(finish=lambda: self._place_temp(temp, path, exclusive=False,
                                                      replace=there is None),
                      discard=lambda: self._discard([temp]))

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
        except StorageError:
            raise
        except OSError as e:  # e.g. a read-only store: a StorageError, not a raw OSError
            raise err.wrap(e, path) from e
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
                        self._fsync(f.fileno())
                os.replace(tmp, final)
            except BaseException:
                los.drop_temp(tmp)  # a failed replace leaves no temp file behind
                raise
        except OSError as e:
            raise err.wrap(e, path) from e
        self._sync_dirs([d])

    def list(self, prefix: str) -> list[str]:
        """The children of folder ``prefix``, without folders that hold no file at any depth
        (format.md 9.2: an empty folder is not an object, as on an object store, where a
        folder exists only through its objects; a crash between making a run's folder and
        creating its first record leaves one, which must not list as a run)."""
        names = [name for name, _ in self._children(prefix)]
        names.sort()
        return names

    def listing(self, prefix: str) -> Listing:
        """One scandir, as ``list``: the entry's type tells a folder from a file (a link or a
        special file counts as a file: never followed, and not where a folder belongs)."""
        children = sorted(self._children(prefix))
        return Listing(tuple(n for n, folder in children if not folder),
                       tuple(n for n, folder in children if folder))

    def _children(self, prefix: str) -> builtins.list[tuple[str, bool]]:
        """(name, is a folder) of each child of ``prefix`` that ``list`` returns."""
        d = self._abs(prefix) if prefix else self.root
        self._check_no_links(d)
        try:
            with os.scandir(d) as it:  # a list comprehension: ~40 % faster than a generator
                kinds = [(e.name, e.is_dir(follow_symlinks=False)) for e in it]
        except FileNotFoundError:
            return []
        except NotADirectoryError as e:
            raise err.below_a_file(prefix or ".", folder=True) from e
        except OSError as e:
            raise err.wrap(e, prefix) from e
        return [(n, folder) for n, folder in kinds
                if not folder or _holds_a_file(os.path.join(d, n))]

    def scan(self, prefix: str) -> dict[str, ObjectStat]:
        """One os.scandir per folder; the stat comes with the directory entry. A symbolic link
        below ``prefix`` is refused, as everywhere in a store."""
        d = self._abs(prefix) if prefix else self.root
        self._check_no_links(d)
        out: dict[str, ObjectStat] = {}
        for _, path, st in self._files_below(d, prefix):
            if stat.S_ISLNK(st.st_mode):
                raise err.symlink(path, "file or folder")
            out[path] = ObjectStat(st.st_size, st.st_mtime)
        return out

    @staticmethod
    def _files_below(folder: str, prefix: str) -> Iterator[tuple[str, str, os.stat_result]]:
        """Everything but folders below ``folder`` (store path ``prefix``), at any depth: its
        full path, its store path and its lstat from the directory entry (one scandir per
        folder). Nothing below a file, or below a folder removed since it was listed."""
        todo = [(folder, prefix)]
        while todo:
            d, rel = todo.pop()
            try:
                with os.scandir(d) as it:
                    for e in it:
                        path = f"{rel}/{e.name}" if rel else e.name
                        st = e.stat(follow_symlinks=False)
                        if stat.S_ISDIR(st.st_mode):
                            todo.append((e.path, path))
                        else:
                            yield e.path, path, st
            except (FileNotFoundError, NotADirectoryError):
                continue  # scan of a file, or removed since: nothing below it
            except OSError as e:
                raise err.wrap(e, rel or ".") from e

    def delete(self, path: str) -> None:
        try:
            os.unlink(self._abs(path))
        except FileNotFoundError:
            return
        except OSError as e:
            raise err.wrap(e, path) from e

    def _lstat_object(self, path: str) -> os.stat_result | None:
        """The lstat of the object at ``path``; None when absent or a folder (folders are not
        objects). A symbolic link, a FIFO or a device there is refused: it is not an object a
        store can hold, and reporting its own size would pass it off as one."""
        try:
            st = os.lstat(self._abs(path))
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as e:
            raise err.wrap(e, path) from e
        if stat.S_ISDIR(st.st_mode):
            return None
        if not stat.S_ISREG(st.st_mode):
            raise err.not_a_file(path, st.st_mode)
        return st

    def size(self, path: str) -> int | None:
        st = self._lstat_object(path)
        return None if st is None else st.st_size

    def mtime(self, path: str) -> float | None:
        st = self._lstat_object(path)
        return None if st is None else st.st_mtime
