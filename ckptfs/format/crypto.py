"""Encryption of a store (spec/encryption.md): key derivation, sealed objects, name encryption.

Pure: no I/O. Every primitive comes from ``cryptography`` (no cryptography of our own):
HKDF-SHA256 derives a scope's subkeys, AES-256-GCM with a random 96-bit nonce seals object
bodies (its associated data binds a body to the store, its scope, its kind and its path, so a
swapped or moved object fails to open), and AES-SIV (deterministic, misuse-resistant)
encrypts names into path segments, so that a name is found again without a lookup and never
appears in a path in the clear.
"""

from __future__ import annotations

import base64
import functools
import hmac
import secrets

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM, AESSIV
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from ckptfs.errors import CorruptObject
from ckptfs.format import cbor
from ckptfs.format.encryption_ids import FEATURE, SCHEME

#: first bytes of every sealed object
MAGIC = b"CKE\x01"
SCOPE_ID_SIZE = 16
NONCE_SIZE = 12
TAG_SIZE = 16
KEY_SIZE = 32
HEADER_SIZE = len(MAGIC) + SCOPE_ID_SIZE + NONCE_SIZE
#: bytes a sealed object has beyond its plaintext
OVERHEAD = HEADER_SIZE + TAG_SIZE
#: name plaintexts are padded to a multiple of this many bytes before encryption
NAME_PAD = 16

#: HKDF ``info`` labels of a scope key's subkeys (spec/encryption.md 4.2)
CONTENT = b"ckptfs-enc-1 content"
NAMES = b"ckptfs-enc-1 names"
CHUNK_IDS = b"ckptfs-enc-1 chunk-ids"
GEAR = b"ckptfs-enc-1 gear"


class DecryptionError(CorruptObject):
    """A sealed object or name did not authenticate: tampered, swapped, moved, truncated,
    planted in plaintext, or sealed under another key."""

    category = "corrupt"


@functools.lru_cache(maxsize=4096)
def derive(scope_key: bytes, label: bytes, size: int = KEY_SIZE) -> bytes:
    """A subkey of ``scope_key`` for one purpose (HKDF-SHA256, empty salt, ``info`` = label);
    remembered per process (a key in memory either way)."""
    if len(scope_key) != KEY_SIZE:
        raise ValueError("a scope key is 32 bytes")
    return HKDF(algorithm=hashes.SHA256(), length=size, salt=None, info=label).derive(scope_key)


def new_key() -> bytes:
    """A fresh 256-bit key from the operating system's CSPRNG."""
    return secrets.token_bytes(KEY_SIZE)


def new_scope_id() -> bytes:
    """A fresh random scope id (it names no one: the scope's name lives in the keyring)."""
    return secrets.token_bytes(SCOPE_ID_SIZE)


def associated_data(store_id: bytes, scope_id: bytes, kind: str, path: str) -> bytes:
    """What a sealed object is bound to: canonical CBOR of
    ``["ckptfs-enc", 1, store id, scope id, kind, path]``."""
    return cbor.encode(["ckptfs-enc", 1, store_id, scope_id, kind, path])


def kind_of(path: str) -> str:
    """An object's kind: the first segment of its store path (``runs``, ``packs``, ...)."""
    return path.split("/", 1)[0]


def seal(scope_key: bytes, *, store_id: bytes, scope_id: bytes, path: str, plaintext: bytes,
         nonce: bytes | None = None) -> bytes:
    """``MAGIC | scope id | nonce | AES-256-GCM(content subkey, nonce, plaintext, AD)``.
    ``nonce`` is for test vectors only; writers leave it None (fresh random bytes)."""
    nonce = secrets.token_bytes(NONCE_SIZE) if nonce is None else nonce
    if len(scope_id) != SCOPE_ID_SIZE or len(nonce) != NONCE_SIZE:
        raise ValueError("scope id is 16 bytes, nonce 12")
    ad = associated_data(store_id, scope_id, kind_of(path), path)
    body = AESGCM(derive(scope_key, CONTENT)).encrypt(nonce, plaintext, ad)
    return MAGIC + scope_id + nonce + body


def _named(where: str | None) -> str:
    """How an error names an object: its stored path (encrypted names only), never the
    plaintext path, which may carry a run id (personal data) or a content digest."""
    return "a sealed object" if where is None else f"object {where!r}"


