"""Key providers: what wraps a keyring's scope keys (spec/encryption.md 4.3).

A ``KeyProvider`` wraps and unwraps small secrets (scope keys, the keyring's check value and
name-index key), binding each to a context (associated data) so a wrapped key moved to another
scope fails to unwrap. ckptfs ships two: ``LocalKek`` (AES-256-GCM under a key-encryption key
derived from the keyring's master key: a key file or an argon2id passphrase) and ``AwsKms``
(AWS KMS Encrypt/Decrypt with the context as the encryption context). Other services (Vault
Transit, GCP KMS, Azure Key Vault) implement the same two methods.
"""

from __future__ import annotations

import os
from typing import Any, Protocol

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from ckptfs.errors import CkptfsError


class UnwrapError(CkptfsError):
    """A wrapped secret did not unwrap: another key, an altered blob, a moved entry, or the
    key service refused."""

    category = "keyring"


class KeyProvider(Protocol):
    """Wraps and unwraps secrets of at most 64 bytes, bound to ``context``."""

    def wrap(self, secret: bytes, context: bytes) -> bytes:
        """The wrapped form of ``secret``; only ``unwrap`` with the same context opens it."""

    def unwrap(self, blob: bytes, context: bytes) -> bytes:
        """The secret ``wrap`` made ``blob`` from; UnwrapError otherwise."""


class LocalKek:
    """AES-256-GCM under a local key-encryption key: nonce (12) || ciphertext || tag."""

    def __init__(self, kek: bytes) -> None:
        self._aead = AESGCM(kek)

    def wrap(self, secret: bytes, context: bytes) -> bytes:
        nonce = os.urandom(12)
        return nonce + self._aead.encrypt(nonce, secret, context)

    def unwrap(self, blob: bytes, context: bytes) -> bytes:
        try:
            return self._aead.decrypt(blob[:12], blob[12:], context)
        except (InvalidTag, TypeError, ValueError):
            raise UnwrapError("a wrapped key does not open under this keyring's key") from None


class AwsKms:
    """AWS KMS: ``Encrypt``/``Decrypt`` with one KMS key; the context goes into the request's
    encryption context (KMS binds it and logs it in CloudTrail; it holds ids, no names)."""

    def __init__(self, key_id: str, client: Any = None) -> None:
        if client is None:
            import boto3  # type: ignore[import-untyped]

            client = boto3.client("kms")
        self.key_id = key_id
        self.client = client

    def wrap(self, secret: bytes, context: bytes) -> bytes:
        got = self.client.encrypt(KeyId=self.key_id, Plaintext=secret,
                                  EncryptionContext={"ckptfs": context.hex()})
        return bytes(got["CiphertextBlob"])

    def unwrap(self, blob: bytes, context: bytes) -> bytes:
        from botocore.exceptions import BotoCoreError, ClientError  # type: ignore[import-untyped]

        try:
            got = self.client.decrypt(CiphertextBlob=blob, KeyId=self.key_id,
                                      EncryptionContext={"ckptfs": context.hex()})
        except (ClientError, BotoCoreError) as e:
            raise UnwrapError(f"AWS KMS refused to unwrap a key ({type(e).__name__})") from None
        return bytes(got["Plaintext"])

    def for_key(self, key_id: str) -> AwsKms:
        """The same service with another KMS key (a scope's own key)."""
        return AwsKms(key_id, self.client)

    def new_key(self, description: str) -> str:
        """A new symmetric KMS key (``CreateKey``) for one key scope; its key id. The
        description holds ids only, never names (it shows in the AWS console and CloudTrail)."""
        return str(self.client.create_key(Description=description,
                                          KeyUsage="ENCRYPT_DECRYPT")["KeyMetadata"]["KeyId"])

    def retire(self, key_id: str, *, days: int = 7) -> None:
        """Disable a scope's own KMS key and schedule its deletion (the shortest window AWS
        allows, 7 days): from the disable on, KMS refuses to unwrap with it, so no copy of the
        keyring (a backup made before the erase) opens the scope either. Idempotent: a key
        already disabled or pending deletion is left as it is."""
        from botocore.exceptions import ClientError

        steps: list[tuple[str, dict[str, Any]]] = [
            ("disable_key", {"KeyId": key_id}),
            ("schedule_key_deletion", {"KeyId": key_id, "PendingWindowInDays": days})]
        for name, kwargs in steps:
            try:
                getattr(self.client, name)(**kwargs)
            except ClientError as e:
                if e.response.get("Error", {}).get("Code") not in (
                        "KMSInvalidStateException", "NotFoundException"):
                    raise
