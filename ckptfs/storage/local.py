"""Local POSIX directories: temp file inside the store, fsync, link(2) into place, fsync dir.

``link`` fails with EEXIST when the name exists, which makes it an atomic create-only commit
even across processes; a reader never sees a half-written file because the final name only
appears once the bytes are durable.
"""

from __future__ import annotations

import errno
import os
import secrets
from collections.abc import Iterable

from ckptfs.errors import StorageError
from ckptfs.format.names import TMP
from ckptfs.storage.base import Capabilities, Storage, check_path


class LocalStorage(Storage):
    def __init__(self, root: str, *, durable: bool = True, create: bool = True) -> None:
        self.root = os.path.abspath(root)
        self.url = self.root
        self.durable = durable
        self.capabilities = Capabilities(create_only=True, create_only_how="link(2)",
                                         durable=durable)
        self._known_dirs: set[str] = set()
        self._tmp = os.path.join(self.root, TMP)

    # -- helpers -----------------------------------------------------------------------------
    def _abs(self, path: str) -> str:
        return os.path.join(self.root, *check_path(path).split("/"))

    def _fsync_dir(self, d: str) -> None:
        if not self.durable:
            return
        fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def _ensure_dir(self, d: str) -> None:
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
            self._fsync_dir(os.path.dirname(m))
        self._known_dirs.add(d)

    def _temp(self, data: bytes) -> str:
        self._ensure_dir(self._tmp)
        tmp = os.path.join(self._tmp, f"{os.getpid()}-{secrets.token_hex(8)}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            view = memoryview(data)
            while view:
                n = os.write(fd, view)
                view = view[n:]
            if self.durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        return tmp

    def _link(self, data: bytes, path: str, *, exclusive: bool, sync_dir: bool = True) -> str:
        final = self._abs(path)
        d = os.path.dirname(final)
        try:
            self._ensure_dir(d)
            tmp = self._temp(data)
            try:
                os.link(tmp, final)
            except FileExistsError:
                if exclusive:
                    raise
            finally:
                os.unlink(tmp)
        except FileExistsError:
            raise
        except OSError as e:
            raise _wrap(e, path) from e
        if sync_dir:
            self._fsync_dir(d)
        return d

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

    def write(self, path: str, data: bytes) -> None:
        if os.path.exists(self._abs(path)):
            return
        self._link(data, path, exclusive=False)

    def write_many(self, items: Iterable[tuple[str, bytes]]) -> None:
        dirs: set[str] = set()
        for path, data in items:
            if os.path.exists(self._abs(path)):
                continue
            dirs.add(self._link(data, path, exclusive=False, sync_dir=False))
        for d in dirs:
            self._fsync_dir(d)

    def create(self, path: str, data: bytes) -> None:
        if not data:
            raise ValueError(f"{path}: create-only objects must not be empty")
        self._link(data, path, exclusive=True)

    def replace(self, path: str, data: bytes) -> None:
        final = self._abs(path)
        try:
            self._ensure_dir(os.path.dirname(final))
            tmp = self._temp(data)
            os.replace(tmp, final)
        except OSError as e:
            raise _wrap(e, path) from e
        self._fsync_dir(os.path.dirname(final))

    def list(self, prefix: str) -> list[str]:
        d = self._abs(prefix) if prefix else self.root
        try:
            return sorted(os.listdir(d))
        except FileNotFoundError:
            return []
        except NotADirectoryError:
            return []
        except OSError as e:
            raise _wrap(e, prefix) from e

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
        except FileNotFoundError:
            return None
        except OSError as e:
            raise _wrap(e, path) from e
        return st.st_size

    def mtime(self, path: str) -> float | None:
        try:
            return os.lstat(self._abs(path)).st_mtime
        except FileNotFoundError:
            return None


def _wrap(e: OSError, path: str) -> StorageError:
    return StorageError(f"{path}: {e.strerror or e} (errno {e.errno}); the store is unchanged")
