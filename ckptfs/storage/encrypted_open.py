"""Opening an encrypted store: the store config (plaintext) tells whether a store is
encrypted and which store id its keyring must be bound to (spec/encryption.md 3)."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

from ckptfs.errors import KeyringError
from ckptfs.format.encryption_ids import FEATURE, SCHEME
from ckptfs.format.encryption_ids import SETTING as SETTING  # re-exported
from ckptfs.format.models import StoreConfig
from ckptfs.format.names import CONFIG_PATH
from ckptfs.storage.base import Storage

if TYPE_CHECKING:  # both need ``cryptography`` (the ``encrypt`` extra): loaded when used
    from ckptfs.storage.encrypted import EncryptedStorage
    from ckptfs.storage.keyring import Keyring


def is_encrypted_view(storage: Storage) -> bool:
    """Whether ``storage`` is an encrypted store's plaintext view. Without the module loaded
    no storage can be one, so a plaintext store never imports ``cryptography``."""
    mod = sys.modules.get("ckptfs.storage.encrypted")
    return mod is not None and isinstance(storage, mod.EncryptedStorage)


def _crypto_modules() -> None:
    """Load the encryption modules, or say which extra they need."""
    try:
        import cryptography  # noqa: F401
    except ImportError:
        raise KeyringError("this is an encrypted store (or a keyring was given), and encrypted "
                           "stores need the 'cryptography' package: pip install "
                           "'ckptfs[encrypt]'") from None


def encryption_setting(cfg: StoreConfig, url: str) -> dict[str, Any] | None:
    """The ``encryption`` setting of an encrypted store's config (checked), or None when the
    store is not encrypted."""
    if FEATURE not in cfg.required:
        return None
    enc = cfg.settings.get(SETTING)
    if (not isinstance(enc, dict) or enc.get("scheme") != SCHEME
            or not isinstance(enc.get("store"), bytes) or len(enc["store"]) != 16):
        raise KeyringError(f"{url}: the config of this encrypted store has no valid "
                           f"'{SETTING}' setting (scheme {SCHEME}); it is damaged")
    if cfg.version != 2:  # the scheme is defined over layout version 2 only
        raise KeyringError(f"{url}: the config of this encrypted store says version "
                           f"{cfg.version}; encrypted stores are version 2: it is damaged")
    return enc


def open_encrypted(inner: Storage, keyring: str | os.PathLike[str] | Keyring, *,
                   passphrase: str | None = None) -> EncryptedStorage:
    """The plaintext view of the encrypted store in ``inner``. When ``inner`` holds no store
    yet, the keyring is made (if its folder holds none) and bound to a fresh store id (a
    keyring bound already is refused, unless given as an open Keyring: a copy); the
    store's config is written by the first ``init`` or checkpoint (Repository.init adds the
    feature and the setting)."""
    _crypto_modules()
    from ckptfs.storage.encrypted import EncryptedStorage
    from ckptfs.storage.keyring import Keyring, open_keyring

    try:
        raw = inner.read(CONFIG_PATH)
    except FileNotFoundError:
        raw = None
    if raw is not None:
        cfg = StoreConfig.from_bytes(raw)
        enc = encryption_setting(cfg, inner.url)
        if enc is None:
            raise KeyringError(f"{inner.url} is a plaintext store: open it without a keyring "
                               "(or make an encrypted copy with 'ckptfs copy --encrypt')")
        ring = open_keyring(keyring, passphrase=passphrase)
        if ring.store_id != enc["store"] or ring.id != enc.get("keyring"):
            raise KeyringError(f"{ring.url} is not the keyring of the encrypted store at "
                               f"{inner.url} (it belongs to another store)")
        sid = ring.find("store", "store")
        if sid is None:
            raise KeyringError(f"{ring.url}: the store's own key scope is missing")
        view = EncryptedStorage(inner, ring, enc["store"], ring.scope(sid))
        view.opened_with(raw)
        return view
    ring = _ring_for_new(keyring, passphrase)
    if ring.store_id is not None and not isinstance(keyring, Keyring):
        # a keyring serves one store and its copies: a copy (ckptfs copy) hands over the
        # source's open Keyring; a path to a bound keyring for a new store is a mistake
        raise KeyringError(f"{ring.url} is the keyring of another store; give a new (empty) "
                           f"keyring folder for the new store at {inner.url}")
    if ring.store_id is None:
        ring.bind(os.urandom(16))
    assert ring.store_id is not None
    sid = ring.find("store", "store")
    scope = ring.scope(sid) if sid is not None else ring.new_scope("store", "store")
    return EncryptedStorage(inner, ring, ring.store_id, scope)


def _ring_for_new(keyring: str | os.PathLike[str] | Keyring, passphrase: str | None) -> Keyring:
    from ckptfs.storage.keyring import Keyring, open_keyring

    if isinstance(keyring, Keyring):
        return keyring
    try:
        return open_keyring(keyring, passphrase=passphrase)
    except KeyringError:
        from ckptfs.storage.open import open_storage

        st = open_storage(os.fspath(keyring))
        if st.exists("keyring.cbor"):
            raise
        return Keyring.create(st, passphrase=passphrase)


def check_encryption(cfg: StoreConfig, storage: Storage) -> None:
    """An encrypted store is read only through its keyring, a plaintext one only without
    (spec/encryption.md 3): KeyringError otherwise, before anything else is read."""
    enc = encryption_setting(cfg, storage.url)
    if enc is not None and not is_encrypted_view(storage):
        raise KeyringError(f"{storage.url} is an encrypted store: open it with its keyring "
                           "(open_store(url, keyring=...), --keyring or CKPTFS_KEYRING)")
    if enc is None and is_encrypted_view(storage):
        raise KeyringError(f"{storage.url} is a plaintext store: open it without a keyring")


def new_config_fields(storage: Storage) -> tuple[tuple[str, ...], dict[str, Any]] | None:
    """The required feature and the setting a new store's config gets on ``storage``: an
    encrypted view gets ``encrypted`` and its ``encryption`` setting; others None."""
    if not is_encrypted_view(storage):
        return None
    from ckptfs.storage.encrypted import EncryptedStorage  # loaded: storage is one

    assert isinstance(storage, EncryptedStorage)
    return ((FEATURE,), {SETTING: {"scheme": SCHEME, "store": storage.store_id,
                                          "keyring": storage.keyring.id}})
