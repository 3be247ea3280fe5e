"""Conformance vectors of spec/encryption.md 5.1's two layouts (issue 32 traces
``enc.seal.layouts``, ``enc.seal.whole-object`` and ``enc.seal.segments`` to them):

- layout 2 sealed under the published keys with a fixed salt (``enc-seal2``), opened whole
  (``enc-open``: one segment, three segments, one full-length final segment) and refused whole
  when a segment is dropped, cut, reordered, appended, moved or flipped;
- ranges of a three-segment object (``enc-open-range``): inside a segment, across two, past
  the end, beside a flipped segment (read: only the range's segments are opened) and inside it
  (refused), after the final segment was dropped (the range shortens) and inside a cut segment
  (a short segment that is not final: refused);
- the golden store of spec/vectors/encrypted-stores/valid (layout 1) resealed whole, and half,
  in layout 2: both render as the layout-1 store does (``enc-read``).

The writer half of ``enc.seal.layouts`` is the ``sealed-layout-2`` rule of
``encryption/write-scopes`` (enc_rules.py).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from ckptfs.format import crypto_stream as cs
from ckptfs_conformance.gen_encryption import SALT, SCOPE_ID, SCOPE_KEY, STORE_ID, STORES

CAT = "encryption"
ENC = ["encryption"]
READ = ["reader", "v2", "encryption"]
S, SEALED, HS = cs.SEGMENT, cs.SEALED_SEGMENT, cs.HEADER_SIZE
#: the three-segment object: two full segments and 100 bytes
THREE = 2 * S + 100
PATH = "packs/ab/" + "ab" * 32


def _plain(n: int, seed: str) -> bytes:
    from ckptfs_conformance.generate import prng

    return prng(seed, n)


def _sealed(plain: bytes, path: str = PATH) -> bytes:
    return cs.seal(SCOPE_KEY, store_id=STORE_ID, scope_id=SCOPE_ID, path=path, plaintext=plain,
                   salt=SALT)


def _seg(big: bytes, i: int) -> bytes:
    return big[HS + i * SEALED:HS + (i + 1) * SEALED]


def mutations(big: bytes) -> dict[str, tuple[str, bytes, str]]:
    """Name -> (why, bytes, path) of the three-segment object changed one way."""
    flipped = bytearray(big)
    flipped[HS + SEALED + 5] ^= 1
    return {
        "drop-last": ("the final segment dropped", big[:HS + 2 * SEALED], PATH),
        "cut-final": ("cut inside the final segment", big[:-1], PATH),
        "swap-0-1": ("segments 0 and 1 swapped", big[:HS] + _seg(big, 1) + _seg(big, 0)
                     + _seg(big, 2), PATH),
        "append-1": ("segment 1 appended after the final one", big + _seg(big, 1), PATH),
        "moved": ("the same bytes at another path", big, "packs/cd/" + "cd" * 32),
        "flip-1": ("one bit of segment 1 flipped", bytes(flipped), PATH),
        "cut-1": ("cut inside segment 1 (a short segment that is not final)",
                  big[:HS + SEALED + 1000], PATH),
    }


def vectors(g: Any, now: int) -> None:
    key, store, scope = SCOPE_KEY.hex(), STORE_ID.hex(), SCOPE_ID.hex()
    small_path, small = "runs/chat-1/00000000000000000001", b"\x00hello, sealed world"
    three, full = _plain(THREE, "enc-three"), _plain(S, "enc-full")
    big = _sealed(three)
    files3 = {"plain": {"prng": {"seed": "enc-three", "length": THREE}}}
    for name, path, plain, files in (
            ("seal2", small_path, small, {"plain": {"hex": small.hex()}}),
            ("seal2-segments", PATH, three, files3)):
        g.vector(CAT, name, "spec/encryption.md 5.1: the layout-2 sealed object of a plaintext "
                 "under the published keys and salt (segment nonces: index, final flag)",
                 ["enc-seal2", key, store, scope, path, SALT.hex(), "{file:plain}"],
                 {"output": _sealed(plain, path).hex(), "compare": "text"}, ENC, files)
    for name, why, path, plain in (
            ("open2", "one segment", small_path, small),
            ("open2-segments", "three segments, the last short and final", PATH, three),
            ("open2-full-final", "one full-length segment that is final", PATH, full)):
        g.vector(CAT, name, f"spec/encryption.md 5.1: a layout-2 object opens whole ({why})",
                 ["enc-open", key, store, path, "{file:sealed}"],
                 {"output": plain.hex(), "compare": "text"}, ENC,
                 {"sealed": {"hex": _sealed(plain, path).hex()}})
    muts = mutations(big)
    for name, (why, data, path) in muts.items():
        g.vector(CAT, f"open2-{name}", f"spec/encryption.md 5.1: a layout-2 object that MUST "
                 f"NOT open whole: {why}", ["enc-open", key, store, path, "{file:sealed}"],
                 {"error": "corrupt"}, ENC, {"sealed": {"hex": data.hex()}})
    _ranges(g, key, store, big, three, full, muts)
    _stores(g, now)


def _ranges(g: Any, key: str, store: str, big: bytes, three: bytes, full: bytes,
            muts: dict[str, tuple[str, bytes, str]]) -> None:
    full_sealed = _sealed(full)
    cases: list[tuple[str, str, bytes, int, int, bytes | None]] = [
        ("inside", "inside segment 1", big, 70000, 70100, three[70000:70100]),
        ("across", "across segments 0 and 1", big, S - 50, S + 50, three[S - 50:S + 50]),
        ("past-end", "past the final segment: it ends there", big, 2 * S + 50, 2 * S + 500,
         three[2 * S + 50:]),
        ("beside-flipped", "in segment 0 of an object whose segment 1 is flipped: only the "
         "range's segments are opened", muts["flip-1"][1], 100, 200, three[100:200]),
        ("in-flipped", "in the flipped segment 1", muts["flip-1"][1], 70000, 70100, None),
        ("final-dropped", "past segment 1 of an object whose final segment was dropped: the "
         "range shortens to segment 1's end (full length, not final)", muts["drop-last"][1],
         2 * S - 10, 2 * S + 10, three[2 * S - 10:2 * S]),
        ("in-cut", "in segment 1 cut short (a short segment MUST be final)", muts["cut-1"][1],
         70000, 70100, None),
        ("full-final", "past the end of one full-length final segment", full_sealed, S - 20,
         S + 20, full[S - 20:]),
    ]
    for name, why, data, start, end, want in cases:
        expect: dict[str, Any] = ({"error": "corrupt"} if want is None
                                  else {"output": want.hex(), "compare": "text"})
        g.vector(CAT, f"range2-{name}", f"spec/encryption.md 5.1: plaintext [{start}, {end}) of "
                 f"a layout-2 object: {why}",
                 ["enc-open-range", key, store, PATH, str(start), str(end), "{file:sealed}"],
                 expect, ENC, {"sealed": {"hex": data.hex()}})


def reseal(store: Path, ring: Path, every: int = 1) -> int:
    """Reseal every ``every``-th sealed object of ``store`` in layout 2 (salt: the first 12
    bytes of the BLAKE3 of its stored path, so the vectors are reproducible); the count."""
    from blake3 import blake3

    from ckptfs.runtime.scopes import keyring_storage
    from ckptfs.storage.encrypted import EncryptedStorage
    from ckptfs.storage.open import open_storage

    st = keyring_storage(open_storage(str(store)), str(ring))
    assert isinstance(st, EncryptedStorage)
    done = 0
    try:
        files = sorted(f for f in store.rglob("*") if f.is_file() and f.name != "ckptfs.cbor")
        for i, f in enumerate(files):
            rel = f.relative_to(store).as_posix()
            plain_path = st.back(rel)
            data = f.read_bytes()
            if plain_path is None or i % every or cs.layout(data) != 1:
                continue
            plain = st.open(plain_path, data, rel)
            sid = cs.scope_of(data)
            f.write_bytes(cs.seal(st.keyring.scope(sid).key, store_id=st.store_id,
                                  scope_id=sid, path=plain_path, plaintext=plain,
                                  salt=blake3(rel.encode()).digest()[:cs.SALT_SIZE]))
            done += 1
    finally:
        st.close()
    return done


def _stores(g: Any, now: int) -> None:
    import json

    from ckptfs_conformance.adapters.enc_ops import enc_read

    scratch = g.out / "_enc_layouts"

    def read(d: Path) -> Any:  # reading may write (leases): never into a vector
        shutil.copytree(d, scratch)
        try:
            return json.loads(enc_read(str(scratch), str(now)))
        finally:
            shutil.rmtree(scratch)

    want = read(STORES / "valid")
    for name, every, why in (("layout-2", 1, "every object"),
                             ("mixed-layouts", 2, "every other object")):
        d = g.store_dir(CAT, f"store-{name}")
        shutil.copytree(STORES / "valid", d)
        assert reseal(d / "store", d / "keyring", every) >= 1
        assert read(d) == want
        g.vector(CAT, f"store-{name}", f"spec/encryption.md 5.1: the valid golden store with "
                 f"{why} resealed in layout 2: it renders as the layout-1 store does",
                 ["enc-read", "{store}", str(now)], {"output": want, "compare": "json"}, READ,
                 store=f"store-{name}.store")
