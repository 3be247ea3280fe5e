"""Pick the backend class for a URL."""

from __future__ import annotations

import os
from typing import Any

import fsspec
from fsspec.implementations.local import LocalFileSystem

from ckptfs.storage.base import Storage
from ckptfs.storage.local import LocalStorage
from ckptfs.storage.objects import FsspecStorage


def open_storage(url: str, **storage_options: Any) -> Storage:
    """Local paths and ``file://`` get the POSIX backend; everything else goes through fsspec."""
    url = os.fspath(url)
    if "://" not in url or url.startswith("file://"):
        path = url[len("file://"):] if url.startswith("file://") else url
        durable = storage_options.pop("durable", True)
        if storage_options:
            raise TypeError(f"local stores take no storage options but 'durable', got {sorted(storage_options)}")
        return LocalStorage(path, durable=durable)
    fs, root = fsspec.core.url_to_fs(url, **storage_options)
    if isinstance(fs, LocalFileSystem):
        # local disk under another spelling ("local://"): fsspec's local "xb" exposes a
        # half-written file and its writes are not fsynced; link(2) gives neither problem
        return LocalStorage(root, durable=True)
    return FsspecStorage(fs, root, url)
