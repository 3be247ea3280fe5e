"""Generate spec/vectors/encryption.json: the published test keys of spec/encryption.md and
what every primitive makes of them (python -m ckptfs_conformance.gen_encryption)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from ckptfs.format import crypto, crypto_stream

#: published test keys: NEVER use them for data
SCOPE_KEY = bytes(range(32))
STORE_ID = bytes.fromhex("00112233445566778899aabbccddeeff")
SCOPE_ID = bytes.fromhex("a0a1a2a3a4a5a6a7a8a9aaabacadaeaf")
NONCE = bytes.fromhex("000102030405060708090a0b")
SALT = bytes.fromhex("b0b1b2b3b4b5b6b7b8b9babb")
#: the plaintext of the segmented vector: byte i is i mod 251 (three segments, the last short)
STREAM_SIZE = 150000
OUT = Path(__file__).resolve().parent.parent / "spec" / "vectors" / "encryption.json"


def vectors() -> dict[str, Any]:
    path = "runs/chat-1/00000000000000000001"
    plain = b"\x00hello, sealed world"
    sealed = crypto.seal(SCOPE_KEY, store_id=STORE_ID, scope_id=SCOPE_ID, path=path,
                         plaintext=plain, nonce=NONCE)
    tampered = bytearray(sealed)
    tampered[-1] ^= 1
    return {
        "seal2": seal2(),
        "note": "published test keys of spec/encryption.md section 9; never use them for data",
        "scope_key": SCOPE_KEY.hex(), "store_id": STORE_ID.hex(), "scope_id": SCOPE_ID.hex(),
        "subkeys": {label.decode(): crypto.derive(SCOPE_KEY, label, size).hex()
                    for label, size in ((crypto.CONTENT, 32), (crypto.NAMES, 64),
                                        (crypto.CHUNK_IDS, 32), (crypto.GEAR, 32))},
        "seal": {"path": path, "nonce": NONCE.hex(), "plaintext": plain.hex(),
                 "associated_data": crypto.associated_data(STORE_ID, SCOPE_ID, "runs",
                                                           path).hex(),
                 "sealed": sealed.hex()},
        "must_fail": [
            {"why": "tampered: last tag bit flipped", "path": path,
             "sealed": bytes(tampered).hex()},
            {"why": "moved: the same bytes at another path", "path":
             "runs/chat-1/00000000000000000002", "sealed": sealed.hex()},
            {"why": "planted: a plain framed object", "path": path,
             "sealed": (b"\x00" + plain).hex()},
        ],
        "names": [{"context": ctx, "name": name,
                   "segment": crypto.encrypt_name(SCOPE_KEY, name, context=ctx)}
                  for ctx, name in (("run", "chat-1"), ("run", "alice@example.com"),
                                    ("packs", "ab" * 32))],
    }


def stream_plaintext() -> bytes:
    return bytes(i % 251 for i in range(STREAM_SIZE))


def seal2() -> dict[str, Any]:
    """Layout 2 (segmented, spec/encryption.md 5.1): one object of one segment (given whole)
    and one of three (given by its object key, its length, its segment tags and its SHA-256;
    the plaintext is ``stream_plaintext``), and operations on the three-segment object that
    MUST make it fail to open whole."""
    import hashlib

    small_path = "runs/chat-1/00000000000000000001"
    small = crypto_stream.seal(SCOPE_KEY, store_id=STORE_ID, scope_id=SCOPE_ID,
                               path=small_path, plaintext=b"\x00hello, sealed world", salt=SALT)
    path = "packs/ab/" + "ab" * 32
    big = crypto_stream.seal(SCOPE_KEY, store_id=STORE_ID, scope_id=SCOPE_ID, path=path,
                             plaintext=stream_plaintext(), salt=SALT)
    hs, seg = crypto_stream.HEADER_SIZE, crypto_stream.SEALED_SEGMENT
    tags = [big[min(hs + (i + 1) * seg, len(big)) - crypto.TAG_SIZE:
                min(hs + (i + 1) * seg, len(big))].hex() for i in range(3)]
    return {
        "segment_size": crypto_stream.SEGMENT, "salt": SALT.hex(),
        "object_key": crypto_stream.object_key(SCOPE_KEY, SALT).hex(),
        "small": {"path": small_path, "plaintext": b"\x00hello, sealed world".hex(),
                  "associated_data": crypto_stream.associated_data(
                      STORE_ID, SCOPE_ID, "runs", small_path).hex(),
                  "sealed": small.hex()},
        "stream": {"path": path, "plaintext": f"byte i = i mod 251, {STREAM_SIZE} bytes",
                   "associated_data": crypto_stream.associated_data(
                       STORE_ID, SCOPE_ID, "packs", path).hex(),
                   "sealed_size": len(big), "sealed_head": big[:hs + 16].hex(),
                   "segment_tags": tags, "sealed_sha256": hashlib.sha256(big).hexdigest()},
        "must_fail": [
            {"why": "truncated: the final segment dropped", "op": "drop-last"},
            {"why": "truncated: cut inside the final segment", "op": "cut-1"},
            {"why": "reordered: segments 0 and 1 swapped", "op": "swap-0-1"},
            {"why": "extended: segment 1 appended after the final one", "op": "append-1"},
            {"why": "moved: the same bytes at another path", "op": "move"},
            {"why": "tampered: one bit of segment 1 flipped", "op": "flip-1"},
        ],
    }


def stream_case(big: bytes, op: str) -> tuple[bytes, str]:
    """A ``must_fail`` operation of ``seal2`` applied to the three-segment object: the bytes
    and the path to open them at."""
    hs, seg = crypto_stream.HEADER_SIZE, crypto_stream.SEALED_SEGMENT
    path = "packs/ab/" + "ab" * 32
    s0, s1, s2 = big[hs:hs + seg], big[hs + seg:hs + 2 * seg], big[hs + 2 * seg:]
    head = big[:hs]
    if op == "drop-last":
        return head + s0 + s1, path
    if op == "cut-1":
        return big[:-1], path
    if op == "swap-0-1":
        return head + s1 + s0 + s2, path
    if op == "append-1":
        return big + s1, path
    if op == "move":
        return big, "packs/cd/" + "cd" * 32
    flipped = bytearray(big)
    flipped[hs + seg + 5] ^= 1
    return bytes(flipped), path


def main() -> int:
    OUT.write_text(json.dumps(vectors(), indent=1, sort_keys=True) + "\n")
    print(OUT)
    if "--stores" in sys.argv:
        stores()
        print(STORES)
    return 0



# -- encrypted store vectors: real stores with their (published) keyrings -------------------------
STORES = Path(__file__).resolve().parent.parent / "spec" / "vectors" / "encrypted-stores"


def stores() -> dict[str, Any]:
    """Write spec/vectors/encrypted-stores/: one valid store with its keyring, and variants
    (tampered, swapped, wrong scope, erased scope, planted, another store's keyring); return
    the expectations (``expect.json``)."""
    import shutil

    import ckptfs
    from ckptfs.ops.erase_scope import erase_subject

    shutil.rmtree(STORES, ignore_errors=True)
    STORES.mkdir(parents=True)
    base = STORES / "valid"
    st = ckptfs.open_store(str(base / "store"), keyring=str(base / "keyring"),
                           clock=lambda: 1700000000000)
    st.start_run("chat-1", subject="user-42").checkpoint({"msg": "hello", "n": 1})
    st.start_run("chat-2").checkpoint({"msg": "other", "n": 2})
    expect: dict[str, Any] = {"valid": {"chat-1": {"msg": "hello", "n": 1},
                                        "chat-2": {"msg": "other", "n": 2}}}

    def variant(name: str) -> Path:
        shutil.copytree(base, STORES / name)
        return STORES / name

    def records(root: Path) -> dict[str, list[Path]]:
        out: dict[str, list[Path]] = {}
        for p in sorted((root / "store" / "runs").rglob("*")):
            if p.is_file() and p.name.isdigit():
                out.setdefault(p.parent.name, []).append(p)
        return out

    v = variant("tampered")
    rec = sorted(records(v).values())[0][0]
    data = bytearray(rec.read_bytes())
    data[-1] ^= 1
    rec.write_bytes(bytes(data))
    v = variant("swapped")
    a, b = [r[0] for r in records(v).values()]
    da, db = a.read_bytes(), b.read_bytes()
    a.write_bytes(db)
    b.write_bytes(da)
    v = variant("planted")
    rec = sorted(records(v).values())[0][0]
    rec.write_bytes(b"\x00" + rec.read_bytes()[32:])
    v = variant("wrong-keyring")
    other = ckptfs.open_store(str(STORES / "_other"), keyring=str(v / "keyring-other"))
    other.start_run("x").checkpoint({})
    shutil.rmtree(v / "keyring")
    (v / "keyring-other").rename(v / "keyring")
    shutil.rmtree(STORES / "_other")
    v = variant("erased-scope")
    # erase through a scratch copy of the store: this variant keeps the store as copied
    # before the erase, with the keyring as it is after it
    shutil.copytree(v / "store", STORES / "_scratch")
    erase_subject(ckptfs.open_store(str(STORES / "_scratch"), keyring=str(v / "keyring"))
                  .storage, "user-42")
    shutil.rmtree(STORES / "_scratch")
    # a keyring after a rotation (issue 33): its scope keys in key shards, and one scope (a
    # run started after it) in its own object; and one with a damaged key shard
    from ckptfs.storage.keyring import Keyring
    from ckptfs.storage.open import open_storage

    v = variant("rotated")
    Keyring(open_storage(str(v / "keyring"))).rotate()
    ckptfs.open_store(str(v / "store"), keyring=str(v / "keyring"),
                      clock=lambda: 1700000000000).start_run("chat-3").checkpoint({"n": 3})
    v = variant("rotated-shard-damaged")
    shutil.rmtree(v)
    shutil.copytree(STORES / "rotated", v)
    for shard in sorted(next(v.glob("keyring/shards-*")).iterdir()):
        shard.write_bytes(b"\xa1fscopes\x01")  # {"scopes": 1}: not a map of entries
    expect.update({
        "rotated": {"chat-1": {"msg": "hello", "n": 1}, "chat-2": {"msg": "other", "n": 2},
                    "chat-3": {"n": 3}},
        "rotated-shard-damaged": {"*": "keyring"},
        "tampered": {"chat-1|chat-2": "corrupt"}, "swapped": {"chat-1": "corrupt",
                                                            "chat-2": "corrupt"},
        "planted": {"chat-1|chat-2": "corrupt"}, "wrong-keyring": {"*": "keyring"},
        "erased-scope": {"chat-1": "erased", "chat-2": {"msg": "other", "n": 2}},
    })
    (STORES / "expect.json").write_text(json.dumps(expect, indent=1, sort_keys=True) + "\n")
    return expect


if __name__ == "__main__":
    sys.exit(main())
