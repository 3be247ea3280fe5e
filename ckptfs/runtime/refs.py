"""Checking external references on restore, and capturing them at checkpoint time."""

from __future__ import annotations

import time
from typing import Any

import fsspec

from ckptfs.format.digest import Digest, hasher
from ckptfs.format.models import Reference
from ckptfs.format.values import Blob, Ref


def to_ref(entry: Reference, missing: str | None = None) -> Ref:
    return Ref(uri=entry.uri, digest=entry.digest, size=entry.size,
               expires_at=None if entry.expires is None else entry.expires / 1000,
               labels=dict(entry.labels), missing=missing)


def check_reference(entry: Reference, *, now: float | None = None,
                    storage_options: dict[str, Any] | None = None) -> str | None:
    """Why ``entry`` cannot be restored, or None if it is there and matches."""
    now = time.time() if now is None else now
    if entry.expires is not None and entry.expires / 1000 <= now:
        return f"expired at {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(entry.expires / 1000))}"
    try:
        fs, path = fsspec.core.url_to_fs(entry.uri, **(storage_options or {}))
        info = fs.info(path)
    except FileNotFoundError:
        return f"{entry.uri} does not exist"
    except Exception as e:  # any backend failure means the data cannot be had
        return f"{entry.uri} cannot be reached ({type(e).__name__}: {e})"
    size = info.get("size")
    if entry.size is not None and size is not None and int(size) != entry.size:
        return f"{entry.uri} is {size} bytes, expected {entry.size}"
    if entry.digest is not None:
        h = hasher()
        try:
            with fs.open(path, "rb") as f:
                while piece := f.read(1 << 20):
                    h.update(piece)
        except Exception as e:
            return f"{entry.uri} cannot be read ({type(e).__name__}: {e})"
        if Digest(h.digest()) != entry.digest:
            return f"{entry.uri} has changed (digest differs from {entry.digest})"
    return None


def capture(ref: Ref) -> Blob:
    """Open the referenced data for storing its bytes now (``Ref(..., capture=True)``)."""
    f = fsspec.open(ref.uri, "rb", **ref.storage_options).open()
    labels = dict(ref.labels)
    labels.setdefault("ckptfs.captured-from", ref.uri[:1024])
    return Blob(f, labels=labels)
