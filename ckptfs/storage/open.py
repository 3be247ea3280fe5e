"""Pick the backend class for a URL.

A local path to a ``.zip`` or ``.tar`` file opens the store inside the archive (read-only), so an
exported run can be inspected with no unpacking: ``ckptfs ls run.zip``.
"""

from __future__ import annotations

import os
import re
from typing import Any

from ckptfs.errors import InvalidURL, NotAStore
from ckptfs.format.names import CONFIG_PATH
from ckptfs.storage.base import Storage
from ckptfs.storage.local import LocalStorage
from ckptfs.storage.local_caps import ENV_DISABLE, ENV_MODE, disabled_features

ARCHIVE_SUFFIXES = {".zip": "zip", ".tar": "tar"}
_MISSPELT = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]+:/(?!/)")


def open_storage(url: str, *, filesystem: Any = None, **storage_options: Any) -> Storage:
    """Local paths and ``file://`` get the POSIX backend; everything else goes through fsspec.

    ``local_mode="portable"`` / ``local_disable="link,o_tmpfile,..."`` (local disk) use the
    fallbacks of the local backend where the fast paths work (RELIABILITY.md "Local disk
    modes"); by default ``CKPTFS_LOCAL_MODE`` and ``CKPTFS_LOCAL_DISABLE`` decide.
    ``single_writer=True`` (object stores) allows writing to a backend that does not honour
    create-only writes, on the caller's promise that no other process writes to the store.
    ``filesystem``: an fsspec filesystem the caller already configured; ``url`` is then the
    store's path in it (a URL of its protocol or a bare path), and no other option is taken."""
    url = os.fspath(url)
    if filesystem is not None:
        return _on_filesystem(filesystem, url, storage_options)
    if _MISSPELT.match(url) and not os.path.exists(url):
        raise InvalidURL(f"{url!r} looks like a URL with a missing '/' (did you mean "
                         f"{url.replace(':/', '://', 1)!r}?); a local path needs no scheme")
    if "://" not in url or url.startswith("file://"):
        path = url[len("file://"):] if url.startswith("file://") else url
        archive = _archive_url(path)
        if archive is None and os.path.isfile(path):
            raise NotAStore(f"{path} is a file, not a folder: a ckptfs store is a folder (or a "
                            "bucket prefix). Give the store's folder; an archive that "
                            "'ckptfs export' made opens as it is when it ends in .zip or .tar")
        if archive is None:
            storage_options.pop("single_writer", None)  # local disk is always create-only
            durable = storage_options.pop("durable", True)
            disable = _local_disable(storage_options.pop("local_mode", None),
                                     storage_options.pop("local_disable", None))
            if storage_options:
                raise TypeError(f"local stores take no storage options but 'durable', "
                                f"'local_mode' and 'local_disable', got {sorted(storage_options)}")
            return LocalStorage(path, durable=durable, disable=disable)
        url = archive
    import fsspec  # here, not at import: local stores (and the CLI on them) start faster
    from fsspec.implementations.local import LocalFileSystem

    from ckptfs.storage.objects import FsspecStorage

    single_writer = bool(storage_options.pop("single_writer", False))
    try:
        fs, root = fsspec.core.url_to_fs(url, **storage_options)
    except ImportError as e:
        raise InvalidURL(f"{url}: {e} (the fsspec plugin for this protocol is not installed; "
                         "for s3:// install ckptfs[s3])") from e
    except (ValueError, TypeError) as e:
        raise InvalidURL(f"{url}: not a store URL fsspec can open ({e}); use a local path or "
                         "a URL such as s3://bucket/prefix, memory://name, zip://::file.zip, "
                         "http://host/store") from e
    if isinstance(fs, LocalFileSystem):
        # local disk under another spelling ("local://"): fsspec's local "xb" exposes a
        # half-written file and its writes are not fsynced; link(2) gives neither problem
        return LocalStorage(root, durable=storage_options.get("durable", True))
    return FsspecStorage(fs, root, url, single_writer=single_writer)


def _local_disable(mode: Any, disable: Any) -> frozenset[str] | None:
    """The local features an open option turns off (``local_mode="portable"``,
    ``local_disable="link,syncfs"`` or a list); None: the environment decides
    (``CKPTFS_LOCAL_MODE``, ``CKPTFS_LOCAL_DISABLE``; ckptfs/storage/local_caps.py)."""
    if mode is None and disable is None:
        return None
    env = {ENV_MODE: str(mode or ""),
           ENV_DISABLE: disable if isinstance(disable, str) else ",".join(disable or ())}
    return disabled_features(env)


def _on_filesystem(fs: Any, url: str, options: dict[str, Any]) -> Storage:
    """The store at ``url`` on an existing fsspec filesystem object (issue 18)."""
    import fsspec
    from fsspec.implementations.local import LocalFileSystem

    from ckptfs.storage.objects import FsspecStorage

    if not isinstance(fs, fsspec.AbstractFileSystem):
        raise InvalidURL(f"filesystem= takes an fsspec filesystem (fsspec.filesystem('s3', "
                         f"...)), not {type(fs).__name__}")
    single_writer = bool(options.pop("single_writer", False))
    if options:
        raise InvalidURL(f"filesystem= carries its own options; configure it instead of passing "
                         f"{sorted(options)}")
    root = fs._strip_protocol(url)
    if isinstance(fs, LocalFileSystem):
        return LocalStorage(root)
    return FsspecStorage(fs, root, fs.unstrip_protocol(root), single_writer=single_writer)


def _archive_url(path: str) -> str | None:
    """``zip://ROOT::PATH`` for a local archive file, ROOT being where its store config is."""
    kind = ARCHIVE_SUFFIXES.get(os.path.splitext(path)[1].lower())
    if kind is None or not os.path.isfile(path):
        return None
    import fsspec

    fs = fsspec.filesystem(kind, fo=os.path.abspath(path))
    root = ""
    if not fs.isfile(CONFIG_PATH):
        tops = fs.ls("", detail=False)
        found = [t.rstrip("/") for t in tops if fs.isfile(f"{t.rstrip('/')}/{CONFIG_PATH}")]
        if len(found) == 1:  # archived with a leading directory ("./" or "store/")
            root = found[0]
    return f"{kind}://{root}::{os.path.abspath(path)}"
