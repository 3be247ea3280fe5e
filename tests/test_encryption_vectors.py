"""spec/vectors/encryption.json: the published test keys, checked twice: by ckptfs's
ckptfs.format.crypto, and by a second implementation written here from spec/encryption.md
alone (raw ``cryptography`` primitives and cbor2), so the spec is enough to pass them."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

import cbor2
import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM, AESSIV
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from ckptfs.format import crypto, crypto_stream
from ckptfs_conformance.gen_encryption import stream_case, stream_plaintext, vectors

V: dict[str, Any] = json.loads(
    (Path(__file__).resolve().parent.parent / "spec" / "vectors" / "encryption.json").read_text())


def hkdf(key: bytes, info: str, n: int) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=n, salt=None, info=info.encode()).derive(key)


def spec_open(key: bytes, store: bytes, path: str, data: bytes) -> bytes:
    """spec/encryption.md 5.1, from the text."""
    assert data[:4] == b"CKE\x01"
    scope, nonce, body = data[4:20], data[20:32], data[32:]
    ad = cbor2.dumps(["ckptfs-enc", 1, store, scope, path.split("/")[0], path], canonical=True)
    return AESGCM(hkdf(key, "ckptfs-enc-1 content", 32)).decrypt(nonce, body, ad)


def spec_open2(key: bytes, store: bytes, path: str, data: bytes, seg: int = 65536) -> bytes:
    """spec/encryption.md 5.1, layout 2 (segmented), from the text."""
    assert data[:4] == b"CKE\x02"
    scope, salt, body = data[4:20], data[20:32], data[32:]
    ad = cbor2.dumps(["ckptfs-enc", 2, store, scope, path.split("/")[0], path], canonical=True)
    okey = HKDF(algorithm=hashes.SHA256(), length=32, salt=salt,
                info=b"ckptfs-enc-2 object").derive(hkdf(key, "ckptfs-enc-1 content", 32))
    pieces = [body[i:i + seg + 16] for i in range(0, len(body), seg + 16)] or [b""]
    out = b""
    for i, piece in enumerate(pieces):
        last = i == len(pieces) - 1
        out += AESGCM(okey).decrypt(i.to_bytes(11, "big") + bytes([last]), piece, ad)
    return out


def spec_name(key: bytes, name: str, context: str) -> str:
    """spec/encryption.md 5.2, from the text."""
    raw = name.encode() + b"\x80"
    raw += b"\x00" * (-len(raw) % 16)
    out = AESSIV(hkdf(key, "ckptfs-enc-1 names", 64)).encrypt(raw, [context.encode()])
    return base64.b32encode(out).decode().rstrip("=").lower()


def test_file_is_what_the_generator_makes() -> None:
    fresh = vectors()
    assert fresh["seal"] == V["seal"] and fresh["names"] == V["names"]
    assert fresh["subkeys"] == V["subkeys"]


def test_second_implementation_opens_and_names() -> None:
    key, store = bytes.fromhex(V["scope_key"]), bytes.fromhex(V["store_id"])
    s = V["seal"]
    assert spec_open(key, store, s["path"], bytes.fromhex(s["sealed"])) == bytes.fromhex(
        s["plaintext"])
    assert crypto.open_sealed(key, bytes.fromhex(s["sealed"]), store_id=store,
                              path=s["path"]) == bytes.fromhex(s["plaintext"])
    for label, want in V["subkeys"].items():
        assert hkdf(key, label, len(want) // 2).hex() == want
    for n in V["names"]:
        assert spec_name(key, n["name"], n["context"]) == n["segment"]
        assert crypto.decrypt_name(key, n["segment"], context=n["context"]) == n["name"]
        assert crypto.decrypt_name(key, n["segment"], context="other") is None


@pytest.mark.parametrize("case", V["must_fail"], ids=lambda c: c["why"].split(":")[0])
def test_must_fail(case: dict[str, str]) -> None:
    key, store = bytes.fromhex(V["scope_key"]), bytes.fromhex(V["store_id"])
    with pytest.raises(crypto.DecryptionError):
        crypto.open_sealed(key, bytes.fromhex(case["sealed"]), store_id=store,
                           path=case["path"])
    with pytest.raises(Exception):
        spec_open(key, store, case["path"], bytes.fromhex(case["sealed"]))


STORES = Path(__file__).resolve().parent.parent / "spec" / "vectors" / "encrypted-stores"
EXPECT: dict[str, Any] = json.loads((STORES / "expect.json").read_text())


def _outcome(store: Any, run: str) -> Any:
    from ckptfs.errors import CkptfsError

    try:
        return store.read(run)
    except CkptfsError as e:
        return e.category


@pytest.mark.parametrize("name", sorted(EXPECT))
def test_encrypted_store_vectors(name: str, tmp_path: Path) -> None:
    """Real stores with their published keyrings (spec/encryption.md 9): valid, tampered,
    swapped, planted, another store's keyring, an erased scope in a copy made before."""
    import shutil

    import ckptfs
    from ckptfs.errors import CkptfsError

    shutil.copytree(STORES / name, tmp_path / name)
    url, ring = str(tmp_path / name / "store"), str(tmp_path / name / "keyring")
    want = EXPECT[name]
    if "*" in want:
        with pytest.raises(CkptfsError) as e:
            ckptfs.open_store(url, keyring=ring).read("chat-1")
        assert e.value.category == want["*"]
        return
    store = ckptfs.open_store(url, keyring=ring)
    valid = EXPECT["valid"]
    for runs, expected in want.items():
        got = {r: _outcome(store, r) for r in runs.split("|")}
        if "|" in runs:  # one of them is damaged, the other reads as in the valid store
            assert sorted(v if isinstance(v, str) else "ok" for v in got.values()) == sorted(
                [expected, "ok"]), got
            assert all(v == valid[r] for r, v in got.items() if not isinstance(v, str))
        else:
            assert got[runs] == expected, got


