"""Erasure by key destruction on an encrypted store (spec/encryption.md 7).

``erase_subject`` destroys a subject's scope key in the keyring (tombstone first, then the
wrapped key), marks the store, then deletes every object of the scope it can reach. Copies
made before (cp -r, rsync, aws s3 sync, ckptfs copy) keep the objects, but with the key gone no
copy can open them, while every other scope reads on. ``verify_erased`` proves it on a copy.
"""

from __future__ import annotations

import time
from typing import Any

import attrs

from ckptfs.errors import CkptfsError, InvalidArgument, NotFound
from ckptfs.format import cbor, crypto, crypto_stream
from ckptfs.format.names import CONFIG_PATH, MOVED, PACKS, RUNS, TMP, TOMBSTONES
from ckptfs.storage.base import Storage
from ckptfs.storage.encrypted import EncryptedStorage, _b32
from ckptfs.storage import keyring_shards
from ckptfs.storage.keyring import ScopeErased

#: the store's folder of erased-scope markers (plaintext: a scope id and a time, no name)
ERASED = "erased"


@attrs.frozen
class ScopeEraseReport:
    scope: str
    tombstone: str
    deleted: int
    seconds: float

    def to_json(self) -> dict[str, Any]:
        return attrs.asdict(self)


def _view(storage: Storage) -> EncryptedStorage:
    if not isinstance(storage, EncryptedStorage):
        raise InvalidArgument(f"{storage.url} is not an encrypted store (or was opened without "
                              "its keyring): erasing a subject destroys a key scope, which only "
                              "encrypted stores have; erase its runs with 'ckptfs erase RUN'")
    return storage


def subject_scope_id(storage: Storage, subject: str) -> bytes:
    view = _view(storage)
    sid = view.keyring.find("subject", subject)
    if sid is None:
        raise NotFound(f"no subject of that name in keyring {view.keyring.url}")
    return sid


def _scope_objects(view: EncryptedStorage, sid: bytes) -> list[str]:
    """Every stored path of scope ``sid`` this store holds: its runs' folders, their
    tombstones and forwards (by the scope id in their names) and its packs (by header)."""
    inner, prefix = view.inner, _b32(sid) + "-"
    out: list[str] = []
    for path in inner.scan("").keys():
        parts = path.split("/")
        if path == CONFIG_PATH or parts[0] in (TMP, ERASED):
            continue
        named = parts[1:2] if parts[0] in (RUNS, TOMBSTONES) else (
            parts[2:3] if parts[0] == MOVED and len(parts) > 2 else [])
        if named and named[0].startswith(prefix):
            out.append(path)
        elif parts[0] == PACKS:
            head = inner.read_range(path, 0, crypto.HEADER_SIZE)
            if (head[:4] in (crypto.MAGIC, crypto_stream.MAGIC2)
                    and head[4:4 + crypto.SCOPE_ID_SIZE] == sid):
                out.append(path)
    return out


def erase_subject(storage: Storage, subject: str, *, now_ms: int | None = None
                  ) -> ScopeEraseReport:
    """Destroy the key scope of ``subject`` and delete what this store holds of it."""
    t0 = time.monotonic()
    view = _view(storage)
    sid = subject_scope_id(view, subject)
    when = int(time.time() * 1000) if now_ms is None else now_ms
    stone = view.keyring.erase(sid, now_ms=when)  # from here on, nothing of the scope opens
    view.forget_scope(sid)
    try:
        view.inner.create(f"{ERASED}/{sid.hex()}", cbor.encode({"scope": sid, "erased": when}))
    except FileExistsError:
        pass
    gone = _scope_objects(view, sid)
    view.inner.delete_many(gone)
    return ScopeEraseReport(scope=sid.hex(), tombstone=f"{view.keyring.url}/{stone}",
                            deleted=len(gone), seconds=round(time.monotonic() - t0, 3))


def erase_run_scope(storage: Storage, run_id: str) -> str | None:
    """After ``erase RUN`` on an encrypted store: destroy the run's key scope when it is the
    run's own (kind ``run``); the keyring tombstone's path, or None (a plaintext store, or a
    run inside a subject's scope, which only ``erase --subject`` destroys)."""
    if not isinstance(storage, EncryptedStorage):
        return None
    try:
        scope = storage.run_scope(run_id)
    except ScopeErased:
        return None
    if scope is None or scope.kind != "run":
        return None
    stone = storage.keyring.erase(scope.id)
    storage.forget_scope(scope.id)
    return stone


@attrs.frozen
class ErasedVerdict:
    """What ``verify_erased`` found on one copy."""

    scope: str
    tombstone: str | None
    scope_objects: int
    scope_opened: int
    other_objects: int
    other_failed: list[str]
    runs_read: int
    snapshots_read: int
    problems: list[str]

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        return {**attrs.asdict(self), "ok": self.ok}


def verify_erased(storage: Storage, subject: str) -> ErasedVerdict:
    """Prove on a store or any copy of it that the scope of ``subject`` is erased: its key is
    gone from the keyring (a tombstone stands), no object of it opens, and every other run's
    every snapshot still reads in full (so nothing outside the scope depends on it)."""
    from ckptfs.runtime.store import Store

    view = _view(storage)
    sid = subject_scope_id(view, subject)
    stone = view.keyring.erased(sid)
    problems: list[str] = []
    if stone is None:
        problems.append(f"scope {sid.hex()} has no tombstone in the keyring: it is not erased")
    for where in keyring_shards.held(view.keyring.storage, sid, view.keyring.url):
        problems.append(f"the keyring still holds the key of scope {sid.hex()} "
                        f"({view.keyring.url}/{where}): run the erase again")
    inner = view.inner
    mine = opened = others = 0
    failed: list[str] = []
    for path in sorted(inner.scan("")):
        parts = path.split("/")
        if path == CONFIG_PATH or parts[0] in (TMP, ERASED):
            continue
        data = inner.read(path)
        if data[:4] not in (crypto.MAGIC, crypto_stream.MAGIC2) or len(data) < crypto.OVERHEAD:
            failed.append(path)
            continue
        logical = view.back(path)
        if data[4:4 + crypto.SCOPE_ID_SIZE] == sid:
            mine += 1
            try:
                view.open(logical or path, data)
                opened += 1
            except ScopeErased:
                pass
            except CkptfsError:
                pass
            continue
        others += 1
        try:
            if logical is None:
                raise CkptfsError("name does not decrypt")
            view.open(logical, data)
        except ScopeErased:
            pass  # another erased scope
        except CkptfsError:
            failed.append(path)
    if opened:
        problems.append(f"{opened} object(s) of the erased scope still open")
    if failed:
        problems.append(f"{len(failed)} object(s) of other scopes do not open")
    store = Store(view)
    runs = snaps = 0
    for run in store.runs():
        runs += 1
        for snap in store.snapshots(run):
            try:
                store.read(f"{run}@{snap.seq}")
                snaps += 1
            except CkptfsError as e:
                problems.append(f"a snapshot of another scope does not read: {e.category}")
    return ErasedVerdict(scope=sid.hex(), tombstone=None if stone is None else stone.tombstone,
                         scope_objects=mine, scope_opened=opened, other_objects=others,
                         other_failed=failed, runs_read=runs, snapshots_read=snaps,
                         problems=problems)
