"""Batched and conditional deletes of the fsspec backends: S3 DeleteObjects (1,000 keys a
request, with each key's ETag when the caller judged it by one), the SDKs' list ``rm`` of
gcsfs and adlfs; one DELETE each elsewhere."""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Sequence
from typing import Any

from fsspec.asyn import sync

from ckptfs.errors import StorageError
from ckptfs.storage.base import Storage
from ckptfs.storage.object_calls import precondition_failed, takes_refresh, wrap

#: protocols whose SDK deletes a list of paths in overlapped or batched requests
GCS_PROTOCOLS = {"gs", "gcs"}
BATCH_RM_PROTOCOLS = GCS_PROTOCOLS | {"az", "abfs", "abfss"}


class BatchDeletes(Storage):
    """The delete primitives of FsspecStorage (which provides these attributes)."""

    fs: Any
    url: str
    protocol: str

    def _abs(self, path: str) -> str:
        raise NotImplementedError

    def _need_write(self) -> None:
        raise NotImplementedError

    def delete_many(self, paths: Iterable[str]) -> None:
        """S3: DeleteObjects with up to 1,000 keys a request (a key that is absent is fine; any
        other per-key error raises StorageError). GCS, Azure: the SDK's batch requests
        (``_rm_batched``). Other backends: one delete each."""
        paths = list(paths)
        if len(paths) > 1 and self.protocol in BATCH_RM_PROTOCOLS:
            self._rm_batched(paths)
            return
        if len(paths) <= 1 or not takes_refresh(self.fs):
            for p in paths:
                self.delete(p)
            return
        self._need_write()
        keys = [self.fs._strip_protocol(self._abs(p)) for p in paths]
        bucket = keys[0].partition("/")[0]
        for i in range(0, len(keys), 1000):
            batch = [{"Key": k.partition("/")[2]} for k in keys[i:i + 1000]]
            try:
                out = sync(self.fs.loop, self.fs._call_s3, "delete_objects", Bucket=bucket,
                           Delete={"Objects": batch, "Quiet": True})
            except Exception as e:
                raise wrap(e, self.url, "(batch delete)") from e
            errors = [e for e in out.get("Errors", []) if e.get("Code") != "NoSuchKey"]
            if errors:
                raise StorageError(f"{self.url}: deleting {len(errors)} object(s) failed, e.g. "
                                   f"{errors[0].get('Key')}: {errors[0].get('Message')}")
        self.fs.invalidate_cache()

    def _rm_batched(self, paths: Sequence[str]) -> None:
        """gcsfs and adlfs: ``rm`` of a list overlaps the deletes (gcsfs: the JSON batch API of
        100 deletes a request on Google's service, 5 DELETEs at a time against an emulator;
        adlfs: every DELETE at once); an absent object is fine."""
        self._need_write()
        full = [self._abs(p) for p in paths]
        # adlfs would first ask for each path whether it is a folder (a HEAD each)
        kw = {} if self.protocol in GCS_PROTOCOLS else {"expand_path": False}
        for i in range(0, len(full), 1000):
            try:
                self.fs.rm(full[i:i + 1000], **kw)
            except FileNotFoundError:
                pass
            except Exception as e:
                raise wrap(e, self.url, "(batch delete)") from e
        self.fs.invalidate_cache()

    def delete_many_if(self, items: Iterable[tuple[str, str | None]]) -> builtins.list[str]:
        """S3 conditional deletes: DeleteObjects with each key's ``ETag`` (AWS evaluates it per
        key and answers ``PreconditionFailed`` for a changed one), a single key with
        DeleteObject ``If-Match``. moto 5.2 honours ``If-Match`` on DeleteObject and ignores
        the ``ETag`` of DeleteObjects (it deletes). A server that refuses the ETag element
        gets the unconditional batch. Other fsspec backends: unconditional."""
        items = list(items)
        if not items or not takes_refresh(self.fs) or all(e is None for _, e in items):
            return super().delete_many_if(items)
        self._need_write()
        keys = [(self.fs._strip_protocol(self._abs(p)), e, p) for p, e in items]
        bucket = keys[0][0].partition("/")[0]
        kept: builtins.list[str] = []
        if len(keys) == 1:
            key, etag, path = keys[0]
            try:
                sync(self.fs.loop, self.fs._call_s3, "delete_object", Bucket=bucket,
                     Key=key.partition("/")[2], **({"IfMatch": etag} if etag else {}))
            except FileNotFoundError:
                pass
            except Exception as e:  # noqa: BLE001 - sorted below
                if precondition_failed(e):
                    kept.append(path)
                elif "NoSuchKey" not in str(e) and "404" not in str(e):
                    raise wrap(e, self.url, path) from e
            self.fs.invalidate_cache()
            return kept
        by_key = {k.partition("/")[2]: p for k, _, p in keys}
        for i in range(0, len(keys), 1000):
            batch = [{"Key": k.partition("/")[2], **({"ETag": e} if e else {})}
                     for k, e, _ in keys[i:i + 1000]]
            try:
                out = sync(self.fs.loop, self.fs._call_s3, "delete_objects", Bucket=bucket,
                           Delete={"Objects": batch, "Quiet": True})
            except Exception as e:
                if "MalformedXML" in str(e) or "NotImplemented" in str(e):
                    self.delete_many(by_key[o["Key"]] for o in batch)  # no ETag element here
                    continue
                raise wrap(e, self.url, "(batch delete)") from e
            errors = []
            for err in out.get("Errors", []):
                code = err.get("Code")
                if code == "PreconditionFailed":
                    kept.append(by_key.get(err.get("Key", ""), err.get("Key", "")))
                elif code != "NoSuchKey":
                    errors.append(err)
            if errors:
                raise StorageError(f"{self.url}: deleting {len(errors)} object(s) failed, e.g. "
                                   f"{errors[0].get('Key')}: {errors[0].get('Message')}")
        self.fs.invalidate_cache()
        return kept
