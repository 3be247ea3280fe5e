"""Export runs of a store as one ``.zip`` or ``.tar`` file that is itself a read-only store.

The runs are first copied (verified, as ``ckptfs copy`` does) into a scratch directory beside
the output, which is then packed with the store at the archive's root and renamed into place,
so a half-written archive never carries the final name. Zip members are stored, not deflated:
chunks are already zstd-compressed, and stored members keep random access cheap for readers.
"""

from __future__ import annotations

import os
import shutil
import tarfile
import tempfile
import zipfile
from collections.abc import Iterable

import attrs

from ckptfs.errors import InvalidURL
from ckptfs.format.names import TMP
from ckptfs.ops.copy import CopyReport, Progress, copy_runs
from ckptfs.storage.local import LocalStorage
from ckptfs.storage.base import Storage
from ckptfs.store.repository import Repository

KINDS = {".zip": "zip", ".tar": "tar"}


@attrs.define
class ExportReport:
    path: str
    kind: str
    files: int
    archive_bytes: int
    copy: CopyReport

    def to_json(self) -> dict[str, object]:
        return {"path": self.path, "kind": self.kind, "files": self.files,
                "archive_bytes": self.archive_bytes, "runs": self.copy.runs,
                "snapshots": self.copy.snapshots_copied, "chunks": self.copy.chunks_copied}


def export_archive(src: Repository, path: str, *, runs: Iterable[str] | None = None,
                   progress: Progress | None = None) -> ExportReport:
    """Write ``runs`` (default: all) of ``src`` to the archive ``path`` (.zip or .tar)."""
    kind = KINDS.get(os.path.splitext(path)[1].lower())
    if kind is None:
        raise InvalidURL(f"{path}: the archive name must end in .zip or .tar")
    path = os.path.abspath(path)
    scratch = tempfile.mkdtemp(prefix=".ckptfs-export-", dir=os.path.dirname(path))
    partial = f"{scratch}.{kind}"
    try:
        report = copy_runs(src, Repository(_scratch_storage(src, scratch)), runs=runs,
                           progress=progress)
        files = _pack(scratch, partial, kind)
        os.replace(partial, path)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        if os.path.exists(partial):
            os.unlink(partial)
    return ExportReport(path, kind, files, os.path.getsize(path), report)


def _scratch_storage(src: Repository, scratch: str) -> Storage:
    """Where the archive's store is built: an encrypted source's archive is an encrypted copy
    under the source's keyring (spec/encryption.md 7: a copy, erasable like any other)."""
    from ckptfs.storage.encrypted import EncryptedStorage
    from ckptfs.storage.encrypted_open import open_encrypted

    inner = LocalStorage(scratch, durable=False)
    st = src.storage
    return open_encrypted(inner, st.keyring) if isinstance(st, EncryptedStorage) else inner


def _pack(root: str, out: str, kind: str) -> int:
    """Pack every file under ``root`` but its tmp/ folder, in sorted order; returns the count."""
    names = []
    for d, subdirs, files in os.walk(root):
        rel = os.path.relpath(d, root)
        if rel == TMP:
            subdirs[:] = []
            continue
        names += [os.path.normpath(os.path.join(rel, f)) for f in files]
    names.sort()
    if kind == "zip":
        with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_STORED) as z:
            for n in names:
                z.write(os.path.join(root, n), n)
    else:
        with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as t:
            for n in names:
                t.add(os.path.join(root, n), n, recursive=False)
    return len(names)
