"""Rotating a keyring's master key (spec/encryption.md 4.3): every scope key rewrapped into
the next generation's folder, then ``keyring.cbor`` replaced (the one step that switches),
then the old generation deleted.

The rewrap of one scope is independent of every other, so it runs in batches (``BATCH``
scopes: one ``read_many`` of their wrapped keys, the unwrap and wrap of each, one
``write_many``), ``WORKERS`` batches at a time: an object store overlaps the requests of a
batch, and batches overlap each other's unwraps (a request each with AWS KMS) and writes.

Crash safety: nothing of the old generation is touched before the switch, and the new
generation's folder and master key file have a fresh random name per attempt, so a crash at
any point before the switch leaves the old keyring whole (every scope opens under the old
master key; a rerun starts a new generation folder and never meets its own half-written
files), and a crash after it leaves the new keyring whole (every scope was rewrapped before
the switch; what is left of the old generation is unused and deleted by hand or by the next
rotation's cleanup of folders it does not name).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ckptfs.format import cbor
from ckptfs.storage.key_providers import KeyProvider
from ckptfs.storage.keyring import (
    _CHECK,
    ERASED,
    INDEXES,
    KEYRING_FILE,
    KeyringError,
    MASTER_FILE,
    SCOPES,
    Keyring,
    _protect,
)

#: scopes per batch (one read_many, one write_many)
BATCH = 250
#: batches in flight at once
WORKERS = 8


def rotate(ring: Keyring, passphrase: str | None, argon2: dict[str, int] | None,
           kms_key_id: str | None = None, kms: Any = None,
           progress: Callable[[int, int], None] | None = None) -> Keyring:
    """``Keyring.rotate`` (see the module docstring)."""
    st, old_dir = ring.storage, ring._scopes
    gen = ring.gen + 1
    # a fresh name per attempt: a rerun after a crash never meets its own half-written files
    tag = os.urandom(4).hex()
    new_dir, new_master = f"{SCOPES}-{gen}-{tag}", f"master-{gen}-{tag}.key"
    meta = {k: v for k, v in ring._meta.items()
            if k not in ("kdf", "check", "index", "gen", "master", "scopes", "indexes")}
    meta.update(gen=gen, scopes=new_dir)
    if ring.per_subject and not kms_key_id:
        raise KeyringError(f"{ring.url} wraps subject keys with KMS keys of their own: rotate "
                           "it to another KMS key (kms_key_id=)")
    wrapper = _protect(st, meta, passphrase, argon2, kms_key_id, kms, new_master)
    if ring.per_subject:
        meta["kdf"]["per_subject"] = True
    done: set[str] = set()
    seen: set[str] = set()
    lock = threading.Lock()
    count = [0, 0]

    def batch(names: list[str]) -> None:
        out = []
        for name, data in zip(names, st.read_many([f"{old_dir}/{n}" for n in names])):
            if data is None:  # erased since the listing
                continue
            out.append((f"{new_dir}/{name}", _rewrapped(ring, wrapper, name, data)))
        st.write_many(out)  # a fresh folder: plain writes, overlapped by object stores
        with lock:
            done.update(names)
            count[0] += len(names)
            if progress is not None:
                progress(count[0], count[1])

    def rewrap() -> None:
        erased = set(st.listing(ERASED).files)
        listed = st.listing(old_dir).files
        seen.update(listed)
        todo = [n for n in listed if n not in erased and n not in done]
        count[1] += len(todo)
        parts = [todo[i:i + BATCH] for i in range(0, len(todo), BATCH)]
        if len(parts) <= 1:
            for p in parts:
                batch(p)
            return
        with ThreadPoolExecutor(min(WORKERS, len(parts)),
                                thread_name_prefix="ckptfs-rotate") as pool:
            for f in [pool.submit(batch, p) for p in parts]:
                f.result()  # the first failure stops the rotation before the switch

    rewrap()
    # imported name indexes (``import_names``): rewrapped into the next generation's folder,
    # like the scope keys (run the rotation while no copy between keyrings runs)
    old_idx, new_idx = ring._indexes, f"{INDEXES}-{gen}-{tag}"
    for f in st.listing(old_idx).files:
        m = cbor.decode(st.read(f"{old_idx}/{f}"), what="keyring index")
        ad = ring._index_ad(bytes.fromhex(f))
        st.write(f"{new_idx}/{f}",
                 cbor.encode({"key": wrapper.wrap(ring._wrapper.unwrap(m["key"], ad), ad)}))
    meta["indexes"] = new_idx
    meta["check"] = wrapper.wrap(_CHECK, ring.id)
    meta["index"] = wrapper.wrap(ring._index, ring.id + b"index")
    st.replace(KEYRING_FILE, cbor.encode(meta))  # the switch
    # a scope a writer created in the old generation meanwhile is carried over; a scope erased
    # meanwhile loses its rewrapped key too
    rewrap()
    st.delete_many([f"{new_dir}/{n}" for n in st.listing(ERASED).files])
    st.delete_many([f"{old_dir}/{n}" for n in sorted(seen)])
    st.delete_many([f"{old_idx}/{n}" for n in st.listing(old_idx).files])
    if "kdf" not in ring._meta:
        st.delete(ring._master_path)
    return Keyring(st, passphrase=passphrase, kms=kms)


def _rewrapped(ring: Keyring, wrapper: KeyProvider, name: str, data: bytes) -> bytes:
    """The entry of scope ``name`` (its old entry ``data``) wrapped under ``wrapper``."""
    sid = bytes.fromhex(name)
    m = cbor.decode(data, what="scope key")
    if "kms_key" in m:  # wrapped by the scope's own KMS key: carried as it is
        return data
    key = ring._wrapper.unwrap(m["key"], ring._wrap_ad(sid, m["kind"]))
    return cbor.encode({"kind": m["kind"], "key": wrapper.wrap(key,
                                                             ring._wrap_ad(sid, m["kind"]))})


__all__ = ["rotate", "BATCH", "WORKERS", "MASTER_FILE"]
