"""Key shards: where a rotation puts the wrapped scope keys it rewraps (spec/encryption.md 4.3).

A writer creates a scope with one object of its own, ``scopes…/<scope id hex>`` (one create-only
PUT, no contention between writers). A rotation reads those and writes the rewrapped keys into
a few consolidated *shards*, ``shards-<gen>-<tag>/<first k hex digits of the scope id>``, each
``{"scopes": {scope id hex: entry}}``, then deletes the per-scope objects in batches: the first
rotation of N scopes costs ~N GETs (not N GETs and N PUTs) and the next ones O(shards).

Shards are never added to or edited in place: a rotation writes them once, in a fresh folder,
before its switch. Erasing a scope that a shard holds *explodes* that shard: its other entries
are written back as per-scope objects of the shard's generation, then the shard is deleted
(two erasers of one shard cannot lose each other's removal, as two read-modify-writes of it
could). Every writer of key material (the explode, a rotation) looks at the tombstones after
it wrote and removes what it wrote of an erased scope; every eraser, after its tombstone, looks
at every object of the keyring: either the writer sees the tombstone or the eraser sees the
write, so no wrapped key of an erased scope survives.

A reader looks in the shard before the per-scope object: an explode writes the per-scope
objects before it deletes the shard, so a scope is always in one of them.
"""

from __future__ import annotations

import string
from typing import TYPE_CHECKING, Any

from ckptfs.errors import CkptfsError, KeyringError
from ckptfs.format import cbor
from ckptfs.format import crypto

if TYPE_CHECKING:
    from ckptfs.storage.base import Storage

SHARDS = "shards"
#: entries a shard holds at most on average (a rotation picks the prefix length by it)
PER_SHARD = 64
#: prefix lengths (hex digits of the scope id) a shard name may have: 16 to 4096 shards
PREFIXES = (1, 2, 3)
KINDS = ("store", "run", "subject", "shared")
_HEX = set(string.hexdigits.lower()) - set("ABCDEF")


def prefix_len(scopes: int) -> int:
    """The shard name length for a keyring of ``scopes`` scopes: the shortest that keeps
    shards at ``PER_SHARD`` entries or fewer on average (16 shards at least, 4096 at most)."""
    for k in PREFIXES:
        if scopes <= PER_SHARD * 16 ** k:
            return k
    return PREFIXES[-1]


def shard_of(sid_hex: str, k: int) -> str:
    return sid_hex[:k]


def scopes_dir_of(shard_dir: str) -> str:
    """The folder of per-scope objects of a shard folder's generation (same gen and tag)."""
    return "scopes" + shard_dir[len(SHARDS):]


def is_shard_dir(name: str) -> bool:
    return name.startswith(SHARDS + "-")


def check_entry(entry: Any) -> bool:
    """Whether ``entry`` is a well-formed wrapped scope key (CDDL ``enc-scope-key``)."""
    return (isinstance(entry, dict) and entry.get("kind") in KINDS
            and isinstance(entry.get("key"), bytes)
            and isinstance(entry.get("kms_key", ""), str)
            and set(entry) <= {"kind", "key", "kms_key"})


def encode(entries: dict[str, dict[str, Any]]) -> bytes:
    return cbor.encode({"scopes": entries})


def decode(data: bytes, where: str, name: str) -> dict[str, dict[str, Any]]:
    """A shard's entries (scope id hex -> entry); KeyringError when it is malformed: not a
    map of scope ids of this shard's prefix to well-formed entries."""
    try:
        m = cbor.decode(data, what="key shard")
    except CkptfsError:
        m = None
    got = m.get("scopes") if isinstance(m, dict) and set(m) == {"scopes"} else None
    if (not isinstance(got, dict) or not all(
            isinstance(h, str) and len(h) == 2 * crypto.SCOPE_ID_SIZE and set(h) <= _HEX
            and h.startswith(name) and check_entry(e) for h, e in got.items())):
        raise KeyringError(f"{where}: the key shard {name} is damaged or not a key shard; "
                           "restore the keyring from its backup (nothing was changed)")
    return got


