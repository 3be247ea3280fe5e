"""The local backend's error messages: what happened, and what to do about it."""

from __future__ import annotations

import errno
import stat

from ckptfs.errors import CorruptObject, StorageError
from ckptfs.format.limits import kind_of


def not_a_file(path: str, mode: int) -> StorageError:
    what = ("a symbolic link" if stat.S_ISLNK(mode) else "a FIFO" if stat.S_ISFIFO(mode)
            else "a folder" if stat.S_ISDIR(mode) else "a socket" if stat.S_ISSOCK(mode)
            else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a regular file")
    return StorageError(f"{path}: is {what} where a {kind_of(path)} file belongs; a store holds "
                        "only regular files and folders (no links, FIFOs or devices). Replace "
                        "it with the real file from a copy of the store, or remove it.")


def too_large(path: str, size: int, limit: int) -> CorruptObject:
    return CorruptObject(f"{path}: {size} bytes, larger than a {kind_of(path)} can be ({limit} "
                         "bytes, spec/format.md 'Limits'); the file is damaged or not a ckptfs "
                         "object. Replace it from a copy of the store.")


def below_a_file(path: str, *, folder: bool = False) -> StorageError:
    what = "is a file where a folder belongs" if folder else "lies below a file, not a folder"
    return StorageError(f"{path}: {what}: a folder of the store (runs/, a run's folder, tmp/, "
                        "...) is a regular file. Restore the folder from a copy of the store.")


def not_a_folder(path: str) -> StorageError:
    return StorageError(f"{path}: is a file where a folder of the store belongs; move it away "
                        "(ckptfs recreates an empty tmp/ by itself, other folders come from a "
                        "copy of the store)")


#: errno values that mean "this process may not write here", with what to do about it
_CANNOT_WRITE = {errno.EROFS: "the store's file system is mounted read-only",
                 errno.EACCES: "this user may not write to the store",
                 errno.EPERM: "this user may not write to the store"}


def wrap(e: OSError, path: str) -> StorageError:
    hint = _CANNOT_WRITE.get(e.errno or 0)
    todo = (f"; {hint}: read commands (ls, show, verify, du, the dry runs) still work, and to "
            "write, remount it read-write, fix its permissions or copy it ('ckptfs copy') to "
            "a writable place" if hint else "")
    # the file the system call named (absolute: the store's folder included), so that the
    # message says where, not only which of the store's folders ("tmp" under /proc, say)
    where = e.filename if isinstance(e.filename, str) and e.filename else path
    if e.errno == errno.ENOENT and not todo and isinstance(e.filename, str):
        todo = ("; its folder cannot be created or was removed meanwhile: check that the "
                "store's path names a folder on a file system that can hold one")
    return StorageError(f"{where}: {e.strerror or e} (errno {e.errno}); the store is unchanged"
                        f"{todo}")


def symlink(path: str, what: str = "file") -> StorageError:
    return StorageError(f"{path}: is a symbolic link; a store holds no links (they could lead "
                        f"outside it). Replace it with the real {what}.")
