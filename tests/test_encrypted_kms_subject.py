"""A KMS key per subject (issue 33, spec/encryption.md 4.5), on moto's KMS and S3 on loopback:
each subject scope's key is wrapped by a KMS key of its own, created with the scope; erasing
the subject disables that KMS key and schedules its deletion, so a keyring backup made before
the erase no longer opens the scope once AWS refuses the key (moto's KMS answers Decrypt for a
disabled key, so the tests check the key's state, and the refusal with a key that cannot
decrypt)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import cbor2
import pytest

import ckptfs
from ckptfs.ops.erase_scope import erase_subject
from ckptfs.storage.keyring import Keyring, KeyringError, ScopeErased
from ckptfs.storage.open import open_storage


@pytest.fixture
def kms(s3_options: dict[str, Any]) -> Any:
    import boto3

    return boto3.client("kms", endpoint_url=s3_options["endpoint_url"], region_name="us-east-1",
                        aws_access_key_id="testing", aws_secret_access_key="testing")


def test_subject_scopes_have_kms_keys_of_their_own(tmp_path: Path, kms: Any,
                                                    s3_options: dict[str, Any]) -> None:
    from tests.conftest import new_s3_url

    master = kms.create_key()["KeyMetadata"]["KeyId"]
    ring_dir = tmp_path / "ring"
    ring = Keyring.create(open_storage(str(ring_dir)), kms_key_id=master, kms=kms,
                          kms_key_per_subject=True)
    url = new_s3_url()
    store = ckptfs.open_store(url, keyring=ring, **s3_options)
    store.start_run("a1", subject="user-1").checkpoint({"v": "one"})
    store.start_run("a2", subject="user-1").checkpoint({"v": "one again"})
    store.start_run("b", subject="user-2").checkpoint({"v": "two"})
    store.start_run("c").checkpoint({"v": "own"})
    entries = [cbor2.loads(p.read_bytes()) for p in (ring_dir / "scopes").iterdir()]
    own = {e["kms_key"] for e in entries if e["kind"] == "subject"}
    assert len(own) == 2 and master not in own  # one KMS key per subject
    assert all("kms_key" not in e for e in entries if e["kind"] != "subject")
    cddl = (Path(__file__).parent.parent / "spec" / "ckptfs.cddl").read_text()
    import pycddl

    for p in (ring_dir / "scopes").iterdir():
        pycddl.Schema(f"root = enc-scope-key\n{cddl}").validate_cbor(p.read_bytes())
    pycddl.Schema(f"root = enc-keyring\n{cddl}").validate_cbor(
        (ring_dir / "keyring.cbor").read_bytes())

    def fresh(path: Path = ring_dir) -> ckptfs.Store:
        return ckptfs.open_store(url, keyring=Keyring(open_storage(str(path)), kms=kms),
                                 **s3_options)

    assert fresh().read("a1") == {"v": "one"}
    # rotation to another master KMS key keeps the subjects' own keys
    other = kms.create_key()["KeyMetadata"]["KeyId"]
    Keyring(open_storage(str(ring_dir)), kms=kms).rotate(kms_key_id=other, kms=kms)
    with pytest.raises(KeyringError, match="another KMS key"):
        Keyring(open_storage(str(ring_dir)), kms=kms).rotate(passphrase="pw")
    assert fresh().read("b") == {"v": "two"} and fresh().read("a2") == {"v": "one again"}
    backup = tmp_path / "backup"  # a keyring backup made before the erase
    shutil.copytree(ring_dir, backup)
    erase_subject(fresh().storage, "user-1")
    states = {k: kms.describe_key(KeyId=k)["KeyMetadata"]["KeyState"] for k in own}
    assert sorted(states.values()) == ["Enabled", "PendingDeletion"], states
    gone = next(k for k, s in states.items() if s == "PendingDeletion")
    assert kms.describe_key(KeyId=gone)["KeyMetadata"]["Enabled"] is False
    with pytest.raises(ScopeErased):
        fresh().read("a1")
    assert fresh().read("b") == {"v": "two"} and fresh().read("c") == {"v": "own"}
    erase_subject(fresh().storage, "user-1")  # again: nothing to do, no error
    # the backup still holds the wrapped key; AWS refuses a disabled key. Moto does not,
    # so a KMS client that refuses the erased key stands for AWS here
    refusing = _Refusing(kms, gone)
    old = ckptfs.open_store(url, keyring=Keyring(open_storage(str(backup)), kms=refusing),
                            **s3_options)
    with pytest.raises(KeyringError, match="refused"):
        old.read("a1")
    assert old.read("b") == {"v": "two"}


class _Refusing:
    """A boto3 KMS client that answers as AWS does for a disabled key: Decrypt refused."""

    def __init__(self, inner: Any, key_id: str) -> None:
        self.inner, self.key_id = inner, key_id

    def decrypt(self, **kw: Any) -> Any:
        if kw.get("KeyId") == self.key_id:
            from botocore.exceptions import ClientError

            raise ClientError({"Error": {"Code": "DisabledException", "Message": "disabled"}},
                              "Decrypt")
        return self.inner.decrypt(**kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_per_subject_needs_a_kms_keyring(tmp_path: Path) -> None:
    with pytest.raises(KeyringError, match="KMS keyring"):
        Keyring.create(open_storage(str(tmp_path / "r")), kms_key_per_subject=True)
