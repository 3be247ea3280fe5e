"""Create-only writes of the fsspec backends (FsspecStorage's ``CreateOnly`` base): the probe
that finds out whether a backend honours them, the exclusive PUT itself, and the read-back that
tells a lost answer from a conflict. Kept apart from the reads, listings and plain writes of
``objects`` because this is the part the commit protocol's safety rests on.

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
"""

from __future__ import annotations

import secrets
import threading
import time
from typing import Any

from ckptfs.errors import CapabilityError, OutcomeUnknown, StorageError
from ckptfs.storage.base import Capabilities, Storage
from ckptfs.storage.object_calls import wrap

#: s3fs protocols whose create-only write is one conditional PutObject (``_exclusive_put``)
S3_PROTOCOLS = ("s3", "s3a")
#: a chunk size that keeps s3fs's ``pipe_file`` to one PUT (it splits from twice this size)
S3_ONE_PUT = 5 * 2**30
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


class CreateOnly(Storage):
    """The create-only primitives of FsspecStorage (which provides these attributes)."""

    fs: Any
    url: str
    protocol: str
    single_writer: bool
    capabilities: Capabilities
    landed_on_read_back: int
    _probed: bool
    _lock: threading.Lock
    _create_by_pipe: bool

    def _abs(self, path: str) -> str:
        raise NotImplementedError

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
