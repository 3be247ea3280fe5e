"""fsspec backends (object stores, memory, archives, HTTP): PUTs are atomic; the commit record
uses fsspec's exclusive ``"xb"`` open (s3fs: ``If-None-Match: *``; gcsfs:
``ifGenerationMatch=0``; adlfs: ``overwrite=False``; memory: checked under its lock).

Create-only is *probed* when a store is first written: the probe object is created twice and
the second attempt must fail. A backend that fails the probe runs single-writer: creates are
serialised by a lock in this process only, and ``capabilities.create_only`` says False.

Any exception a plugin raises (botocore's NoCredentialsError is no OSError) becomes a
StorageError naming the URL, so callers see one kind of backend failure.
"""

from __future__ import annotations

import datetime
import inspect
import secrets
import threading
import warnings
from collections.abc import Iterable
from typing import Any

from fsspec.asyn import sync

from ckptfs.errors import CapabilityError, CorruptObject, StorageError
from ckptfs.format.limits import kind_of, stored_size_limit
from ckptfs.storage.base import Capabilities, ObjectStat, Storage, check_path

READ_ONLY_PROTOCOLS = {"zip", "tar", "http", "https", "github", "libarchive"}


class FsspecStorage(Storage):
    def __init__(self, fs: Any, root: str, url: str) -> None:
        self.fs = fs
        self.root = root.rstrip("/")
        self.url = url
        protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
        self.protocol = protocol
        self._cat_kw = _whole_object_reads(fs)
        writable = protocol not in READ_ONLY_PROTOCOLS
        self._probed = not writable
        self._lock = threading.Lock()
        self.capabilities = Capabilities(
            create_only=False, create_only_how="not probed yet", durable=writable,
            writable=writable, deletable=writable)

    def _abs(self, path: str) -> str:
        p = check_path(path)
        return f"{self.root}/{p}" if self.root else p

    def _need_write(self) -> None:
        if not self.capabilities.writable:
            raise CapabilityError(
                f"{self.url}: a {self.protocol}:// store is read-only; copy it to a writable "
                "store first (ckptfs copy)")
        if not self._probed:
            self._probe()

    def _probe(self) -> None:
        probe = self._abs(f"tmp/probe-{secrets.token_hex(8)}")
        exclusive = False
        try:
            with self.fs.open(probe, "xb") as f:
                f.write(b"probe-1")
            try:
                with self.fs.open(probe, "xb") as f:
                    f.write(b"probe-2")
            except FileExistsError:
                exclusive = self.fs.cat_file(probe) == b"probe-1"
        except (OSError, ValueError, NotImplementedError):
            exclusive = False
        finally:
            try:
                self.fs.rm_file(probe)
            except (OSError, FileNotFoundError):
                pass
        how = "exclusive open ('xb')" if exclusive else "process lock only (single writer)"
        if not exclusive:
            warnings.warn(
                f"{self.url}: this backend does not prove create-only writes; ckptfs will run "
                "single-writer (commits from other processes or hosts are not fenced)",
                RuntimeWarning, stacklevel=3)
        self.capabilities = Capabilities(create_only=exclusive, create_only_how=how,
                                         durable=True)
        self._probed = True

    def read(self, path: str) -> bytes:
        """The object at ``path``, fetched with a range no longer than the spec allows for what
        the path holds plus one byte (``stored_size_limit``): an oversized object is refused
        without being downloaded whole, and still in one request."""
        full = self._abs(path)  # InvalidName propagates as itself
        limit = stored_size_limit(path)
        try:
            try:
                data: bytes = self.fs.cat_file(full, start=0, end=limit + 1, **self._cat_kw)
            except OSError as e:
                if not _range_refused(e):
                    raise
                data = self.fs.cat_file(full, **self._cat_kw)  # an empty object has no range
        except FileNotFoundError:
            raise
        except Exception as e:
            raise _wrap(e, self.url, path) from e
        return _bounded(data, path, limit)

    def read_many(self, paths: list[str]) -> list[bytes | None]:
        if len(paths) <= 1:
            return super().read_many(paths)
        full = [self._abs(p) for p in paths]
        limit = max(stored_size_limit(p) for p in paths)
        try:
            got = self.fs.cat(full, on_error="return", start=0, end=limit + 1, **self._cat_kw)
        except Exception as e:
            raise _wrap(e, self.url, "(batch read)") from e
        out: list[bytes | None] = []
        for f, p in zip(full, paths):
            v = got.get(f)
            if isinstance(v, FileNotFoundError) or v is None:
                out.append(None)
            elif isinstance(v, OSError) and _range_refused(v):
                out.append(self.read(p))  # empty: read it without a range
            elif isinstance(v, Exception):
                raise _wrap(v, self.url, p)
            else:
                out.append(_bounded(v, p, stored_size_limit(p)))
        return out

    def write(self, path: str, data: bytes) -> None:
        full = self._abs(path)
        self._need_write()
        try:
            self.fs.pipe_file(full, data)
        except Exception as e:
            raise _wrap(e, self.url, path) from e

    def write_many(self, items: Iterable[tuple[str, bytes]]) -> None:
        batch = {self._abs(p): d for p, d in items}
        self._need_write()
        if not batch:
            return
        try:
            self.fs.pipe(batch)
        except Exception as e:
            raise _wrap(e, self.url, "(batch)") from e

    def create(self, path: str, data: bytes) -> None:
        full = self._abs(path)
        if not data:
            # s3fs sends a zero-length "xb" write as a plain PUT: it would not be exclusive
            raise ValueError(f"{path}: create-only objects must not be empty")
        self._need_write()
        try:
            if self.capabilities.create_only:
                with self.fs.open(full, "xb") as f:
                    f.write(data)
                return
            with self._lock:
                if self.fs.exists(full):
                    raise FileExistsError(path)
                self.fs.pipe_file(full, data)
        except FileExistsError:
            raise
        except Exception as e:
            raise _wrap(e, self.url, path) from e

    def replace(self, path: str, data: bytes) -> None:
        self.write(path, data)

    def list(self, prefix: str) -> list[str]:
        full = self._abs(prefix) if prefix else self.root
        try:
            if _takes_refresh(self.fs):
                # one delimited listing, never cached: s3fs's ``ls`` would list the parent
                # folder as well whenever this one is empty (to tell a file from a folder)
                names = [e["name"] for e in sync(self.fs.loop, self.fs._lsdir, full,
                                                  refresh=True)]
            else:
                names = self.fs.ls(full, detail=False)
        except FileNotFoundError:
            return []
        except Exception as e:
            raise _wrap(e, self.url, prefix) from e
        out = set()
        for n in names:
            n = n.rstrip("/")
            base = n.rsplit("/", 1)[-1]
            if base and n != full.rstrip("/"):
                out.add(base)
        return sorted(out)

    def delete(self, path: str) -> None:
        full = self._abs(path)
        self._need_write()
        try:
            self.fs.rm_file(full)
        except FileNotFoundError:
            return
        except Exception as e:
            raise _wrap(e, self.url, path) from e

    def _info(self, path: str) -> dict[str, Any] | None:
        full = self._abs(path)
        # a cached listing of the parent (s3fs) would hide objects other writers created since
        self.fs.invalidate_cache(full)
        try:
            info: dict[str, Any] = self.fs.info(full)
        except FileNotFoundError:
            return None
        except Exception as e:
            raise _wrap(e, self.url, path) from e
        if info.get("type") == "directory":
            return None
        return info

    def size(self, path: str) -> int | None:
        info = self._info(path)
        return None if info is None else int(info.get("size") or 0)

    def mtime(self, path: str) -> float | None:
        info = self._info(path)
        return None if info is None else _mtime_of(info)

    def scan(self, prefix: str) -> dict[str, ObjectStat]:
        """fsspec ``find`` with details: on object stores one listing without delimiter,
        paginated (S3: ListObjectsV2, 1000 keys a page), never cached by s3fs."""
        full = (self._abs(prefix) if prefix else self.root).rstrip("/")
        try:
            found: dict[str, dict[str, Any]] = self.fs.find(full, detail=True, withdirs=False)
        except FileNotFoundError:
            return {}
        except Exception as e:
            raise _wrap(e, self.url, prefix) from e
        base = self.fs._strip_protocol(full).rstrip("/") + "/"
        out: dict[str, ObjectStat] = {}
        for name, info in found.items():
            name = self.fs._strip_protocol(name)
            if info.get("type") == "directory" or not name.startswith(base) or name.endswith("/"):
                continue
            path = f"{prefix}/{name[len(base):]}" if prefix else name[len(base):]
            out[path] = ObjectStat(int(info.get("size") or 0), _mtime_of(info))
        return out


