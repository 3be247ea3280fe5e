"""What the fsspec backends share about their SDKs' answers: error translation, 412 and 416
detection, size bounds and read options (used by objects.py and object_deletes.py)."""

from __future__ import annotations

import datetime
import inspect
from typing import Any

from ckptfs.errors import CorruptObject, StorageError
from ckptfs.format.limits import kind_of


def mtime_of(info: dict[str, Any]) -> float | None:
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


def precondition_failed(e: BaseException) -> bool:
    """A 412 (S3 ``PreconditionFailed``), as botocore raises it or as s3fs translates it (an
    ``OSError(EINVAL)`` whose message is the server's)."""
    for x in (e, e.__cause__, e.__context__):
        if x is None:
            continue
        code = getattr(x, "response", {}).get("Error", {}).get("Code")
        text = str(x)
        if code in ("PreconditionFailed", "412") or "PreconditionFailed" in text or (
                "pre-conditions you specified did not hold" in text):
            return True
    return False


def range_refused(e: Exception) -> bool:
    """S3 answers a range GET of an empty object with 416 InvalidRange."""
    text = str(e)
    return "InvalidRange" in text or "not satisfiable" in text or "416" in text


def bounded(data: bytes, path: str, limit: int) -> bytes:
    """``data`` if within the size limit of what ``path`` holds (spec/format.md "Limits")."""
    if len(data) > limit:
        raise CorruptObject(f"{path}: more than {limit} bytes, larger than a {kind_of(path)} can "
                            "be (spec/format.md 'Limits'); the object is damaged or not a ckptfs "
                            "object. Replace it from a copy of the store.")
    return data


def takes_refresh(fs: Any) -> bool:
    return fs.protocol in ("s3", "s3a") or (isinstance(fs.protocol, tuple) and "s3" in fs.protocol)


def whole_object_reads(fs: Any) -> dict[str, Any]:
    """Read options that fetch an object in one GET. Objects here are at most 16 MiB, so a
    filesystem that would first ask for the size (a HEAD) to split big reads into ranges is told
    not to: s3fs does that whenever ``max_concurrency`` > 1, doubling the requests of a read."""
    try:
        params = inspect.signature(fs._cat_file if hasattr(fs, "_cat_file") else fs.cat_file).parameters
    except (TypeError, ValueError):
        return {}
    return {"max_concurrency": 1} if "max_concurrency" in params else {}


def wrap(e: Exception, url: str, path: str) -> StorageError:
    hint = ""
    text = str(e)
    if "credential" in text.lower() or "AccessDenied" in text or "403" in text:
        hint = (" Check the credentials: storage_options in Python, or the environment "
                "(for s3:// AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or AWS_PROFILE).")
    return StorageError(f"{url}: {path}: {type(e).__name__}: {text}.{hint}")
