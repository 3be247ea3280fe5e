"""Key scopes at the runtime (spec/encryption.md 6): on an encrypted store each run writes
through a view of its own key scope (the run's, or its subject's), with a Store of its own per
scope, so that chunks deduplicate inside a scope and never across scopes."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from ckptfs.errors import ConflictError, InvalidArgument
from ckptfs.format.names import check_run_id
from ckptfs.storage.base import Storage
from ckptfs.format.encryption_ids import KEYRING_ENV
from ckptfs.storage.encrypted_open import is_encrypted_view, open_encrypted

if TYPE_CHECKING:  # they need ``cryptography`` (the ``encrypt`` extra): loaded when used
    from ckptfs.runtime.store import Store
    from ckptfs.storage.encrypted import EncryptedStorage
    from ckptfs.storage.keyring import Keyring, Scope


def keyring_storage(storage: Storage, keyring: str | os.PathLike[str] | Keyring | None,
                    passphrase: str | None = None) -> Storage:
    """``storage`` seen through ``keyring`` (or CKPTFS_KEYRING when ``keyring`` is None and
    the variable is set); ``storage`` itself when neither names a keyring."""
    if keyring is None:
        keyring = os.environ.get(KEYRING_ENV) or None
        # the environment's keyring opens the encrypted stores it meets; it never makes a
        # plaintext store (or a new one) encrypted: only an explicit keyring= does
        if keyring is None or not _encrypted_here(storage):
            return storage
    return open_encrypted(storage, keyring, passphrase=passphrase)


def _encrypted_here(storage: Storage) -> bool:
    from ckptfs.format.encryption_ids import FEATURE
    from ckptfs.format.models import StoreConfig
    from ckptfs.format.names import CONFIG_PATH

    try:
        return FEATURE in StoreConfig.from_bytes(storage.read(CONFIG_PATH)).required
    except FileNotFoundError:
        return False


def base_view(store: Store) -> EncryptedStorage | None:
    """The store's encrypted base view (None: a plaintext store, or a scope's own Store)."""
    st = store.repo.storage
    if not is_encrypted_view(st):
        return None
    from ckptfs.storage.encrypted import EncryptedStorage  # loaded: st is one

    assert isinstance(st, EncryptedStorage)
    return st if st.scope is None else None


def scope_store(store: Store, scope: Scope) -> Store:
    """The Store that writes in ``scope`` (one per scope, kept)."""
    from ckptfs.runtime.store import Store

    kids: dict[bytes, Store] = store.__dict__.setdefault("_scope_stores", {})
    hit = kids.get(scope.id)
    if hit is None:
        view = base_view(store)
        assert view is not None
        hit = Store(view.scoped(scope), chunker=store._chunker, clock=lambda: store.now(),
                    writer=store.writer_name, ref_policy=store.ref_policy, codecs=store.codecs)
        hit.repo._configured(store.repo.config)
        hit.gear_seed = gear_seed(scope)
        hit.scope_base = store
        kids[scope.id] = hit
    return hit


def gear_seed(scope: Scope) -> int:
    """The scope's secret 63-bit gear seed (spec/encryption.md 4.1), never 0 (pyfastcdc takes
    seeds below 2^63: it shifts the seed left in a C unsigned long)."""
    from ckptfs.format import crypto

    return (int.from_bytes(crypto.derive(scope.key, crypto.GEAR, 8), "big") >> 1) or 1


def new_run_scope(store: Store, run_id: str, subject: str | None,
                  same_as: str | None = None) -> Store:
    """Give the new run ``run_id`` its scope (its subject's, the scope of run ``same_as``, or a
    fresh one) and return the Store that writes it."""
    view = base_view(store)
    if view is None:
        if subject is not None:
            raise InvalidArgument("subject= names a key scope: it needs an encrypted store "
                                  "(open_store(url, keyring=...))")
        raise InvalidArgument("not an encrypted store")
    check_run_id(run_id)
    had = view.run_scope(run_id)
    if had is not None:
        # a start that crashed (or never committed) before its first record left the run's
        # scope in the keyring: a new start of that id takes it over; a run with records
        # (or forgotten, or erased) conflicts
        wanted = (view.run_scope(same_as) if same_as is not None else
                  view.keyring.find("subject", subject) if subject is not None else None)
        empty = (store.repo.record_seqs(run_id) == []
                 and not view.inner.listing(view.out(f"tombstones/{run_id}.cbor")).names
                 and store.repo.erased(run_id) is None)
        fits = (had.kind == "run" if wanted is None else
                getattr(wanted, "id", wanted) == had.id)
        if not (empty and fits):
            raise ConflictError(f"run {run_id!r} already exists (or existed) in {store.url}; "
                                "resume it or choose another id")
        return scope_store(store, had)
    if same_as is not None:
        scope = view.run_scope(same_as)
        assert scope is not None
    elif subject is not None:
        scope = view.keyring.subject_scope(subject)
    else:
        scope = view.keyring.new_scope("run")
    view.register_run(run_id, scope)
    return scope_store(store, scope)


def run_store(store: Store, run_id: str) -> Store:
    """The Store that writes the existing run ``run_id``."""
    view = base_view(store)
    assert view is not None
    scope = view.run_scope(run_id)
    if scope is None:
        from ckptfs.errors import NotFound

        raise NotFound(f"run {run_id!r} is not in {store.url}")
    return scope_store(store, scope)

