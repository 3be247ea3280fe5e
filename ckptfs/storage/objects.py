"""fsspec backends (object stores, memory, archives, HTTP): PUTs are atomic; the commit record
uses fsspec's exclusive ``"xb"`` open (s3fs: ``If-None-Match: *``; gcsfs:
``ifGenerationMatch=0``; adlfs: ``overwrite=False``; memory: checked under its lock).

Create-only is *probed* when a store is first written: a probe object is created twice and the
second attempt must fail, leaving the first bytes. A failed or lost request never weakens the
commit: the probe's creates read back what they find (below), a probe that still cannot
complete is tried once more and then refuses to open the store for writing (StorageError,
nothing written), and a backend *proven* not to honour create-only writes is refused
(CapabilityError) unless the caller opted into single-writer mode (storage option
``single_writer=True``, or CKPTFS_SINGLE_WRITER=1 in the environment for the command line):
then creates are serialised by a lock in this process only and ``capabilities.create_only``
says False. Transient failures are retried by the backend itself (s3fs retries connection
errors 5 times, botocore each request up to its configured ``max_attempts``).

A lost answer is not a conflict: when a create-only write fails or reports "exists" (a retried
request whose first attempt landed gets 412), ``create`` reads the object back. Our exact bytes
mean the write landed (it returns normally); other bytes are FileExistsError; a failed write
whose object is absent did not happen (StorageError); an object that cannot be read leaves the
outcome unknown (OutcomeUnknown). Callers that race must therefore make their bytes unique
(run records carry a random ``nonce``).

Any exception a plugin raises (botocore's NoCredentialsError is no OSError) becomes a
StorageError naming the URL, so callers see one kind of backend failure.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import threading
import time
from collections.abc import Iterable
from typing import Any

from fsspec.asyn import sync

from ckptfs.errors import CapabilityError, OutcomeUnknown, StorageError
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
from ckptfs.storage.object_deletes import GCS_PROTOCOLS, BatchDeletes

#: s3fs protocols whose create-only write is one conditional PutObject (``_exclusive_put``)
S3_PROTOCOLS = ("s3", "s3a")
#: a chunk size that keeps s3fs's ``pipe_file`` to one PUT (it splits from twice this size)
S3_ONE_PUT = 5 * 2**30

READ_ONLY_PROTOCOLS = {"zip", "tar", "http", "https", "github", "libarchive"}
#: filesystems whose reads share one file handle, and so must not overlap
SHARED_HANDLE_PROTOCOLS = {"tar", "libarchive"}
#: whole probes tried before giving up (each request inside is retried by the backend)
PROBE_ATTEMPTS = 2
PROBE_BACKOFF_S = 0.5
#: the environment variable that opts the command line into single-writer mode
SINGLE_WRITER_ENV = "CKPTFS_SINGLE_WRITER"


class _Permanent(Exception):
    """A probe failure that no retry cures (a missing bucket, refused credentials)."""

    def __init__(self, error: StorageError) -> None:
        super().__init__(str(error))
        self.error = error


class FsspecStorage(BatchDeletes):
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

    def _need_write(self) -> None:
        if not self.capabilities.writable:
            raise CapabilityError(
                f"{self.url}: a {self.protocol}:// store is read-only; copy it to a writable "
                "store first (ckptfs copy)")
        if not self._probed:
            self._probe()

    def _probe(self) -> None:
        """Find out whether create-only writes are exclusive here, or refuse to write."""
        last: Exception | None = None
        for attempt in range(PROBE_ATTEMPTS):
            if attempt:
                time.sleep(PROBE_BACKOFF_S * attempt)
            try:
                exclusive = self._probe_once()
                break
            except _Permanent as e:
                raise self._refused(e.error) from e.error
            except (OSError, ValueError, NotImplementedError) as e:
                last = e
        else:
            raise StorageError(
                f"{self.url}: could not find out whether this store supports create-only writes "
                f"(the probe failed {PROBE_ATTEMPTS} times, each request retried by the backend; "
                f"last: {last}); the store is not opened for writing and nothing was written. "
                "Check the network and the service, then retry.") from last
        if not exclusive and not self.single_writer:
            raise CapabilityError(
                f"{self.url}: this backend does not honour create-only writes (a second "
                "conditional create of the same object succeeded), so two writers could "
                "overwrite each other's commits; nothing was written. If only this one process "
                "ever writes to the store, open it with the storage option single_writer=True "
                f"(on the command line: {SINGLE_WRITER_ENV}=1); otherwise use a backend with "
                "conditional writes (AWS S3, GCS, Azure, local disk).")
        how = ("exclusive open ('xb')" if exclusive
               else "process lock only (single writer, as opted into)")
        self.capabilities = Capabilities(create_only=exclusive, create_only_how=how,
                                         durable=True)
        self._probed = True

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

    def _refused(self, e: StorageError) -> StorageError:
        """The one clear error for a store location that refuses the first write."""
        cause = e.__cause__
        if isinstance(cause, FileNotFoundError):
            return StorageError(
                f"{self.url}: the bucket (or container) does not exist, or this account cannot "
                f"see it ({cause}); create it first ('ckptfs init {self.url} --create-bucket', "
                "or for S3 'aws s3 mb s3://BUCKET') or fix the URL. Nothing was written.")
        return StorageError(
            f"{self.url}: writing was refused: {cause or e}. Check the credentials: "
            "storage_options in Python, or the environment (for s3:// AWS_ACCESS_KEY_ID/"
            "AWS_SECRET_ACCESS_KEY or AWS_PROFILE). Nothing was written.")

    def _probe_once(self) -> bool:
        """Create a fresh probe object twice; True when the second create was refused and the
        first bytes stayed. Lost answers are resolved by the read-back in ``_create``."""
        name = f"tmp/probe-{secrets.token_hex(8)}"
        token = secrets.token_hex(8).encode()
        first, second = b"probe-1-" + token, b"probe-2-" + token
        try:
            try:
                self._create(name, first)
            except FileExistsError:  # a fresh random name: someone else's bytes cannot be there
                raise StorageError(f"{self.url}: probe object {name} held unexpected bytes")
            except StorageError as e:
                if isinstance(e.__cause__, (FileNotFoundError, PermissionError)) or (
                        "credential" in str(e).lower()):
                    raise _Permanent(e) from e
                raise
            try:
                self._create(name, second)
                refused = False
            except FileExistsError:
                refused = True
            return refused and self._read_back(name) == first
        finally:
            try:
                self.fs.rm_file(self._abs(name))
            except Exception:  # a leftover in tmp/ is ignored by every reader
                pass

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

    def create(self, path: str, data: bytes) -> None:
        if not data:
            # s3fs sends a zero-length "xb" write as a plain PUT: it would not be exclusive
            raise ValueError(f"{path}: create-only objects must not be empty")
        self._abs(path)  # InvalidName before anything else
        self._need_write()
        if self.capabilities.create_only:
            self._create(path, data)
            return
        full = self._abs(path)
        try:
            with self._lock:  # single writer, as the caller opted into
                if self.fs.exists(full):
                    raise FileExistsError(path)
                self.fs.pipe_file(full, data)
        except FileExistsError:
            raise
        except Exception as e:
            raise wrap(e, self.url, path) from e

    def _create(self, path: str, data: bytes) -> None:
        """An exclusive create whose answer, when it is "exists" or a failure, is checked by
        reading the object back (a lost answer is not a conflict; module doc)."""
        full = self._abs(path)
        failure: Exception | None = None
        try:
            self._exclusive_put(full, data)
            return
        except FileExistsError:
            pass  # another writer's object, or our own request retried after a lost answer
        except Exception as e:
            failure = e
        try:
            held = self._read_back(path)
        except Exception as e:
            what = f"failed ({type(failure).__name__}: {failure})" if failure else \
                "reported that the object exists"
            raise OutcomeUnknown(
                f"{self.url}: {path}: the create-only write {what}, and reading the object back "
                f"failed too ({type(e).__name__}: {e}); whether this write (a commit) happened "
                "is unknown. Look again once the store is reachable (for a run: resume it and "
                "check its head).") from (failure or e)
        if held == data:
            self.landed_on_read_back += 1
            return  # our bytes: the write landed and only its answer was lost
        if held is not None:
            raise FileExistsError(path)
        if failure is None:  # "exists", then gone (deleted in between): not ours either way
            raise FileExistsError(path)
        raise StorageError(f"{wrap(failure, self.url, path)} The object is absent when read "
                           "back: this create-only write did not happen.") from failure

    def _exclusive_put(self, full: str, data: bytes) -> None:
        """One create-only write; FileExistsError when the object is present.

        gcsfs: ``pipe_file(mode="create")``, one multipart upload with ``ifGenerationMatch=0``
        (objects here are far below its 50 MiB simple-upload limit). Its ``open("xb")`` makes a
        resumable upload (two requests) whose precondition fake-gcs-server ignores: the probe
        then found the emulator not exclusive and refused to write. Everything else: fsspec's
        exclusive open (adlfs: ``If-None-Match: *`` on the block list commit; memory: under its
        lock). s3fs: ``pipe_file(mode="create")``, one PutObject with ``If-None-Match: *`` (its
        412 is FileExistsError), told never to split (its multipart path drops the condition;
        one PUT takes up to 5 GiB): the bytes go to botocore as they are, where ``open("xb")``
        copied them into a buffer and out again (a record carrying 2 MB of bodies: two copies
        of each)."""
        if self._create_by_pipe:
            self.fs.pipe_file(full, data, mode="create")
            return
        if self.protocol in S3_PROTOCOLS:
            self.fs.pipe_file(full, data, mode="create", chunksize=S3_ONE_PUT)
            return
        with self.fs.open(full, "xb") as f:
            f.write(data)

    def _read_back(self, path: str) -> bytes | None:
        """The object's bytes (through ``read``: bounded like every read), None when absent;
        any other failure is a ckptfs.errors exception."""
        try:
            return self.read(path)
        except FileNotFoundError:
            return None

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