def _mtime_of(info: dict[str, Any]) -> float | None:
    """The modification time in an fsspec info dict, whichever key the backend uses."""
    for key in ("LastModified", "mtime", "created", "last_modified", "updated"):
        v = info.get(key)
        if isinstance(v, datetime.datetime):
            return v.timestamp()
        if isinstance(v, (int, float)):
            return float(v)
        if isinstance(v, str):
            try:
                return datetime.datetime.fromisoformat(v.replace("Z", "+00:00")).timestamp()
            except ValueError:
                continue
    return None


def _range_refused(e: Exception) -> bool:
    """S3 answers a range GET of an empty object with 416 InvalidRange."""
    text = str(e)
    return "InvalidRange" in text or "not satisfiable" in text or "416" in text


def _bounded(data: bytes, path: str, limit: int) -> bytes:
    """``data`` if within the size limit of what ``path`` holds (spec/format.md "Limits")."""
    if len(data) > limit:
        raise CorruptObject(f"{path}: more than {limit} bytes, larger than a {kind_of(path)} can "
                            "be (spec/format.md 'Limits'); the object is damaged or not a ckptfs "
                            "object. Replace it from a copy of the store.")
    return data


def _takes_refresh(fs: Any) -> bool:
    return fs.protocol in ("s3", "s3a") or (isinstance(fs.protocol, tuple) and "s3" in fs.protocol)


def _whole_object_reads(fs: Any) -> dict[str, Any]:
    """Read options that fetch an object in one GET. Objects here are at most 16 MiB, so a
    filesystem that would first ask for the size (a HEAD) to split big reads into ranges is told
    not to: s3fs does that whenever ``max_concurrency`` > 1, doubling the requests of a read."""
    try:
        params = inspect.signature(fs._cat_file if hasattr(fs, "_cat_file") else fs.cat_file).parameters
    except (TypeError, ValueError):
        return {}
    return {"max_concurrency": 1} if "max_concurrency" in params else {}


def _wrap(e: Exception, url: str, path: str) -> StorageError:
    hint = ""
    text = str(e)
    if "credential" in text.lower() or "AccessDenied" in text or "403" in text:
        hint = (" Check the credentials: storage_options in Python, or the environment "
                "(for s3:// AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or AWS_PROFILE).")
    return StorageError(f"{url}: {path}: {type(e).__name__}: {text}.{hint}")
