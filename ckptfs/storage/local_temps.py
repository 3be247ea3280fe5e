"""Temp files of a local store and how they reach their final names.

A temp file is written in the store's ``tmp/`` folder (unnamed with O_TMPFILE where it works,
named otherwise), fsynced (F_FULLFSYNC on macOS), then put at its final name: by ``link(2)``
in link mode; in filelock mode by rename, a create under its folder's lock (``local_lock``).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Sequence

from ckptfs.errors import StorageError
from ckptfs.storage import local_errors as err
from ckptfs.storage import local_os as los
from ckptfs.storage.local_folders import SYNCFS_MIN, LocalFolders
from ckptfs.storage.local_lock import folder_lock

#: most temp files (each an open descriptor until it is linked) a batch stages at once: a large
#: copy or blob must not run into the process's descriptor limit (often 1024)
STAGE_SLICE = 256


class LocalTemps(LocalFolders):
    """Writing temp files and putting them in place, one at a time or in slices."""

    def _temp_open(self, data: bytes | Sequence[bytes | memoryview]) -> tuple[str, int]:
        """Write ``data`` to a new unnamed (O_TMPFILE) or named temp file in the store's tmp/;
        return a path that ``os.link`` (or the rename of filelock mode) takes it from, and the
        still-open descriptor.

        Unnamed temp files leave no directory entries to delete, which keeps file creation fast
        (a directory with many deleted entries makes creates slow for minutes on ext4).
        ``tmp/`` must be a real folder of the store: a link there would put temp files (and so
        the objects linked from them) outside it."""
        feats = self._features()
        fd = -1
        tmp = ""
        if feats.o_tmpfile and self._tmpfile_ok:
            try:
                tmp, fd = los.open_tmpfile(self._tmp)
            except OSError:
                self._tmpfile_ok = False
        if fd < 0:
            tmp = os.path.join(self._tmp, f"{os.getpid()}-{secrets.token_hex(8)}")
            fd = os.open(tmp, los.write_flags(), 0o644)
        try:
            los.write_all(fd, data)
            if tmp.startswith("/proc/"):
                os.fchmod(fd, 0o644)
        except BaseException:
            os.close(fd)
            los.drop_temp(tmp)
            raise
        return tmp, fd

    def _put(self, temp: tuple[str, int], path: str, *, exclusive: bool,
             replace: bool = False) -> str | None:
        """Put a written (and, if durable, fsynced) temp file at ``path``; close and drop the
        temp. With ``replace`` the new file takes the place of whatever is at ``path`` (a link,
        a hard-linked or damaged file: see ``_existing``) by rename, so the old inode and
        anything it leads to are never modified. Returns the directory whose entries changed
        (None when filelock mode already fsynced it under the lock)."""
        tmp, fd = temp
        final = self._abs(path)
        folder = os.path.dirname(final)
        try:
            self._ensure_dir(folder)
            if not self.features.link:
                os.close(fd)  # Windows renames no open file
                fd = -1
                return self._rename_into(tmp, final, path, exclusive=exclusive, replace=replace)
            if replace:
                side = f"{final}.{secrets.token_hex(6)}.tmp"
                los.link(tmp, side)
                try:
                    os.replace(side, final)
                except BaseException:
                    los.drop_temp(side)
                    raise
            else:
                los.link(tmp, final)
        except FileExistsError:
            if exclusive:
                raise
        except StorageError:
            raise
        except OSError as e:
            raise err.wrap(e, path) from e
        finally:
            if fd >= 0:
                os.close(fd)
            los.drop_temp(tmp)
        return folder

    def _rename_into(self, tmp: str, final: str, path: str, *, exclusive: bool,
                     replace: bool) -> str | None:
        """Filelock mode: rename the named temp file to ``final``. A create does it under the
        folder's lock, after checking the name is absent, and fsyncs the folder before letting
        go; an immutable object (same name, same bytes) needs no lock."""
        folder = os.path.dirname(final)
        if exclusive:
            self._check_no_links(self._locks)  # a link there would put the locks outside
            self._ensure_dir(self._locks)
            rel = os.path.relpath(folder, self.root)
            with folder_lock(self._locks, "" if rel == "." else rel.replace(os.sep, "/"),
                             self.lock_timeout):
                if os.path.lexists(final):
                    raise FileExistsError(path)
                os.rename(tmp, final)
                self._sync_dirs([folder])
            return None
        if replace or not os.path.lexists(final):
            try:
                os.replace(tmp, final)
            except PermissionError:  # Windows: a reader holds the file another writer put
                if replace or not os.path.lexists(final):
                    raise
        return folder

    def _put_all(self, temps: list[tuple[str, int]], todo: list[tuple[str, bytes]],
                 replace: set[str]) -> list[str | None]:
        """Put every staged temp at its path; on failure close the temps not yet put."""
        dirs: list[str | None] = []
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
            los.drop_temp(tmp)

    def _write_one(self, data: bytes | Sequence[bytes | memoryview], path: str, *,
                   exclusive: bool,
                   replace: bool = False) -> None:
        self._place_temp(self._temp_for(data, path), path, exclusive=exclusive,
                         replace=replace)

    def _temp_for(self, data: bytes | Sequence[bytes | memoryview], path: str
                  ) -> tuple[str, int]:
        """A temp file holding ``data``, bound for ``path`` (errors name ``path``)."""
        try:
            return self._temp_open(data)
        except StorageError:
            raise
        except OSError as e:
            raise err.wrap(e, path) from e

    def _place_temp(self, temp: tuple[str, int], path: str, *, exclusive: bool,
                    replace: bool) -> None:
        """Make the temp file ``temp`` durable and put it at ``path`` (dropped on failure)."""
        try:
            if self.durable:
                self._fsync(temp[1])
        except OSError as e:
            self._discard([temp])
            raise err.wrap(e, path) from e
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
                if not (len(fds) >= SYNCFS_MIN and self._syncfs_dir()):
                    los.parallel(self._fsync, fds)
        except StorageError:
            self._discard(temps)
            raise
        except OSError as e:
            self._discard(temps)
            raise err.wrap(e, "(batch)") from e
        return temps

    def _write_slices(self, todo: list[tuple[str, bytes]], replace: set[str],
                      extra: list[int]) -> list[str | None]:
        """Stage and put ``todo`` in slices of STAGE_SLICE, so that a large batch never holds
        more than that many temp descriptors at once (a process may have only 1024); each slice
        is made durable with one grouped fsync (or syncfs), and ``extra`` descriptors with the
        last. Returns the directories to fsync: the caller syncs them all in one round."""
        dirs: list[str | None] = []
        for k in range(0, max(len(todo), 1), STAGE_SLICE):
            part = todo[k:k + STAGE_SLICE]
            last = k + STAGE_SLICE >= len(todo)
            temps = self._stage(part, extra if last else [])
            dirs += self._put_all(temps, part, replace)
        return dirs
