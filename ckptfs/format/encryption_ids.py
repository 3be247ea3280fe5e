"""The names an encrypted store's config carries (spec/encryption.md 3), apart from
``crypto`` so that reading any store's config needs no ``cryptography`` (the ``encrypt``
extra): a plaintext store never loads it."""

from __future__ import annotations

#: the required store feature of an encrypted store (format.md 2: older readers refuse it)
FEATURE = "encrypted"
#: the scheme name in the store config's ``encryption`` setting
SCHEME = "ckptfs-enc-1"
#: the setting of an encrypted store's config that names its scheme, store id and keyring id
SETTING = "encryption"
#: the environment variable naming the keyring every command uses (as ``--keyring``)
KEYRING_ENV = "CKPTFS_KEYRING"

__all__ = ["FEATURE", "SCHEME", "SETTING", "KEYRING_ENV"]
