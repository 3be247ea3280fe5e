"""Rotating a keyring's master key (spec/encryption.md 4.3): every scope key rewrapped into
the next generation's key shards, then ``keyring.cbor`` replaced (the one step that switches),
then the old generation deleted.

Reading is the cost: the old generation's shards (O(shards) GETs) and the per-scope objects
writers created since (one GET each), in batches (``BATCH`` paths a ``read_many``, ``WORKERS``
batches at a time: an object store overlaps the requests). Then every key is unwrapped and
wrapped again (a request each with AWS KMS: in the same batches) and the new generation is
written as a few shards (``keyring_shards``): ~N GETs for the first rotation of N scopes, the
per-scope objects then deleted by batched deletes, and O(shards) for the next ones.

Crash safety: nothing of the old generation is touched before the switch, and the new
generation's folders and master key file have a fresh random name per attempt, so a crash at
any point before the switch leaves the old keyring whole (every scope opens under the old
master key; a rerun starts a new generation and never meets its own half-written files), and
a crash after it leaves the new keyring whole (every scope was rewrapped before the switch;
what is left of the old generation is unused, and its deletion only reruns). A damaged shard
or entry is refused (``KeyringError``) before anything is written.

Concurrency: a writer creating a scope meanwhile writes it in the old generation and reads
``keyring.cbor`` afterwards (``follow``): before the switch, this rotation's listing after the
switch finds its scope and carries it; after it, the writer carries it. Until that carry is
done ``keyring.cbor`` names the ``previous`` generation, so the rerun after a crash in between
carries it (``_finish_previous``). A scope erased
meanwhile: the eraser, after its tombstone, deletes its key from every folder and shard it
lists; this rotation, after writing its shards, removes every scope the tombstones name from
them: one of the two sees the other.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ckptfs.errors import CkptfsError
from ckptfs.format import cbor
from ckptfs.storage import keyring_shards as shards
from ckptfs.format import crypto
from ckptfs.storage.key_providers import AwsKms, KeyProvider, LocalKek, UnwrapError
from ckptfs.storage.keyring import (
    _CHECK,
    ERASED,
    INDEXES,
    KEYRING_FILE,
    KeyringError,
    MASTER_FILE,
    SCOPES,
    Keyring,
    _master_from_file,
    _protect,
)

#: scope keys per batch (one read_many; the unwraps and wraps of its keys)
BATCH = 250
#: batches in flight at once
WORKERS = 8
Entries = dict[str, dict[str, Any]]


def _parallel(parts: list[list[str]], work: Callable[[list[str]], None]) -> None:
    if len(parts) <= 1:
        for p in parts:
            work(p)
        return
    with ThreadPoolExecutor(min(WORKERS, len(parts)), thread_name_prefix="ckptfs-rotate") as pool:
        for f in [pool.submit(work, p) for p in parts]:
            f.result()  # the first failure stops the rotation before the switch


def _batches(names: list[str]) -> list[list[str]]:
    return [names[i:i + BATCH] for i in range(0, len(names), BATCH)]


def _read_entries(ring: Keyring, folder: str, names: list[str], out: Entries,
                  lock: threading.Lock) -> None:
    """The per-scope objects ``folder/<name>`` into ``out`` (one that vanished: erased since
    the listing); a malformed one is refused."""
    def work(part: list[str]) -> None:
        got = ring.storage.read_many([f"{folder}/{n}" for n in part])
        for name, data in zip(part, got):
            if data is None:
                continue
            try:
                m = cbor.decode(data, what="scope key")
            except CkptfsError:
                m = None
            if not shards.check_entry(m) or len(name) != 32:
                raise KeyringError(f"{ring.url}: the wrapped key {folder}/{name} is damaged; "
                                   "restore the keyring from its backup (nothing was changed)")
            with lock:
                out[name] = m

    _parallel(_batches(names), work)


def rotate(ring: Keyring, passphrase: str | None, argon2: dict[str, int] | None,
           kms_key_id: str | None = None, kms: Any = None,
           progress: Callable[[int, int], None] | None = None) -> Keyring:
    """``Keyring.rotate`` (see the module docstring)."""
    st, old_dir, old_shards = ring.storage, ring._scopes, ring._shards
    if ring.per_subject and not kms_key_id:
        raise KeyringError(f"{ring.url} wraps subject keys with KMS keys of their own: rotate "
                           "it to another KMS key (kms_key_id=)")
    lock = threading.Lock()
    if ring._meta.get("previous") is not None:  # a rotation stopped after its switch
        _finish_previous(ring)
    # 1. read the old generation (validated: nothing is written before it all parses)
    old: Entries = {}
    shard_names = st.listing(old_shards).files if old_shards else []
    for name, data in zip(shard_names, st.read_many([f"{old_shards}/{n}" for n in shard_names])):
        if data is not None:
            old.update(shards.decode(data, f"{ring.url}/{old_shards}", name))
    seen = set(st.listing(old_dir).files)
    _read_entries(ring, old_dir, sorted(seen), old, lock)
    erased = set(st.listing(ERASED).files)
    todo = sorted(h for h in old if h not in erased)
    # 2. the next generation: its master key, every key rewrapped under it, its shards
    gen = ring.gen + 1
    tag = os.urandom(4).hex()  # a rerun after a crash never meets its own half-written files
    new_dir, new_shards = f"{SCOPES}-{gen}-{tag}", f"{shards.SHARDS}-{gen}-{tag}"
    new_master, k = f"master-{gen}-{tag}.key", shards.prefix_len(len(todo))
    meta = {key: v for key, v in ring._meta.items()
            if key not in ("kdf", "check", "index", "gen", "master", "scopes", "indexes",
                           "shards", "shard_prefix", "previous")}
    meta.update(gen=gen, scopes=new_dir, shards=new_shards, shard_prefix=k, version=2)
    wrapper = _protect(st, meta, passphrase, argon2, kms_key_id, kms, new_master)
    if ring.per_subject:
        meta["kdf"]["per_subject"] = True
    new: Entries = {}
    count = [0]

    def rewrap(part: list[str]) -> None:
        got = {h: _rewrapped(ring, wrapper, h, old[h]) for h in part}
        with lock:
            new.update(got)
            count[0] += len(part)
            if progress is not None:
                progress(count[0], len(todo))

    _parallel(_batches(todo), rewrap)
    grouped: dict[str, Entries] = {}
    for h, e in new.items():
        grouped.setdefault(shards.shard_of(h, k), {})[h] = e
    st.write_many([(f"{new_shards}/{n}", shards.encode(es)) for n, es in sorted(grouped.items())])
    # imported name indexes (``import_names``): rewrapped into the next generation's folder
    # (run the rotation while no copy between keyrings runs)
    old_idx, new_idx = ring._indexes, f"{INDEXES}-{gen}-{tag}"
    for f in st.listing(old_idx).files:
        m = cbor.decode(st.read(f"{old_idx}/{f}"), what="keyring index")
        ad = ring._index_ad(bytes.fromhex(f))
        st.write(f"{new_idx}/{f}",
                 cbor.encode({"key": wrapper.wrap(ring._wrapper.unwrap(m["key"], ad), ad)}))
    meta["indexes"] = new_idx
    meta["check"] = wrapper.wrap(_CHECK, ring.id)
    meta["index"] = wrapper.wrap(ring._index, ring.id + b"index")
    # until step 4 is done, where the old generation's scopes are and what opens them: a rerun
    # after a crash carries what writers created there meanwhile (``_finish_previous``)
    meta["previous"] = {"scopes": old_dir, **({"kdf": ring._meta["kdf"]} if "kdf" in ring._meta
                                              else {"master": ring._master_path})}
    st.replace(KEYRING_FILE, cbor.encode(meta))  # 3. the switch
    # 4. a scope a writer created in the old generation meanwhile is carried over (into a
    # per-scope object of the new one); a scope erased meanwhile loses its rewrapped key
    late = sorted(set(st.listing(old_dir).files) - seen)
    seen.update(late)
    carried: Entries = {}
    _read_entries(ring, old_dir, late, carried, lock)
    st.write_many([(f"{new_dir}/{h}", cbor.encode(_rewrapped(ring, wrapper, h, e)))
                   for h, e in sorted(carried.items())])
    erased = set(st.listing(ERASED).files)
    for n in sorted({shards.shard_of(h, k) for h in erased if h in new}):
        shards.explode(st, new_shards, n, grouped[n], ERASED)
    st.delete_many([f"{new_dir}/{h}" for h in sorted(erased & set(carried))])
    del meta["previous"]
    st.replace(KEYRING_FILE, cbor.encode(meta))  # the old generation is no longer needed
    # 5. the old generation
    st.delete_many([f"{old_dir}/{n}" for n in sorted(seen)])
    if old_shards:
        st.delete_many([f"{old_shards}/{n}" for n in st.listing(old_shards).files])
    st.delete_many([f"{old_idx}/{n}" for n in st.listing(old_idx).files])
    if "kdf" not in ring._meta:
        st.delete(ring._master_path)
    return Keyring(st, passphrase=passphrase, kms=kms)


def _finish_previous(ring: Keyring) -> None:
    """Step 4 of a rotation that stopped after its switch (``keyring.cbor`` still names the
    ``previous`` generation): carry the scopes writers created in its folder that this
    generation lacks, under the previous key (its key file, or its KMS key; a previous
    passphrase is not at hand: refused), then delete that folder and key file."""
    st, prev = ring.storage, ring._meta["previous"]
    folder = prev.get("scopes") if isinstance(prev, dict) else None
    if not isinstance(folder, str) or not folder.startswith(SCOPES) or "/" in folder:
        raise KeyringError(f"{ring.url}: {KEYRING_FILE} is damaged (its previous generation)")
    missing = []
    for h in sorted(st.listing(folder).files):
        try:
            ring._entry(bytes.fromhex(h))
        except FileNotFoundError:
            missing.append(h)
    erased = set(st.listing(ERASED).files)
    missing = [h for h in missing if h not in erased]
    if missing:
        kdf, master = prev.get("kdf"), prev.get("master")
        if isinstance(kdf, dict) and kdf.get("algorithm") == "aws-kms":
            old: KeyProvider = AwsKms(str(kdf.get("key_id")), ring._opened[1])
        elif isinstance(master, str) and master.startswith("master") and "/" not in master:
            old = LocalKek(crypto.derive(_master_from_file(st.read(master), ring.url),
                                         b"ckptfs-keyring-1 kek"))
        else:
            raise KeyringError(f"{ring.url}: a rotation to this key stopped after its switch, "
                               f"and {len(missing)} scope key(s) created during it are wrapped "
                               "by the previous passphrase only; restore the keyring from a "
                               "backup made before that rotation and rotate again")
        got: Entries = {}
        _read_entries(ring, folder, missing, got, threading.Lock())
        out = []
        for h, m in got.items():
            if "kms_key" not in m:
                ad = ring._wrap_ad(bytes.fromhex(h), m["kind"])
                m = {"kind": m["kind"], "key": ring._wrapper.wrap(old.unwrap(m["key"], ad), ad)}
            out.append((f"{ring._scopes}/{h}", cbor.encode(m)))
        st.write_many(out)
        again = set(st.listing(ERASED).files)  # erased meanwhile: not carried after all
        st.delete_many([f"{ring._scopes}/{h}" for h in sorted(got) if h in again])
    st.delete_many([f"{folder}/{h}" for h in st.listing(folder).files])
    master = prev.get("master")
    if isinstance(master, str) and master.startswith("master") and "/" not in master:
        st.delete(master)


def follow(ring: Keyring, sid: bytes, kind: str, key: bytes, entry: dict[str, Any]) -> None:
    """After writing a new scope's key: if a rotation switched the keyring meanwhile, the
    rotation may not have seen it (it carries the scopes its listing after the switch
    finds), so put it into the new generation here, under the new key, and go on in that
    generation. Either the rotation lists the old folder after this write, or this read
    sees its switch: no scope created during a rotation is lost."""
    while True:
        meta = cbor.decode(ring.storage.read(KEYRING_FILE), what="keyring")
        if not isinstance(meta, dict) or meta.get("gen", 0) == ring.gen:
            return
        try:
            new = Keyring(ring.storage, passphrase=ring._opened[0], kms=ring._opened[1])
        except KeyringError:
            raise KeyringError(f"{ring.url}: the keyring's master key was rotated while a "
                               "key scope was being created; open the keyring again with "
                               "its new key and retry") from None
        again = dict(entry)
        if "kms_key" not in entry:
            again["key"] = new._wrapper.wrap(key, new._wrap_ad(sid, kind))
        try:
            ring.storage.create(f"{new._scopes}/{sid.hex()}", cbor.encode(again))
        except FileExistsError:
            pass  # the rotation carried it
        cache = ring._cache
        ring.__dict__.update(new.__dict__)
        ring._cache = cache


def _rewrapped(ring: Keyring, wrapper: KeyProvider, name: str,
               m: dict[str, Any]) -> dict[str, Any]:
    """The entry ``m`` of scope ``name`` wrapped under ``wrapper``."""
    if "kms_key" in m:  # wrapped by the scope's own KMS key: carried as it is
        return m
    sid = bytes.fromhex(name)
    ad = ring._wrap_ad(sid, m["kind"])
    try:
        key = ring._wrapper.unwrap(m["key"], ad)
    except (UnwrapError, KeyError, TypeError, ValueError, CkptfsError):
        raise KeyringError(f"{ring.url}: the wrapped key of scope {name} does not open under "
                           "the current master key (damaged or altered); restore the keyring "
                           "from its backup (nothing was switched)") from None
    return {"kind": m["kind"], "key": wrapper.wrap(key, ad)}


__all__ = ["rotate", "follow", "BATCH", "WORKERS", "MASTER_FILE"]
