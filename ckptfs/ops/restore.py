"""Restore a whole snapshot into a local folder (issue 35 item 5): ``ckptfs restore``.

Each entry becomes one file: a value ``NAME.json`` (the JSON ``ckptfs cat`` prints), a blob
``NAME`` (its bytes, streamed, every chunk verified), a reference ``NAME.ref.json`` (what it
points at; the referenced data is not fetched). ``.ckptfs-snapshot.json`` holds the manifest
(no entry name starts with a dot, so it cannot collide). An entry name ``a/b`` becomes the
folder ``a`` and the file ``b``.

Entry names come from the store, which may be hostile, so none becomes a path unchecked: every
name is checked against the entry-name rule again (segments of ``[A-Za-z0-9_][A-Za-z0-9._-]*``,
never ``.`` or ``..``, no ``\\``, no NUL), the planned files must not collide (also not when
case is folded: ``A.json`` and ``a.json`` are one file on macOS and Windows), and a file must
not also be a folder another entry needs. Everything is checked before the first byte is
written. Files are created relative to the opened folder (``dir_fd``) with ``O_NOFOLLOW``, so
a symbolic link planted in the target is never followed; without ``force`` they are created
exclusively (``O_EXCL``) in an empty or new folder.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from typing import Any

import attrs

from ckptfs.errors import InvalidArgument, InvalidName, RestoreRefused
from ckptfs.format.models import Captured, Entry
from ckptfs.format.names import check_entry_name
from ckptfs.ops.inspect import entry_json, iter_blob, manifest_json, read_value, to_json_value
from ckptfs.store.repository import Repository, Snapshot

#: the file that holds the manifest (no entry name starts with '.')
MANIFEST_FILE = ".ckptfs-snapshot.json"


@attrs.frozen
class Planned:
    """One entry's file: its path relative to the target (``/`` separated) and kind."""

    entry: str
    path: str
    kind: str  # value | blob | ref


@attrs.frozen
class Written:
    entry: str
    path: str
    kind: str
    bytes: int

    def to_json(self) -> dict[str, object]:
        return attrs.asdict(self)


def plan(entries: dict[str, Entry]) -> list[Planned]:
    """The file of every entry, or InvalidName naming each entry that cannot be one (a name
    that breaks the entry-name rule, or files that would collide)."""
    out: list[Planned] = []
    bad: list[str] = []
    for name in sorted(entries):
        try:
            check_entry_name(name)
        except InvalidName:
            bad.append(f"{name!r:.80}: not a valid entry name")
            continue
        segs = name.split("/")
        if any(s in ("", ".", "..") or "\\" in s or "\x00" in s for s in segs):
            bad.append(f"{name!r:.80}: a path segment that climbs or is empty")
            continue
        e = entries[name]
        kind = e.kind if isinstance(e, Captured) else "ref"
        leaf = {"value": f"{segs[-1]}.json", "blob": segs[-1], "ref": f"{segs[-1]}.ref.json"}[kind]
        out.append(Planned(name, "/".join([*segs[:-1], leaf]), kind))
    files: dict[str, str] = {}
    folders: dict[str, str] = {}
    for p in out:
        key = p.path.casefold()
        if key in files:
            bad.append(f"{p.entry!r:.80} and {files[key]!r:.80} would both be the file {p.path!r}")
        files.setdefault(key, p.entry)
        parts = key.split("/")
        for i in range(1, len(parts)):
            folders.setdefault("/".join(parts[:i]), p.entry)
    for key, name in files.items():
        if key in folders:
            bad.append(f"{name!r:.80} would be a file where {folders[key]!r:.80} needs a folder")
    if bad:
        raise InvalidName("cannot restore this snapshot into a folder: " + "; ".join(bad)
                          + ". Nothing was written; 'ckptfs cat' reads such an entry one at a "
                          "time.")
    return out


def _open_target(target: str, force: bool) -> int:
    """The target folder, opened (created when absent); RestoreRefused when it is not a
    folder, or not empty and ``force`` is not set."""
    if os.path.lexists(target) and not os.path.isdir(target):
        raise RestoreRefused(f"{target} is not a folder: give a new or empty folder")
    if os.path.islink(target):
        raise RestoreRefused(f"{target} is a symbolic link: give the folder itself")
    os.makedirs(target, exist_ok=True)
    fd = os.open(target, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    if not force and os.listdir(fd):
        os.close(fd)
        raise RestoreRefused(f"{target} is not empty: restore into a new or empty folder, or "
                             "pass --force to write over files of the same names (other files "
                             "are left alone)")
    return fd


def _folder(parent: int, name: str) -> int:
    try:
        os.mkdir(name, 0o755, dir_fd=parent)
    except FileExistsError:
        pass
    return os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=parent)


def _write(root: int, path: str, pieces: Iterator[bytes], force: bool) -> int:
    """Write ``pieces`` to ``path`` below the folder ``root``; the byte count."""
    segs = path.split("/")
    fds: list[int] = []
    try:
        at = root
        for seg in segs[:-1]:
            at = _folder(at, seg)
            fds.append(at)
        flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | (os.O_TRUNC if force else os.O_EXCL)
        fd = os.open(segs[-1], flags, 0o644, dir_fd=at)
        n = 0
        with os.fdopen(fd, "wb") as f:
            for piece in pieces:
                f.write(piece)
                n += len(piece)
        return n
    finally:
        for x in fds:
            os.close(x)


def _json_bytes(v: Any) -> Iterator[bytes]:
    yield (json.dumps(v, indent=2, sort_keys=True, ensure_ascii=False, allow_nan=False)
           + "\n").encode()


def restore(repo: Repository, snap: Snapshot, target: str, *, force: bool = False,
            allow_expired: bool = False, raw: bool = False,
            progress: Callable[[str], None] | None = None) -> list[Written]:
    """Write every entry of ``snap`` into the folder ``target`` (module docstring)."""
    if not allow_expired:
        repo.check_not_expired(snap)
    entries = dict(snap.manifest.entries)
    planned = plan(entries)
    if not hasattr(os, "O_NOFOLLOW"):  # pragma: no cover - every POSIX system has it
        raise InvalidArgument("restore needs O_NOFOLLOW (a POSIX system)")
    root = _open_target(target, force)
    written: list[Written] = []
    try:
        for p in planned:
            if progress:
                progress(p.entry)
            e = entries[p.entry]
            if p.kind == "blob":
                pieces = iter_blob(repo, snap, p.entry, allow_expired=True)
            elif p.kind == "value":
                value = read_value(repo, snap, p.entry, allow_expired=True)
                if not raw:
                    from ckptfs.ops.lg_values import decode_lg

                    value = decode_lg(value)
                pieces = _json_bytes(to_json_value(value))
            else:
                pieces = _json_bytes(entry_json(e))
            try:
                n = _write(root, p.path, pieces, force)
            except OSError as err:
                raise RestoreRefused(
                    f"{os.path.join(target, p.path)}: cannot be written ({err.strerror}): a "
                    "symbolic link there is never followed, and an existing file is replaced "
                    "only with --force. Restore into a new or empty folder.") from err
            written.append(Written(p.entry, p.path, p.kind, n))
        _write(root, MANIFEST_FILE, _json_bytes(manifest_json(snap)), True)
    finally:
        os.close(root)
    return written


__all__ = ["MANIFEST_FILE", "Planned", "RestoreRefused", "Written", "plan", "restore"]
