"""Generate spec/vectors/encryption.json: the published test keys of spec/encryption.md and
what every primitive makes of them (python -m ckptfs_conformance.gen_encryption)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from ckptfs.format import crypto

#: published test keys: NEVER use them for data
SCOPE_KEY = bytes(range(32))
STORE_ID = bytes.fromhex("00112233445566778899aabbccddeeff")
SCOPE_ID = bytes.fromhex("a0a1a2a3a4a5a6a7a8a9aaabacadaeaf")
NONCE = bytes.fromhex("000102030405060708090a0b")
OUT = Path(__file__).resolve().parent.parent / "spec" / "vectors" / "encryption.json"


def vectors() -> dict[str, Any]:
    path = "runs/chat-1/00000000000000000001"
    plain = b"\x00hello, sealed world"
    sealed = crypto.seal(SCOPE_KEY, store_id=STORE_ID, scope_id=SCOPE_ID, path=path,
                         plaintext=plain, nonce=NONCE)
    tampered = bytearray(sealed)
    tampered[-1] ^= 1
    return {
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


def main() -> int:
    OUT.write_text(json.dumps(vectors(), indent=1, sort_keys=True) + "\n")
    print(OUT)
    return 0


if __name__ == "__main__":
    sys.exit(main())
