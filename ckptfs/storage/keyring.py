"""A keyring: where an encrypted store's scope keys live, kept apart from the store and its
copies (spec/encryption.md 4).

A keyring is a folder (a local path or any fsspec URL, opened as a ckptfs Storage) holding:

- ``keyring.cbor``: its id, the store it serves, how its master key is protected, and a check
  value sealed under the key-encryption key (a wrong passphrase or key file fails here, clearly);
- ``master.key``: the master key (``CKMK`` + 32 bytes + 4 bytes of its digest) when no
  passphrase protects it; with a passphrase, argon2id derives the master key (parameters in
  ``keyring.cbor``);
- ``scopes/<scope hex>``: each scope's key, wrapped (AES-256-GCM) under the key-encryption key,
  as its creator wrote it; after a rotation, most keys are in the generation's few key shards
  (``shards-<gen>-<tag>/<scope id prefix>``, ``keyring_shards``);
- ``names/<keyed digest>``: which scope a subject or a run belongs to (the name itself is never
  stored in the clear);
- ``erased/<scope hex>``: the tombstone of an erased scope. Erasure writes it, then deletes the
  wrapped key: from then on no copy of the store can open that scope with this keyring.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable
from typing import Any

import attrs

from ckptfs.errors import CkptfsError, ErasedError
from ckptfs.errors import KeyringError as KeyringError  # re-exported: its home before
from ckptfs.format import cbor
from ckptfs.format import crypto
from ckptfs.format.encryption_ids import KEYRING_ENV as KEYRING_ENV  # re-exported
from ckptfs.storage import keyring_shards as shards
from ckptfs.storage.base import Storage
from ckptfs.storage.key_providers import AwsKms, KeyProvider, LocalKek, UnwrapError

KEYRING_FILE = "keyring.cbor"
MASTER_FILE = "master.key"
MASTER_MAGIC = b"CKMK"
SCOPES, NAMES, ERASED = "scopes", "names", "erased"
#: name-index keys of other keyrings whose name entries a copy carried here (``import_names``)
INDEXES = "indexes"
#: the kind (and name) of the store-wide scope of content marked as holding no personal data
SHARED = "shared"
#: environment variable holding the keyring's passphrase, when it has one
PASSPHRASE_ENV = "CKPTFS_KEYRING_PASSPHRASE"
#: argon2id parameters of new passphrase keyrings (RFC 9106 second recommended option)
ARGON2 = {"t": 3, "m": 65536, "p": 4}
_CHECK = b"ckptfs keyring check"
#: per process: scope keys by (keyring id, scope id, wrapped bytes as read). A keyring
#: opened again (each open_store) still reads each scope's tombstone and wrapped key, so
#: erasure and damage are seen at every open, but does not unwrap the same bytes again (with
#: AWS KMS an unwrap is a request). Keys are in memory either way (crypto.derive caches the
#: subkeys).
_UNWRAPPED: dict[tuple[bytes, bytes, bytes], bytes] = {}
_REMEMBER = 1 << 14


class ScopeErased(ErasedError):
    """The data belongs to a key scope that was erased (its key destroyed)."""

    category = "erased"

    def __init__(self, message: str, tombstone: str) -> None:
        super().__init__(message)
        #: the keyring path of the scope's tombstone
        self.tombstone = tombstone


@attrs.frozen
class Scope:
    """One key scope: its id, what it is (``run``, ``subject``, ``shared``, ``store``) and
    its key."""

    id: bytes
    kind: str
    key: bytes


def _master_from_file(data: bytes, where: str) -> bytes:
    if (len(data) != 40 or data[:4] != MASTER_MAGIC
            or hashlib.sha256(data[4:36]).digest()[:4] != data[36:]):
        raise KeyringError(f"{where}: the master key file is truncated or damaged "
                           f"({len(data)} bytes); restore it from your key backup")
    return data[4:36]


def _master_file(key: bytes) -> bytes:
    return MASTER_MAGIC + key + hashlib.sha256(key).digest()[:4]


def _argon2(passphrase: str, salt: bytes, p: dict[str, int]) -> bytes:
    from argon2.low_level import Type, hash_secret_raw

    return hash_secret_raw(passphrase.encode("utf-8"), salt, time_cost=p["t"],
                           memory_cost=p["m"], parallelism=p["p"], hash_len=32, type=Type.ID)


class Keyring:
    """An open keyring: unwraps scope keys for one store, creates and erases scopes."""

    def __init__(self, storage: Storage, *, passphrase: str | None = None,
                 kms: Any = None) -> None:
        self.storage = storage
        self.url = storage.url
        try:
            meta = cbor.decode(storage.read(KEYRING_FILE), what="keyring")
        except FileNotFoundError:
            raise KeyringError(f"{self.url}: no keyring here ({KEYRING_FILE} is missing); "
                               "give the keyring 'ckptfs init --encrypt' made for this store"
                               ) from None
        except CkptfsError:
            meta = None
        if (not isinstance(meta, dict) or meta.get("format") != "ckptfs-keyring"
                or not isinstance(meta.get("id"), bytes) or len(meta["id"]) != 16
                or not isinstance(meta.get("store", b"x" * 16), bytes)
                or not isinstance(meta.get("check"), bytes)):
            raise KeyringError(f"{self.url}: {KEYRING_FILE} is not a ckptfs keyring (damaged "
                               "or another file); restore the keyring from its backup")
        self.id: bytes = meta["id"]
        self.store_id: bytes | None = meta.get("store")
        self._meta = meta
        #: the key generation: rotation makes a new one (its master file and scopes folder)
        self.gen: int = meta.get("gen", 0) if type(meta.get("gen", 0)) is int else -1
        #: where this generation's master key file and wrapped scope keys are
        self._master_path = meta.get("master", MASTER_FILE)
        self._scopes = meta.get("scopes", SCOPES)
        self._indexes = meta.get("indexes", INDEXES)
        #: this generation's key shards (a rotation wrote them) and their name length
        self._shards = meta.get("shards")
        self._shard_k: int = meta.get("shard_prefix", 0)
        if self._shards is not None and not (
                isinstance(self._shards, str) and shards.is_shard_dir(self._shards)
                and "/" not in self._shards and self._shard_k in shards.PREFIXES):
            raise KeyringError(f"{self.url}: {KEYRING_FILE} is damaged (its key shards)")
        if (self.gen < 0 or not isinstance(self._master_path, str)
                or not isinstance(self._scopes, str)
                or not self._master_path.startswith("master")
                or not isinstance(self._indexes, str) or not self._indexes.startswith(INDEXES)
                or not self._scopes.startswith(SCOPES)
                or "/" in self._master_path + self._scopes + self._indexes):
            raise KeyringError(f"{self.url}: {KEYRING_FILE} is damaged (its generation)")
        kdf = meta.get("kdf")
        master = b""
        #: every subject scope's key is wrapped by a KMS key of its own, whose deletion an
        #: erase schedules (spec/encryption.md 4.5)
        self.per_subject = isinstance(kdf, dict) and kdf.get("per_subject") is True
        if isinstance(kdf, dict) and kdf.get("algorithm") == "aws-kms":
            self._wrapper: KeyProvider = AwsKms(str(kdf.get("key_id")), kms)
        else:
            master = self._master(meta, passphrase)
            self._wrapper = LocalKek(crypto.derive(master, b"ckptfs-keyring-1 kek"))
        try:
            if self._wrapper.unwrap(meta["check"], self.id) != _CHECK:
                raise UnwrapError("check value")
            # the name-index key: derived from the first master key, kept wrapped after a
            # rotation (name entries are never rewritten) and in KMS keyrings
            index = meta.get("index")
            self._index = (crypto.derive(master, b"ckptfs-keyring-1 names") if index is None
                           else self._wrapper.unwrap(index, self.id + b"index"))
        except (UnwrapError, KeyError, TypeError, ValueError):
            raise KeyringError(f"{self.url}: the master key or passphrase does not open this "
                               "keyring (wrong key file or passphrase, or a damaged keyring)"
                               ) from None
        self._cache: dict[bytes, Scope] = {}
        #: key shards read (None: absent); never edited, only deleted, so what was read stays
        #: right for every scope the tombstone check lets through
        self._shard_cache: dict[str, dict[str, dict[str, Any]] | None] = {}
        #: how this keyring was opened: to open it again after a rotation (``new_scope``)
        self._opened = (passphrase, kms)
        #: the name-index keys imported from other keyrings (read on first need)
        self._imported: list[bytes] | None = None

    def _master(self, meta: dict[str, Any], passphrase: str | None) -> bytes:
        kdf = meta.get("kdf")
        if isinstance(kdf, dict) and kdf.get("algorithm") == "argon2id":
            passphrase = passphrase if passphrase is not None else os.environ.get(PASSPHRASE_ENV)
            if not passphrase:
                raise KeyringError(f"{self.url}: this keyring is protected by a passphrase; "
                                   f"give it (passphrase= or {PASSPHRASE_ENV})")
            try:
                return _argon2(passphrase, kdf["salt"], kdf["params"])
            except Exception:  # argon2's HashingError, a missing or mistyped parameter
                raise KeyringError(f"{self.url}: the keyring's argon2id parameters are "
                                   "damaged") from None
        try:
            return _master_from_file(self.storage.read(self._master_path), self.url)
        except FileNotFoundError:
            raise KeyringError(f"{self.url}: the master key file {self._master_path} is "
                               "missing") from None

    # -- creation -------------------------------------------------------------------------------
    @classmethod
    def create(cls, storage: Storage, *, passphrase: str | None = None,
               argon2: dict[str, int] | None = None, kms_key_id: str | None = None,
               kms: Any = None, kms_key_per_subject: bool = False) -> Keyring:
        """A new keyring in an empty folder, protected by a fresh master key file, argon2id
        over ``passphrase``, or the AWS KMS key ``kms_key_id`` (``kms``: a boto3 KMS client;
        default ``boto3.client("kms")``). ``kms_key_per_subject`` (KMS keyrings): each subject
        scope gets a KMS key of its own, created with the scope, disabled and scheduled for
        deletion when the subject is erased. The key file is written before the keyring file,
        create-only: a crash leaves a folder with no ``keyring.cbor`` (not a keyring), never a
        half-made one."""
        kid = os.urandom(16)
        meta: dict[str, Any] = {"format": "ckptfs-keyring", "version": 1, "id": kid}
        wrapper = _protect(storage, meta, passphrase, argon2, kms_key_id, kms, MASTER_FILE)
        if kms_key_per_subject:
            if not kms_key_id:
                raise KeyringError("kms_key_per_subject needs a KMS keyring (kms_key_id=)")
            meta["kdf"]["per_subject"] = True
        meta["check"] = wrapper.wrap(_CHECK, kid)
        meta["index"] = wrapper.wrap(crypto.new_key(), kid + b"index")
        storage.create(KEYRING_FILE, cbor.encode(meta))
        return cls(storage, passphrase=passphrase, kms=kms)

    def bind(self, store_id: bytes) -> None:
        """Tie this keyring to a store (once: a keyring serves one store and its copies)."""
        if self.store_id is None:
            self._meta["store"] = store_id
            self.storage.replace(KEYRING_FILE, cbor.encode(self._meta))
            self.store_id = store_id
        elif self.store_id != store_id:
            raise KeyringError(f"{self.url} is the keyring of another store; open this store "
                               "with its own keyring")

    # -- scopes ---------------------------------------------------------------------------------
    def _wrap_ad(self, scope_id: bytes, kind: str) -> bytes:
        return cbor.encode(["ckptfs-keyring", 1, self.id, scope_id, kind])

    def new_scope(self, kind: str, name: str | None = None) -> Scope:
        """Create a scope with a fresh key (written before any object is sealed under it)."""
        sid = crypto.new_scope_id()
        key = crypto.new_key()
        entry: dict[str, Any] = {"kind": kind}
        wrapper = self._wrapper
        if self.per_subject and kind == "subject":
            kms = self._kms(sid)
            entry["kms_key"] = kms.new_key(f"ckptfs key scope {sid.hex()} (keyring {self.id.hex()})")
            wrapper = kms.for_key(entry["kms_key"])
        entry["key"] = wrapper.wrap(key, self._wrap_ad(sid, kind))
        self.storage.create(f"{self._scopes}/{sid.hex()}", cbor.encode(entry))
        from ckptfs.storage.keyring_rotate import follow

        follow(self, sid, kind, key, entry)  # a rotation switched meanwhile: into its generation
        scope = Scope(sid, kind, key)
        self._cache[sid] = scope
        if name is not None:
            self.storage.create(f"{NAMES}/{crypto.name_digest(self._index, kind, name)}",
                                cbor.encode({"scope": sid}))
        return scope

    def rotate(self, *, passphrase: str | None = None, argon2: dict[str, int] | None = None,
               kms_key_id: str | None = None, kms: Any = None,
               progress: Callable[[int, int], None] | None = None) -> Keyring:
        """Replace the master key (a new key file, or argon2id over a new ``passphrase``) and
        rewrap every scope key under it into key shards; no object of the store is rewritten
        (``keyring_rotate``; writers may create scopes meanwhile). Returns the keyring opened
        under the new key. ``progress(done, total)`` is told the scopes rewrapped so far."""
        from ckptfs.storage.keyring_rotate import rotate

        return rotate(self, passphrase, argon2, kms_key_id, kms, progress)

    def _kms(self, scope_id: bytes) -> AwsKms:
        """The KMS service of a scope with a KMS key of its own (this keyring's)."""
        if not isinstance(self._wrapper, AwsKms):
            raise KeyringError(f"{self.url}: scope {scope_id.hex()} has a KMS key of its own, "
                               "but this keyring is not an AWS KMS keyring (rotated away from "
                               "KMS?); it cannot be opened here")
        return self._wrapper

    def tombstone_path(self, scope_id: bytes) -> str:
        return f"{ERASED}/{scope_id.hex()}"

    def erased(self, scope_id: bytes) -> ScopeErased | None:
        path = self.tombstone_path(scope_id)
        if not self.storage.exists(path):
            return None
        return ScopeErased(f"key scope {scope_id.hex()} was erased (tombstone {self.url}/{path}): "
                           "its key is destroyed and its data opens nowhere, in this store or "
                           "any copy", f"{self.url}/{path}")

    def scope(self, scope_id: bytes) -> Scope:
        """The scope with this id; ScopeErased or KeyringError when its key is not here."""
        hit = self._cache.get(scope_id)
        if hit is not None:
            return hit
        gone = self.erased(scope_id)
        if gone is not None:
            raise gone
        own = None  # the scope's own KMS key, if it has one
        try:
            m = self._entry(scope_id)
            kind, wrapped, own = m["kind"], m["key"], m.get("kms_key")
            seen = (self.id, scope_id, cbor.encode([kind, wrapped]))
            key = _UNWRAPPED.get(seen)
            if key is None:
                wrapper = self._wrapper if own is None else self._kms(scope_id).for_key(str(own))
                key = wrapper.unwrap(wrapped, self._wrap_ad(scope_id, kind))
            if len(_UNWRAPPED) >= _REMEMBER:
                _UNWRAPPED.clear()
            _UNWRAPPED[seen] = key
        except FileNotFoundError:
            raise KeyringError(f"key scope {scope_id.hex()} is not in keyring {self.url}: "
                               "this data was sealed under another keyring") from None
        except KeyringError:
            raise
        except (KeyError, TypeError, ValueError, CkptfsError):
            if own is not None:
                raise KeyringError(f"{self.url}: AWS KMS refused to unwrap the key of scope "
                                   f"{scope_id.hex()} with its own KMS key {own} (disabled or "
                                   "scheduled for deletion: the scope was erased through "
                                   "another copy of this keyring)") from None
            raise KeyringError(f"{self.url}: the wrapped key of scope {scope_id.hex()} is "
                               "damaged or was altered") from None
        scope = Scope(scope_id, kind, key)
        self._cache[scope_id] = scope
        return scope

    def _entry(self, scope_id: bytes) -> dict[str, Any]:
        """A scope's wrapped key entry: in its key shard, else its own object (FileNotFound
        when neither holds it)."""
        h = scope_id.hex()
        if self._shards is not None:
            got = shards.cached(self.storage, self._shards, self._shard_k, self._shard_cache, h,
                                self.url)
            if got is not None:
                return got
        m = cbor.decode(self.storage.read(f"{self._scopes}/{h}"), what="scope key")
        if not isinstance(m, dict):
            raise KeyError("entry")
        return m

    def find(self, kind: str, name: str) -> bytes | None:
        """The scope id a subject or run name belongs to, or None. A subject is also looked
        for under the name-index keys of keyrings whose entries a copy carried here
        (``import_names``: the copy never knew the subject's name)."""
        keys = [self._index]
        if kind == "subject":
            keys += self.imported_indexes()
        for key in keys:
            try:
                data = self.storage.read(f"{NAMES}/{crypto.name_digest(key, kind, name)}")
            except FileNotFoundError:
                continue
            return self._entry_scope(data)
        return None

    def _entry_scope(self, data: bytes) -> bytes:
        try:
            m = cbor.decode(data, what="keyring name")
        except CkptfsError:
            m = None
        sid = m.get("scope") if isinstance(m, dict) else None
        if not isinstance(sid, bytes) or len(sid) != crypto.SCOPE_ID_SIZE:
            raise KeyringError(f"{self.url}: a name entry is damaged; restore the keyring "
                               "from its backup")
        return sid

    def _index_ad(self, other_id: bytes) -> bytes:
        return self.id + b"index" + other_id

    def imported_indexes(self) -> list[bytes]:
        """The name-index keys of other keyrings imported here (``import_names``)."""
        if self._imported is None:
            got = []
            for f in sorted(self.storage.listing(self._indexes).files):
                try:
                    m = cbor.decode(self.storage.read(f"{self._indexes}/{f}"),
                                    what="keyring index")
                    got.append(self._wrapper.unwrap(m["key"], self._index_ad(bytes.fromhex(f))))
                except (KeyError, TypeError, ValueError, CkptfsError):
                    raise KeyringError(f"{self.url}: the imported name index {f} is "
                                       "damaged; restore the keyring from its backup") from None
            self._imported = got
        return self._imported

    def name_entries(self) -> dict[str, bytes]:
        """Every name entry of this keyring: keyed digest -> scope id (one listing, then the
        entries read together)."""
        names = sorted(self.storage.listing(NAMES).files)
        got = self.storage.read_many([f"{NAMES}/{n}" for n in names])
        return {n: self._entry_scope(d) for n, d in zip(names, got) if d is not None}

    def import_names(self, other: Keyring, scopes: dict[bytes, bytes],
                     entries: dict[str, bytes] | None = None) -> int:
        """Carry ``other``'s name entries of the scopes in ``scopes`` (``other``'s scope id ->
        this keyring's) into this keyring, with ``other``'s name-index key (wrapped here), so
        that a subject copied from a store of ``other`` is found by its name here (``ckptfs
        copy`` between keyrings: neither keyring holds subject names in the clear). Returns
        the entries written. ``entries``: ``other.name_entries()``, when the caller has them
        (a copy imports many scopes: it reads them once)."""
        path = f"{self._indexes}/{other.id.hex()}"
        if not self.storage.exists(path):
            try:
                self.storage.create(path, cbor.encode(
                    {"key": self._wrapper.wrap(other._index, self._index_ad(other.id))}))
            except FileExistsError:
                pass
            self._imported = None
        wrote = 0
        for n, sid in (other.name_entries() if entries is None else entries).items():
            if sid not in scopes:
                continue
            try:
                self.storage.create(f"{NAMES}/{n}", cbor.encode({"scope": scopes[sid]}))
                wrote += 1
            except FileExistsError:
                pass
        return wrote

    def name(self, kind: str, name: str, scope_id: bytes) -> None:
        """Record that ``name`` (a run) belongs to scope ``scope_id``."""
        path = f"{NAMES}/{crypto.name_digest(self._index, kind, name)}"
        try:
            self.storage.create(path, cbor.encode({"scope": scope_id}))
        except FileExistsError:
            if self.find(kind, name) != scope_id:
                raise KeyringError(f"{kind} name already belongs to another scope") from None

    def subject_scope(self, subject: str) -> Scope:
        """The scope of a subject, created on first use."""
        return self._named_scope("subject", subject)

    def shared_scope(self) -> Scope:
        """The store-wide ``shared`` scope (spec/encryption.md 4.2), created on first use: for
        content the application marks as holding no personal data. No erasure destroys it."""
        return self._named_scope(SHARED, SHARED)

    def _named_scope(self, kind: str, name: str) -> Scope:
        sid = self.find(kind, name)
        if sid is not None:
            return self.scope(sid)
        try:
            return self.new_scope(kind, name)
        except FileExistsError:  # another writer made it first: its name entry wins
            sid = self.find(kind, name)
            assert sid is not None
            return self.scope(sid)

    def erase(self, scope_id: bytes, *, now_ms: int | None = None) -> str:
        """Destroy a scope's key: write its tombstone, then delete the wrapped key (a crash in
        between leaves the scope erased: readers look for the tombstone first). Idempotent;
        returns the tombstone's path."""
        path = self.tombstone_path(scope_id)
        if self._shards is not None:  # a damaged shard is refused before anything is written
            shards.read(self.storage, self._shards, shards.shard_of(scope_id.hex(),
                                                                    self._shard_k), self.url)
        stone = cbor.encode({"scope": scope_id,
                             "erased": int(time.time() * 1000) if now_ms is None else now_ms})
        try:
            self.storage.create(path, stone)
        except FileExistsError:
            pass
        # every generation's copy of the key, in per-scope objects and key shards (a rotation
        # in another process may have rewrapped it into the next one); a scope's own KMS key
        # is disabled and its deletion scheduled first (a crash after it leaves the wrapped key
        # for a rerun to delete); a shard holding it is exploded (keyring_shards)
        folders, holding, own = shards.erase_plan(self.storage, scope_id, self.url)
        for kms_key in own:
            self._kms(scope_id).retire(kms_key)
        for folder, name, entries in holding:
            shards.explode(self.storage, folder, name, entries, ERASED)
        self.storage.delete_many([f"{folder}/{scope_id.hex()}" for folder in folders])
        self._cache.pop(scope_id, None)
        for k in [k for k in _UNWRAPPED if k[:2] == (self.id, scope_id)]:
            _UNWRAPPED.pop(k, None)
        return path


def _protect(storage: Storage, meta: dict[str, Any], passphrase: str | None,
             argon2: dict[str, int] | None, kms_key_id: str | None, kms: Any,
             master_name: str) -> KeyProvider:
    """Set up how a keyring (generation) is protected; its provider. Writes the master key
    file (create-only) when neither a passphrase nor KMS protects it."""
    if kms_key_id:
        meta["kdf"] = {"algorithm": "aws-kms", "key_id": kms_key_id}
        return AwsKms(kms_key_id, kms)
    if passphrase:
        params = dict(argon2 or ARGON2)
        salt = os.urandom(16)
        meta["kdf"] = {"algorithm": "argon2id", "salt": salt, "params": params}
        master = _argon2(passphrase, salt, params)
    else:
        master = crypto.new_key()
        if master_name != MASTER_FILE:
            meta["master"] = master_name
        storage.create(master_name, _master_file(master))
    return LocalKek(crypto.derive(master, b"ckptfs-keyring-1 kek"))


def open_keyring(url: str | os.PathLike[str] | Keyring, *, passphrase: str | None = None,
                 create: bool = False) -> Keyring:
    """The keyring at ``url`` (a folder path or fsspec URL); ``create`` makes a new one there."""
    if isinstance(url, Keyring):
        return url
    from ckptfs.storage.open import open_storage

    storage = open_storage(os.fspath(url))
    if create:
        return Keyring.create(storage, passphrase=passphrase)
    return Keyring(storage, passphrase=passphrase)
