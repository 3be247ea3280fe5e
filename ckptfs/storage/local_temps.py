"""Temp files of a local store and how they reach their final names.

A temp file is written in the store's ``tmp/`` folder (unnamed with O_TMPFILE where it works,
named otherwise), fsynced (F_FULLFSYNC on macOS), then put at its final name: by ``link(2)``
in link mode; in filelock mode a create takes its folder's lock (``local_lock``) first.

How a filelock-mode create puts its file (issue 30). The mode is each process's own choice
(``CKPTFS_LOCAL_MODE``, ``local_mode=``, ``CKPTFS_LOCAL_DISABLE=link``) and the store records
none, so a link-mode writer, which takes no lock, may create in the same folder. A create that
checks the name is absent under the lock and then renames its temp file there would replace
what such a writer linked in between (POSIX ``rename`` replaces its target): both writers told
OK for one seq, one commit lost. So, under the lock:

- where the store's filesystem has hard links (``features.hard_links``, probed whatever the
  settings say), the create is ``link(2)`` as in link mode: EEXIST is the conflict, atomic in
  the kernel, whoever created the name and whether or not they took the lock;
- only where it has none (exFAT/FAT, some SMB and FUSE mounts) does it check and rename. There
  no link-mode writer can exist, since link mode needs hard links on the same filesystem: every
  writer takes the lock, and the lock makes check-then-rename exclusive. (On Windows
  ``os.rename`` refuses an existing target anyway, which the caller sees as the conflict.)

Linux ``renameat2(RENAME_NOREPLACE)`` and macOS ``renamex_np(RENAME_EXCL)`` would make the
rename itself refuse an existing target, but they are not used: where a writer renames, no
writer can bypass the lock on that filesystem, and where the lock does not reach (hosts
sharing a network filesystem) those calls are refused or checked by each client alone (NFS has
no RENAME_NOREPLACE), so they would add an OS-specific path without closing a case.
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
        (None when filelock mode already fsynced it under the lock). In filelock mode a create
        takes the lock (``_create_locked``); where the filesystem has no hard links every put
        is a rename (``_rename_into``); anything else is linked, as in link mode."""
        tmp, fd = temp
        final = self._abs(path)
        folder = os.path.dirname(final)
        try:
            self._ensure_dir(folder)
            if not self.features.hard_links:
                os.close(fd)  # Windows renames no open file
                fd = -1
            if exclusive and not self.features.link:
                self._create_locked(tmp, final, path)
                return None
            if not self.features.hard_links:
                return self._rename_into(tmp, final, replace=replace)
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

    def _create_locked(self, tmp: str, final: str, path: str) -> None:
        """Filelock mode's create (the module docstring says why): under the folder's lock,
        ``link(2)`` where the filesystem has hard links, else check the name is absent and
        rename the named temp file there; the folder is fsynced before the lock is let go."""
        folder = os.path.dirname(final)
        self._check_no_links(self._locks)  # a link there would put the locks outside
        self._ensure_dir(self._locks)
        rel = os.path.relpath(folder, self.root)
        with folder_lock(self._locks, "" if rel == "." else rel.replace(os.sep, "/"),
                         self.lock_timeout):
            if self.features.hard_links:
                los.link(tmp, final)  # EEXIST: taken, by a writer of either mode
            else:
                if os.path.lexists(final):
                    raise FileExistsError(path)
                os.rename(tmp, final)
            self._sync_dirs([folder])

    def _rename_into(self, tmp: str, final: str, *, replace: bool) -> str:
        """No hard links on the filesystem: rename the named temp file of an immutable object
        (same name, same bytes: no lock needed) or of a replacement to ``final``."""
        folder = os.path.dirname(final)
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
