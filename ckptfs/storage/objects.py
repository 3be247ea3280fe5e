"""fsspec backends (object stores, memory, archives, HTTP): PUTs are atomic; the commit record
uses fsspec's exclusive ``"xb"`` open (s3fs: ``If-None-Match: *``; gcsfs:
``ifGenerationMatch=0``; adlfs: ``overwrite=False``; memory: checked under its lock).
This module holds the reads, listings, plain writes and stats; the create-only writes (their
probe, the exclusive PUT and the read-back of a lost answer) are ``object_creates``, the
batched deletes ``object_deletes``. Their names stay importable from here.

Any exception a plugin raises (botocore's NoCredentialsError is no OSError) becomes a
StorageError naming the URL, so callers see one kind of backend failure.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterable
from typing import Any

from fsspec.asyn import sync

from ckptfs.format.limits import stored_size_limit
from ckptfs.storage.base import Capabilities, Listing, ObjectStat, check_path
from ckptfs.storage.cloud import gcs_list_after
from ckptfs.storage.object_calls import (
    bounded,
    mtime_of,
    precondition_failed,
    range_refused,
    takes_refresh,
    whole_object_reads,
    wrap,
)
from ckptfs.storage.object_creates import (  # noqa: F401 - re-exported
    PROBE_ATTEMPTS,
    PROBE_BACKOFF_S,
    S3_ONE_PUT,
    S3_PROTOCOLS,
    SINGLE_WRITER_ENV,
    CreateOnly,
)
from ckptfs.storage.object_deletes import GCS_PROTOCOLS, BatchDeletes

READ_ONLY_PROTOCOLS = {"zip", "tar", "http", "https", "github", "libarchive"}
#: filesystems whose reads share one file handle, and so must not overlap
SHARED_HANDLE_PROTOCOLS = {"tar", "libarchive"}


class FsspecStorage(CreateOnly, BatchDeletes):
    def __init__(self, fs: Any, root: str, url: str, *, single_writer: bool = False) -> None:
        self.fs = fs
        #: the caller promised that only this process writes (no create-only needed)
        self.single_writer = single_writer or os.environ.get(SINGLE_WRITER_ENV, "") in (
            "1", "true", "yes")
        self.root = root.rstrip("/")
        self.url = url
        protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
        self.protocol = protocol
        self._cat_kw = whole_object_reads(fs)
        #: gcsfs: create-only as one multipart upload with ifGenerationMatch=0 (_exclusive_put)
        self._create_by_pipe = protocol in GCS_PROTOCOLS
        self.lists_after = takes_refresh(fs) or self._create_by_pipe
        writable = protocol not in READ_ONLY_PROTOCOLS
        self._probed = not writable
        self._lock = threading.Lock()
        #: fsspec's tar filesystem reads every member through one shared file object (seek,
        #: then read): two threads reading at once get each other's bytes, so its reads are
        #: taken one at a time (zip's reader locks by itself; object stores are requests)
        self._read_lock: threading.Lock | None = (
            threading.Lock() if protocol in SHARED_HANDLE_PROTOCOLS else None)
        #: creates whose answer was "exists" or a failure and whose read-back found our own
        #: bytes: lost answers of writes that had landed (a figure for tests and operators)
        self.landed_on_read_back = 0
        self.capabilities = Capabilities(
            create_only=False, create_only_how="not probed yet", durable=writable,
            writable=writable, deletable=writable)

    def _cat(self, full: str, **kw: Any) -> bytes:
        """``fs.cat_file``, one at a time where reads share a handle (``_read_lock``)."""
        if self._read_lock is None:
            return bytes(self.fs.cat_file(full, **kw, **self._cat_kw))
        with self._read_lock:
            return bytes(self.fs.cat_file(full, **kw, **self._cat_kw))

    def _abs(self, path: str) -> str:
        p = check_path(path)
        return f"{self.root}/{p}" if self.root else p

    def missing_container(self) -> str | None:
        """The bucket (first segment of the root) when it does not exist: one request, made
        only on the way to a "no store here" error. Any other answer (it exists, access
        denied, a backend without buckets) is None: the caller says what it says anyway."""
        if self.protocol not in ("s3", "s3a", "gs", "gcs", "az", "abfs", "abfss"):
            return None
        bucket = self.root.split("/", 1)[0]
        if not bucket:
            return None
        try:
            if self.fs.exists(bucket):
                return None
        except Exception:  # noqa: BLE001 - cannot tell: say nothing more
            return None
        return bucket

    def read(self, path: str) -> bytes:
        """The object at ``path``, fetched with a range no longer than the spec allows for what
        the path holds plus one byte (``stored_size_limit``): an oversized object is refused
        without being downloaded whole, and still in one request."""
        full = self._abs(path)  # InvalidName propagates as itself
        limit = stored_size_limit(path)
        try:
            try:
                data: bytes = self._cat(full, start=0, end=limit + 1)
            except FileNotFoundError:
                raise
            except Exception as e:  # adlfs: azure.core's HttpResponseError, not an OSError
                if not range_refused(e):
                    raise
                data = self._cat(full)  # an empty object has no range
        except FileNotFoundError:
            raise
        except Exception as e:
            raise wrap(e, self.url, path) from e
        return bounded(data, path, limit)

    def read_many(self, paths: list[str]) -> list[bytes | None]:
        if len(paths) <= 1:
            return super().read_many(paths)
        full = [self._abs(p) for p in paths]
        limit = max(stored_size_limit(p) for p in paths)
        try:
            with self._read_lock or contextlib.nullcontext():
                got = self.fs.cat(full, on_error="return", start=0, end=limit + 1,
                                  **self._cat_kw)
        except Exception as e:
            raise wrap(e, self.url, "(batch read)") from e
        out: list[bytes | None] = []
        for f, p in zip(full, paths):
            v = got.get(f)
            if isinstance(v, FileNotFoundError) or v is None:
                out.append(None)
            elif isinstance(v, Exception) and range_refused(v):
                out.append(self.read(p))  # empty: read it without a range
            elif isinstance(v, Exception):
                raise wrap(v, self.url, p)
            else:
                out.append(bounded(v, p, stored_size_limit(p)))
        return out

    def read_range(self, path: str, start: int, end: int) -> bytes:
        """One ranged GET (``Range: bytes=start-(end-1)``), never past the path's size limit."""
        full = self._abs(path)
        end = min(end, stored_size_limit(path))
        if end <= start:
            return b""
        try:
            data: bytes = self._cat(full, start=start, end=end)
        except FileNotFoundError:
            raise
        except Exception as e:
            if range_refused(e):
                return b""  # the object ends before ``start``
            raise wrap(e, self.url, path) from e
        if len(data) > end - start:  # a server that ignores Range sends the whole object
            data = data[start:end]
        return data

    def read_ranges(self, items: list[tuple[str, int, int]]) -> list[bytes | None]:
        if len(items) <= 1:
            return super().read_ranges(items)
        out: list[bytes | None] = [None] * len(items)
        from concurrent.futures import ThreadPoolExecutor

        def one(i: int) -> None:
            p, a, b = items[i]
            try:
                out[i] = self.read_range(p, a, b)
            except FileNotFoundError:
                out[i] = None

        with ThreadPoolExecutor(max_workers=min(16, len(items))) as pool:
            list(pool.map(one, range(len(items))))
        return out

    def list_after(self, prefix: str, after: str) -> list[str] | None:
        """S3: ListObjectsV2 with ``StartAfter`` (no delimiter), paginated; GCS: objects.list
        with ``startOffset`` (``_gcs_list_after``); other fsspec backends (Azure's List Blobs
        has no start key): None (the caller probes names)."""
        if self.protocol in GCS_PROTOCOLS:
            return self._gcs_list_after(prefix, after)
        if not takes_refresh(self.fs):
            return None
        full = self.fs._strip_protocol(self._abs(prefix)).rstrip("/") + "/"
        bucket, _, key_prefix = full.partition("/")
        names: list[str] = []
        token: str | None = None
        try:
            while True:
                kw: dict[str, Any] = {"Bucket": bucket, "Prefix": key_prefix,
                                      "StartAfter": key_prefix + after}
                if token:
                    kw["ContinuationToken"] = token
                page = sync(self.fs.loop, self.fs._call_s3, "list_objects_v2", **kw)
                names += [o["Key"][len(key_prefix):] for o in page.get("Contents", [])]
                token = page.get("NextContinuationToken")
                if not page.get("IsTruncated") or not token:
                    return names
        except Exception as e:
            raise wrap(e, self.url, prefix) from e

    def _gcs_list_after(self, prefix: str, after: str) -> list[str]:
        full = self.fs._strip_protocol(self._abs(prefix)).rstrip("/") + "/"
        try:
            return gcs_list_after(self.fs, full, after)
        except Exception as e:
            raise wrap(e, self.url, prefix) from e

    def write(self, path: str, data: bytes) -> None:
        full = self._abs(path)
        self._need_write()
        try:
            self.fs.pipe_file(full, data)
        except Exception as e:
            raise wrap(e, self.url, path) from e

    def write_many(self, items: Iterable[tuple[str, bytes]]) -> None:
        batch = {self._abs(p): d for p, d in items}
        self._need_write()
        if not batch:
            return
        try:
            self.fs.pipe(batch)
        except Exception as e:
            raise wrap(e, self.url, "(batch)") from e

    def replace(self, path: str, data: bytes) -> None:
        self.write(path, data)

    def list(self, prefix: str) -> list[str]:
        return self.listing(prefix).names

    def listing(self, prefix: str) -> Listing:
        """One delimited listing: its common prefixes (``type: directory``) are the folders,
        its keys the files."""
        full = self._abs(prefix) if prefix else self.root
        try:
            if takes_refresh(self.fs):
                # one delimited listing, never cached: s3fs's ``ls`` would list the parent
                # folder as well whenever this one is empty (to tell a file from a folder)
                entries = sync(self.fs.loop, self.fs._lsdir, full, refresh=True)
            else:
                # gcsfs and adlfs answer ``ls`` from a listing cache: another writer's objects
                # created since would be missing (a run's newest record, a lease)
                self.fs.invalidate_cache(full)
                entries = self.fs.ls(full, detail=True)
        except FileNotFoundError:
            return Listing((), ())
        except Exception as e:
            raise wrap(e, self.url, prefix) from e
        files: set[str] = set()
        folders: set[str] = set()
        for entry in entries:
            n = str(entry["name"]).rstrip("/")
            base = n.rsplit("/", 1)[-1]
            if base and n != full.rstrip("/"):
                (folders if entry.get("type") == "directory" else files).add(base)
        return Listing(tuple(sorted(files)), tuple(sorted(folders)))

    def delete(self, path: str) -> None:
        full = self._abs(path)
        self._need_write()
        try:
            self.fs.rm_file(full)
        except FileNotFoundError:
            return
        except Exception as e:
            raise wrap(e, self.url, path) from e

    def _info(self, path: str) -> dict[str, Any] | None:
        full = self._abs(path)
        # a cached listing of the parent would hide objects other writers created since:
        # s3fs's invalidate_cache drops the parents' listings too, adlfs's only the path's own
        # (and its ``info`` then calls an object missing from the parent's listing a folder)
        self.fs.invalidate_cache(full)
        self.fs.invalidate_cache(full.rsplit("/", 1)[0])
        try:
            info: dict[str, Any] = self.fs.info(full)
        except FileNotFoundError:
            return None
        except Exception as e:
            raise wrap(e, self.url, path) from e
        if info.get("type") == "directory":
            return None
        return info

    def size(self, path: str) -> int | None:
        info = self._info(path)
        return None if info is None else int(info.get("size") or 0)

    def mtime(self, path: str) -> float | None:
        info = self._info(path)
        return None if info is None else mtime_of(info)

    def scan(self, prefix: str) -> dict[str, ObjectStat]:
        """fsspec ``find`` with details: on object stores one listing without delimiter,
        paginated (S3: ListObjectsV2, 1000 keys a page), never cached by s3fs."""
        full = (self._abs(prefix) if prefix else self.root).rstrip("/")
        try:
            found: dict[str, dict[str, Any]] = self.fs.find(full, detail=True, withdirs=False)
        except FileNotFoundError:
            return {}
        except Exception as e:
            raise wrap(e, self.url, prefix) from e
        if not isinstance(found, dict):  # adlfs: [path] when the prefix is an object itself
            return {}
        base = self.fs._strip_protocol(full).rstrip("/") + "/"
        out: dict[str, ObjectStat] = {}
        for name, info in found.items():
            name = self.fs._strip_protocol(name)
            if info.get("type") == "directory" or not name.startswith(base) or name.endswith("/"):
                continue
            path = f"{prefix}/{name[len(base):]}" if prefix else name[len(base):]
            etag = info.get("ETag")
            out[path] = ObjectStat(int(info.get("size") or 0), mtime_of(info),
                                   etag if isinstance(etag, str) else None)
        return out