def read(st: Storage, folder: str, name: str, url: str) -> dict[str, dict[str, Any]] | None:
    """The entries of shard ``folder/name``, None when there is no such shard."""
    if len(name) not in PREFIXES or not set(name) <= _HEX:
        return None
    try:
        data = st.read(f"{folder}/{name}")
    except FileNotFoundError:
        return None
    return decode(data, f"{url}/{folder}", name)


def cached(st: Storage, folder: str, k: int, cache: dict[str, dict[str, dict[str, Any]] | None],
           sid_hex: str, url: str) -> dict[str, Any] | None:
    """The entry of ``sid_hex`` in its shard of ``folder`` (read once into ``cache``), or
    None when the shard does not hold it."""
    name = shard_of(sid_hex, k)
    if name not in cache:
        cache[name] = read(st, folder, name, url)
    got = cache[name]
    return None if got is None else got.get(sid_hex)


def holding(st: Storage, folders: list[str], sid_hex: str,
            url: str) -> list[tuple[str, str, dict[str, dict[str, Any]]]]:
    """Every shard (folder, name, entries) of these shard folders that holds ``sid_hex``."""
    out = []
    for folder in folders:
        for name in st.listing(folder).files:
            if not sid_hex.startswith(name):
                continue
            entries = read(st, folder, name, url)
            if entries is not None and sid_hex in entries:
                out.append((folder, name, entries))
    return out


def explode(st: Storage, folder: str, name: str, entries: dict[str, dict[str, Any]],
            erased_dir: str) -> None:
    """Remove shard ``folder/name``: its entries of scopes not erased become per-scope objects
    of its generation (written first: a reader looks in the shard, then at the object), then
    the shard is deleted, then what was written of a scope erased meanwhile is deleted."""
    target = scopes_dir_of(folder)
    erased = set(st.listing(erased_dir).files)
    keep = {h: e for h, e in entries.items() if h not in erased}
    st.write_many([(f"{target}/{h}", cbor.encode(e)) for h, e in sorted(keep.items())])
    st.delete(f"{folder}/{name}")
    again = set(st.listing(erased_dir).files)
    st.delete_many([f"{target}/{h}" for h in sorted(keep) if h in again])


def erase_plan(st: Storage, sid: bytes, url: str) -> tuple[list[str], list[tuple[
        str, str, dict[str, dict[str, Any]]]], list[str]]:
    """What erasing ``sid`` touches: the folders of per-scope objects (each generation's), the
    shards holding it, and the KMS keys of its own its entries name. Reads only."""
    sid_hex = sid.hex()
    folders = st.listing("").folders
    shard_dirs = sorted(f for f in folders if is_shard_dir(f))
    scope_dirs = sorted({f for f in folders if f == "scopes" or f.startswith("scopes-")}
                        | {scopes_dir_of(f) for f in shard_dirs})
    shards = holding(st, shard_dirs, sid_hex, url)
    own = [str(e["kms_key"]) for _, _, es in shards for h, e in es.items()
           if h == sid_hex and "kms_key" in e]
    for folder in scope_dirs:
        try:
            m = cbor.decode(st.read(f"{folder}/{sid_hex}"), what="scope key")
        except (FileNotFoundError, CkptfsError):
            continue
        if isinstance(m, dict) and isinstance(m.get("kms_key"), str):
            own.append(m["kms_key"])
    return scope_dirs, shards, own


def held(st: Storage, sid: bytes, url: str) -> list[str]:
    """Every object of the keyring that holds a wrapped key of ``sid`` (``verify --erased``:
    none may, after an erase)."""
    folders, shards, _ = erase_plan(st, sid, url)
    return ([f"{f}/{sid.hex()}" for f in folders if st.exists(f"{f}/{sid.hex()}")]
            + [f"{f}/{n}" for f, n, _ in shards])


__all__ = ["held", "SHARDS", "PER_SHARD", "prefix_len", "shard_of", "encode", "decode", "read",
           "explode", "erase_plan", "scopes_dir_of", "check_entry"]