def sealed_scope(data: bytes, *, where: str | None = None) -> bytes:
    """The scope id in a sealed object's header (unauthenticated until ``open_sealed``);
    DecryptionError when ``data`` is not a sealed object at all (a planted plain file).
    ``where``: the object's stored path, for the message."""
    if len(data) < OVERHEAD or data[:len(MAGIC)] != MAGIC:
        raise DecryptionError(
            f"{_named(where)} is not a sealed object of an encrypted store (planted, damaged "
            "or truncated); nothing of it is used. Run 'ckptfs verify' and restore the object "
            "from a copy")
    return data[len(MAGIC):len(MAGIC) + SCOPE_ID_SIZE]


def open_sealed(scope_key: bytes, data: bytes, *, store_id: bytes, path: str,
                where: str | None = None) -> bytes:
    """The plaintext of a sealed object, authenticated against its store, scope, kind and
    path; DecryptionError otherwise (the message holds no plaintext and no plaintext name:
    ``where`` is the stored path that names the object in it)."""
    scope_id = sealed_scope(data, where=where)
    nonce = data[len(MAGIC) + SCOPE_ID_SIZE:HEADER_SIZE]
    ad = associated_data(store_id, scope_id, kind_of(path), path)
    try:
        return AESGCM(derive(scope_key, CONTENT)).decrypt(nonce, data[HEADER_SIZE:], ad)
    except InvalidTag:
        raise DecryptionError(
            f"{_named(where)} does not authenticate under its scope key: it was altered, "
            "moved from another path or store, or sealed under another key. Nothing of it is "
            "used; restore it from a copy, or check that this is the store's own keyring"
        ) from None


def _b32(data: bytes) -> str:
    return base64.b32encode(data).decode("ascii").rstrip("=").lower()


def _unb32(text: str) -> bytes:
    return base64.b32decode(text.upper() + "=" * (-len(text) % 8))


def encrypt_name(scope_key: bytes, name: str, *, context: str) -> str:
    """A path segment for ``name``: lowercase base32 of AES-SIV(names subkey, padded name,
    AD = context). Deterministic, so the same name maps to the same segment; padded to a
    multiple of 16 bytes (0x00 after a 0x80 byte), so only the length bucket shows."""
    raw = name.encode("utf-8") + b"\x80"
    raw += b"\x00" * (-len(raw) % NAME_PAD)
    return _b32(AESSIV(derive(scope_key, NAMES, 64)).encrypt(raw, [context.encode("utf-8")]))


def decrypt_name(scope_key: bytes, segment: str, *, context: str) -> str | None:
    """The name ``encrypt_name`` made ``segment`` from, or None when it does not
    authenticate (another scope's or another tool's name)."""
    try:
        raw = AESSIV(derive(scope_key, NAMES, 64)).decrypt(_unb32(segment),
                                                          [context.encode("utf-8")])
    except (InvalidTag, ValueError):
        return None
    end = raw.rstrip(b"\x00")
    if not end.endswith(b"\x80"):
        return None
    try:
        return end[:-1].decode("utf-8")
    except UnicodeDecodeError:
        return None


def name_digest(key: bytes, kind: str, name: str) -> str:
    """A keyed digest of a name (HMAC-SHA256, hex): how a keyring finds a subject's or a run's
    scope without holding the name in the clear."""
    return hmac.new(key, f"{kind}\x00{name}".encode("utf-8"), "sha256").hexdigest()


#: how the stored segment of a whole run's tombstone starts (``stone_name``): no scope id in
#: base32 has a hyphen at its second character, so it never reads as a run segment
STONE_PREFIX = "x-"


def stone_name(scope_key: bytes, run_id: str) -> str:
    """The stored segment of a whole run's tombstone in an encrypted store (spec/encryption.md
    5.2): ``x-`` and the hex HMAC-SHA256, under the store scope's names subkey, of
    ``"tombstone" 0x00 run``. One-way, and independent of the run's own scope, whose key the
    erase destroys: a copy finds it by the run id, nobody reads the run id from it."""
    key = derive(scope_key, NAMES, 64)
    digest = hmac.new(key, b"tombstone\x00" + run_id.encode("utf-8"), "sha256").hexdigest()
    return STONE_PREFIX + digest


def scope_hex(scope_id: bytes) -> str:
    return scope_id.hex()


__all__ = ["FEATURE", "SCHEME", "OVERHEAD", "DecryptionError", "derive", "seal", "open_sealed",
           "sealed_scope", "encrypt_name", "decrypt_name", "name_digest", "STONE_PREFIX",
           "stone_name", "new_key", "new_scope_id", "associated_data"]