def test_seal2_is_what_the_generator_makes_and_the_spec_opens() -> None:
    assert vectors()["seal2"] == V["seal2"]
    key, store = bytes.fromhex(V["scope_key"]), bytes.fromhex(V["store_id"])
    small = V["seal2"]["small"]
    assert spec_open2(key, store, small["path"], bytes.fromhex(small["sealed"])) == \
        bytes.fromhex(small["plaintext"])
    big_v = V["seal2"]["stream"]
    big = crypto_stream.seal(key, store_id=store, scope_id=bytes.fromhex(V["scope_id"]),
                             path=big_v["path"], plaintext=stream_plaintext(),
                             salt=bytes.fromhex(V["seal2"]["salt"]))
    assert hashlib.sha256(big).hexdigest() == big_v["sealed_sha256"]
    assert len(big) == big_v["sealed_size"] and big.hex().startswith(big_v["sealed_head"])
    assert spec_open2(key, store, big_v["path"], big) == stream_plaintext()
    assert crypto_stream.open_sealed(key, big, store_id=store, path=big_v["path"]) == \
        stream_plaintext()


@pytest.mark.parametrize("case", V["seal2"]["must_fail"], ids=lambda c: c["op"])
def test_seal2_must_fail(case: dict[str, str]) -> None:
    key, store = bytes.fromhex(V["scope_key"]), bytes.fromhex(V["store_id"])
    big_v = V["seal2"]["stream"]
    big = crypto_stream.seal(key, store_id=store, scope_id=bytes.fromhex(V["scope_id"]),
                             path=big_v["path"], plaintext=stream_plaintext(),
                             salt=bytes.fromhex(V["seal2"]["salt"]))
    data, path = stream_case(big, case["op"])
    with pytest.raises(crypto.DecryptionError):
        crypto_stream.open_sealed(key, data, store_id=store, path=path)
    with pytest.raises(Exception):
        spec_open2(key, store, path, data)
