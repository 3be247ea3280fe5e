"""The adapter requests of capability ``encryption`` (spec/encryption.md; ckptfs_conformance/
README.md, "Encrypted stores"): the primitives with published test keys, and reading encrypted
stores with their keyrings. ckptfs's adapter adds them to its ``OPS``."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ckptfs.format import crypto, crypto_stream
from ckptfs.format.cdc import ChunkerParams, cut_lengths


def _key(hexkey: str) -> bytes:
    return bytes.fromhex(hexkey)


def _seed(scope_key: bytes) -> int:
    """The gear seed of a scope (spec/encryption.md 4.1)."""
    return (int.from_bytes(crypto.derive(scope_key, crypto.GEAR, 32)[:8], "big") >> 1) or 1


def enc_cut(key: str, mn: str, avg: str, mx: str, nc: str, f: str) -> str:
    """The seeded chunker's chunk lengths of FILE (spec/encryption.md 4.1)."""
    p = ChunkerParams(min_size=int(mn), avg_size=int(avg), max_size=int(mx),
                      normalization=int(nc), seed=_seed(_key(key)))
    return json.dumps(cut_lengths(Path(f).read_bytes(), p))


def _open_dir(folder: str) -> tuple[str, str | None]:
    """A vector's folder: ``store/`` and, when present, ``keyring/``."""
    ring = Path(folder) / "keyring"
    return str(Path(folder) / "store"), (str(ring) if ring.is_dir() else None)


def enc_read(folder: str, now: str) -> str:
    from ckptfs_conformance.render import canonical_json, render_store

    store, ring = _open_dir(folder)
    return canonical_json(render_store(store, int(now), keyring=ring or ""))


def enc_snapshot(folder: str, now: str, ref: str) -> str:
    from ckptfs_conformance.render import canonical_json, render_ref

    store, ring = _open_dir(folder)
    return canonical_json(render_ref(store, ref, int(now), keyring=ring or ""))


def enc_open_range(key: str, store: str, path: str, start: str, end: str, f: str) -> str:
    """Plaintext ``[START, END)`` of the sealed object FILE at PATH (spec/encryption.md 5.1):
    a layout-2 object opens only the segments that hold the range, as a store's range reads
    do (``EncryptedStorage.read_range``); a layout-1 object opens whole."""
    data, s, e = Path(f).read_bytes(), int(start), int(end)
    sid = bytes.fromhex(store)
    if "enc-range-whole" in BROKEN or crypto_stream.layout(data) == 1:
        return crypto_stream.open_sealed(_key(key), data, store_id=sid, path=path)[s:e].hex()
    first, a, b = crypto_stream.span(s, e)
    opener = crypto_stream.Opener(_key(key), data[:crypto_stream.HEADER_SIZE], store_id=sid,
                                  path=path)
    return opener.open_range(first, data[a:b], s, e).hex()


#: broken writers of ckptfs's adapter (``--break enc-writer-plaintext``, adapters/
#: spec32b_breaks.py): the suite must catch them
BROKEN: set[str] = set()


def _write(case: str, folder: str) -> str:
    """``enc-write CASE DIR``: the writer case into an encrypted store ``DIR/store`` whose new
    keyring is ``DIR/keyring``."""
    from ckptfs_conformance.adapters.case_writer import write_case

    if "enc-writer-plaintext" in BROKEN:  # a plaintext store, the keyring never made
        return write_case(case, str(Path(folder) / "store"))
    return write_case(case, str(Path(folder) / "store"), keyring=str(Path(folder) / "keyring"))


ENC_OPS: dict[str, Callable[..., Any]] = {
    "enc-derive": lambda key, label, size: crypto.derive(_key(key), label.encode(),
                                                         int(size)).hex(),
    "enc-seal": lambda key, store, scope, path, nonce, f: crypto.seal(
        _key(key), store_id=bytes.fromhex(store), scope_id=bytes.fromhex(scope), path=path,
        plaintext=Path(f).read_bytes(), nonce=bytes.fromhex(nonce)).hex(),
    "enc-seal2": lambda key, store, scope, path, salt, f: crypto_stream.seal(
        _key(key), store_id=bytes.fromhex(store), scope_id=bytes.fromhex(scope), path=path,
        plaintext=Path(f).read_bytes(), salt=bytes.fromhex(salt)).hex(),
    "enc-open-range": enc_open_range,
    "enc-open": lambda key, store, path, f: crypto_stream.open_sealed(
        _key(key), Path(f).read_bytes(), store_id=bytes.fromhex(store), path=path).hex(),
    "enc-name": lambda key, context, name: crypto.encrypt_name(_key(key), name,
                                                               context=context),
    "enc-stone-name": lambda key, run: crypto.stone_name(_key(key), run),
    "enc-cut": enc_cut,
    "enc-read": enc_read,
    "enc-write": lambda case, folder: _write(case, folder),
    "enc-snapshot": enc_snapshot,
}
