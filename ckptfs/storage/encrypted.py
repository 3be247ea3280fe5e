"""An encrypted store seen through its plaintext paths (spec/encryption.md 5).

``EncryptedStorage`` wraps the Storage that holds an encrypted store. Everything above it (the
commit protocol, the runtime, maintenance) sees the store as if it were plaintext; below it,
every object except ``ckptfs.cbor`` and ``tmp/`` is sealed (AES-256-GCM, bound to its store,
scope, kind and plaintext path), and every name that could be personal is encrypted:

- ``runs/<run>/...`` becomes ``runs/<scope b32>-<AES-SIV(scope, run)>/...``: the run's scope id
  in the clear (an opaque random id), its name under its scope's key, so that erasing the
  scope makes the name unreadable too. Record names (sequence numbers) stay as they are.
- ``tombstones/<run>.cbor`` and ``tombstones/<run>/...`` encrypt the run the same way.
- ``packs/<xx>/<hex>`` (and ``chunks/``, ``snapshots/``) encrypt the digest under the store
  scope's key (a digest of content is not personal, but would confirm a guessed plaintext).
- ``moved/<path>`` maps ``<path>`` as above.

Bodies of ``runs/`` objects are sealed under their run's scope; packs under the scope of the
view that writes them (``scoped``: one per key scope, so deduplication stays inside a scope);
control objects (tombstones, leases, forwards) under the store scope.

Reading (whole objects, ranges by their segments, blob streams' readers of packs) is
``encrypted_reads.EncryptedReads``, this class's base; packs a stream reads whole are
``encrypted_whole``'s.
"""

from __future__ import annotations

import base64
import builtins
from collections.abc import Iterable, Sequence

from ckptfs.errors import CkptfsError, InvalidName
from ckptfs.format import crypto, crypto_stream
from ckptfs.format.names import (
    CHUNKS,
    CONFIG_PATH,
    MOVED,
    PACKS,
    RUNS,
    SNAPSHOTS,
    TMP,
    TOMBSTONES,
    check_run_id,
)
from ckptfs.storage.base import Listing, ObjectStat, Storage
from ckptfs.storage.encrypted_reads import _OPENERS, EncryptedReads, _Shared
from ckptfs.storage.keyring import Keyring, KeyringError, Scope, ScopeErased

#: the longest run id an encrypted store takes (its encrypted segment must fit a file name)
MAX_RUN_ID = 96
_CONTENT = (CHUNKS, SNAPSHOTS, PACKS)
#: (keyring id, plaintext path of a content object) -> the scope it was opened in, in this
#: process: a copy between two stores of one keyring writes a pack in the scope it read it in
_OPENED_IN: dict[tuple[bytes, str], bytes] = {}
_OPENED_MAX = 1 << 16


class ScopeRequired(CkptfsError):
    """A content object was written where no key scope is known."""

    category = "error"


def _b32(raw: bytes) -> str:
    return base64.b32encode(raw).decode("ascii").rstrip("=").lower()


def _unb32(text: str) -> bytes | None:
    try:
        return base64.b32decode(text.upper() + "=" * (-len(text) % 8))
    except ValueError:
        return None


def writer_for(storage: Storage, path: str) -> tuple[bytes, Storage]:
    """Where maintenance writes what it moves out of the container at ``path`` (gc's repack):
    on an encrypted store a view of that container's key scope (bodies of two scopes never
    share a pack), keyed by the scope id; any other storage as it is."""
    if not isinstance(storage, EncryptedStorage):
        return b"", storage
    scope = storage.scope_of(path)
    return scope.id, storage.scoped(scope)


class EncryptedStorage(EncryptedReads):
    """The plaintext view of an encrypted store (see the module docstring)."""

    def __init__(self, inner: Storage, keyring: Keyring, store_id: bytes, store_scope: Scope,
                 *, scope: Scope | None = None, shared: _Shared | None = None) -> None:
        self.inner = inner
        self.keyring = keyring
        self.store_id = store_id
        self.store_scope = store_scope
        #: the scope this view writes content objects (packs) in; None: the base view
        self.scope = scope
        self._shared = shared or _Shared()
        self.url = inner.url
        self.capabilities = inner.capabilities
        self.folders_are_real = inner.folders_are_real
        self.staged_workers = inner.staged_workers
        self.staged_max = inner.staged_max

    def opened_with(self, config: bytes) -> None:
        """``config`` is the store's config as just read to open it: the store's first read
        of its config takes these bytes instead of a second read of the same object."""
        with self._shared.lock:
            self._shared.config = config

    def scoped(self, scope: Scope) -> EncryptedStorage:
        """A view that writes content objects in ``scope`` (reads are the same)."""
        return EncryptedStorage(self.inner, self.keyring, self.store_id, self.store_scope,
                                scope=scope, shared=self._shared)

    # -- runs and their scopes -------------------------------------------------------------
    def scope_of(self, path: str) -> Scope:
        """The key scope of the stored object at plaintext ``path`` (a run's container: its
        run's; a pack: the scope in its header)."""
        parts = path.split("/")
        if parts[0] == RUNS and len(parts) >= 2:
            scope = self.run_scope(parts[1])
            if scope is not None:
                return scope
        known = _OPENED_IN.get((self.keyring.id, path))
        if known is None:
            stored = self.out(path)
            head = self.inner.read_range(stored, 0, crypto.HEADER_SIZE)
            known = crypto_stream.scope_of(head, where=stored)
        return self.keyring.scope(known)

    def register_run(self, run_id: str, scope: Scope) -> None:
        """Put a new run in ``scope`` (recorded in the keyring before its first object)."""
        self._check_run(run_id)
        self.keyring.name("run", run_id, scope.id)
        self._shared.runs[run_id] = scope

    def run_scope(self, run_id: str) -> Scope | None:
        """The scope of a run, or None when the keyring knows no such run; ScopeErased when
        it was erased."""
        hit = self._shared.runs.get(run_id)
        if hit is not None:
            return hit
        sid = self.keyring.find("run", run_id)
        if sid is None:
            return None
        scope = self.keyring.scope(sid)
        self._shared.runs[run_id] = scope
        return scope

    def forget_scope(self, scope_id: bytes) -> None:
        """Drop what this process holds of an erased scope (its runs' keys)."""
        runs = self._shared.runs
        for run in [r for r, sc in runs.items() if sc.id == scope_id]:
            del runs[run]

    def _check_run(self, run_id: str) -> None:
        check_run_id(run_id)
        if len(run_id) > MAX_RUN_ID:
            raise InvalidName(f"run id of {len(run_id)} characters: an encrypted store takes "
                              f"run ids of at most {MAX_RUN_ID}")

    def _run_seg(self, run_id: str) -> str:
        """The stored segment of a run (remembered per run: every path of a run has it)."""
        scope = self.run_scope(run_id)
        if scope is None:  # no such run: a name that holds nothing
            return "none-" + crypto.name_digest(self.store_scope.key, "run", run_id)[:40]
        segs = self._shared.segs
        hit = segs.get(run_id)
        if hit is not None and hit[0] == scope.id:
            return hit[1]
        seg = f"{_b32(scope.id)}-{crypto.encrypt_name(scope.key, run_id, context='run')}"
        if len(segs) >= _OPENERS:
            segs.clear()
        segs[run_id] = (scope.id, seg)
        return seg

    def _stone_seg(self, run_id: str) -> str:
        """The stored segment of a whole run's tombstone: a keyed digest of the run id under
        the store scope (spec/encryption.md 5), which outlives the run's own scope. A copy
        must find it after the erase destroyed that scope's key, to repeat the erasure in a
        copy that key destruction cannot reach (another keyring's, or a decrypted one); the
        digest names the run to nobody without the keyring, and to no one can it be undone."""
        seg = crypto.stone_name(self.store_scope.key, run_id)
        stones = self._shared.stones
        if len(stones) >= _OPENERS:
            stones.clear()
        stones[seg] = run_id
        return seg

    def _legacy_stone(self, path: str) -> str | None:
        """Where a whole run's tombstone was stored before ``_stone_seg`` (under the run's
        own segment), while the run's scope can still name it; None otherwise."""
        parts = path.split("/")
        if len(parts) != 2 or parts[0] != TOMBSTONES or not parts[1].endswith(".cbor"):
            return None
        try:
            return f"{TOMBSTONES}/{self._run_seg(parts[1][:-5])}.cbor"
        except (ScopeErased, KeyringError):
            return None

    def _run_name(self, seg: str) -> str | None:
        head, sep, rest = seg.partition("-")
        sid = _unb32(head) if sep else None
        if sid is None or len(sid) != crypto.SCOPE_ID_SIZE:
            return None
        try:
            scope = self.keyring.scope(sid)
        except (ScopeErased, KeyringError):
            return None
        name = crypto.decrypt_name(scope.key, rest, context="run")
        if name is not None:
            self._shared.runs.setdefault(name, scope)
        return name

    # -- paths -----------------------------------------------------------------------------
    def _content_name(self, top: str, hexname: str) -> str:
        return crypto.encrypt_name(self.store_scope.key, hexname, context=top)

    def out(self, path: str) -> str:
        """The stored path of the plaintext path ``path``."""
        parts = path.split("/")
        top = parts[0]
        if path == CONFIG_PATH or top == TMP or len(parts) < 2:
            return path
        if top == RUNS:
            parts[1] = self._run_seg(parts[1])
        elif top == TOMBSTONES:
            seg = parts[1]
            if len(parts) == 2 and seg.endswith(".cbor"):
                parts[1] = self._stone_seg(seg[:-5]) + ".cbor"
            else:
                parts[1] = self._run_seg(seg)
        elif top in _CONTENT and len(parts) == 3:
            enc = self._content_name(top, parts[2])
            parts[1:] = [enc[:2], enc]
        elif top == MOVED:
            return f"{MOVED}/{self.out('/'.join(parts[1:]))}"
        return "/".join(parts)

    def back(self, path: str) -> str | None:
        """The plaintext path of the stored path ``path``; None when it does not decrypt here
        (an erased scope, another keyring's object, a stray name)."""
        parts = path.split("/")
        top = parts[0]
        if path == CONFIG_PATH or top == TMP or len(parts) < 2:
            return path
        if top == RUNS:
            name = self._run_name(parts[1])
            if name is None:
                return None
            parts[1] = name
        elif top == TOMBSTONES:
            seg = parts[1]
            cbor_ext = len(parts) == 2 and seg.endswith(".cbor")
            if cbor_ext and seg.startswith(crypto.STONE_PREFIX):
                name = self._shared.stones.get(seg[:-5])
                return None if name is None else f"{TOMBSTONES}/{name}.cbor"
            name = self._run_name(seg[:-5] if cbor_ext else seg)
            if name is None:
                return None
            parts[1] = name + (".cbor" if cbor_ext else "")
        elif top in _CONTENT and len(parts) == 3:
            hexname = crypto.decrypt_name(self.store_scope.key, parts[2], context=top)
            if hexname is None:
                return None
            parts[1:] = [hexname[:2], hexname]
        elif top == MOVED:
            rest = self.back("/".join(parts[1:]))
            return None if rest is None else f"{MOVED}/{rest}"
        return "/".join(parts)

    # -- sealing ---------------------------------------------------------------------------
    def _write_scope(self, path: str) -> Scope:
        parts = path.split("/")
        if parts[0] == RUNS and len(parts) >= 2:
            scope = self.run_scope(parts[1])
            if scope is None:
                raise ScopeRequired(f"a run ({self._redacted(parts[1])}) has no key scope "
                                    f"in keyring {self.keyring.url}; start runs with "
                                    "store.start_run")
            return scope
        if parts[0] in _CONTENT:
            known = _OPENED_IN.get((self.keyring.id, path))
            if self.scope is None and known is not None:
                return self.keyring.scope(known)
            if self.scope is None:
                raise ScopeRequired(
                    f"writing {parts[0]} objects outside a run's key scope: this operation "
                    "does not support encrypted stores yet")
            return self.scope
        return self.store_scope

    def seal(self, path: str, data: bytes | memoryview) -> bytes:
        scope = self._write_scope(path)
        self._forget(path)
        return crypto_stream.seal(scope.key, store_id=self.store_id, scope_id=scope.id,
                                  path=path, plaintext=data)

    def _redacted(self, run_id: str) -> str:
        """How a message names a run: a keyed digest (stable, findable by the key holder with
        ``crypto.name_digest``), never the run id, which may be personal."""
        return "run#" + crypto.name_digest(self.store_scope.key, "run", run_id)[:16]

    def open(self, path: str, data: bytes, stored: str | None = None) -> bytes:
        """The authenticated plaintext of the object read at ``path`` (stored at ``stored``:
        errors name that path, never ``path``)."""
        where = self.out(path) if stored is None else stored
        sid = crypto_stream.scope_of(data, where=where)
        scope = self.keyring.scope(sid)
        plain = crypto_stream.open_sealed(scope.key, data, store_id=self.store_id, path=path,
                                          where=where)
        if path.split("/", 1)[0] in _CONTENT:
            if len(_OPENED_IN) >= _OPENED_MAX:
                _OPENED_IN.clear()
            _OPENED_IN[(self.keyring.id, path)] = sid
        return plain

    def _forget(self, path: str) -> None:
        with self._shared.lock:
            self._shared.openers.pop(path, None)
            gone = self._shared.cache.pop(path, None)
            if gone is not None:
                self._shared.cached -= len(gone)

    # -- Storage ---------------------------------------------------------------------------
    def read_many(self, paths: list[str]) -> list[bytes | None]:
        stored = [self.out(p) for p in paths]
        got = self.inner.read_many(stored)
        return [d if d is None or p == CONFIG_PATH else self.open(p, d, o)
                for p, o, d in zip(paths, stored, got)]

    def write(self, path: str, data: bytes) -> None:
        inner = self.out(path)
        if path.split("/", 1)[0] in _CONTENT and self._present(path, inner):
            return
        self.inner.write(inner, self.seal(path, data))

    def _present(self, path: str, inner: str) -> bool:
        """A content object is written once per store: present in this view's scope is done;
        present in another scope (byte-identical packs of two scopes) is refused."""
        if self.inner.size(inner) is None:
            return False
        head = self.inner.read_range(inner, 0, crypto.HEADER_SIZE)
        scope = self._write_scope(path)
        if crypto_stream.scope_of(head, where=inner) != scope.id:
            raise ScopeRequired(f"{inner}: an identical object of another key scope is "
                                "stored; retry the commit (its pack will differ)")
        return True

    def _sealed_new(self, items: Iterable[tuple[str, bytes]]) -> builtins.list[tuple[str, bytes]]:
        """``items`` sealed at their stored paths, less the content objects already stored in
        this view's scope (written once per store)."""
        out = []
        for path, data in items:
            inner = self.out(path)
            if path.split("/", 1)[0] in _CONTENT and self._present(path, inner):
                continue
            out.append((inner, self.seal(path, data)))
        return out

    def write_many(self, items: Iterable[tuple[str, bytes]]) -> None:
        """One batch to the inner storage (object stores overlap the requests, local disk
        its fsyncs)."""
        self.inner.write_many(self._sealed_new(items))

    def write_parts(self, path: str, parts: Sequence[bytes | memoryview]) -> None:
        self.write(path, b"".join(parts))

    def create(self, path: str, data: bytes) -> None:
        if path == CONFIG_PATH:
            return self.inner.create(path, data)
        self.inner.create(self.out(path), self.seal(path, data))

    def commit(self, objects: list[tuple[str, bytes]], path: str, data: bytes) -> None:
        """The inner storage's commit of the sealed objects and record: the same protocol
        (the record is created only after every object is durable), one batch."""
        self.inner.commit(self._sealed_new(objects), self.out(path), self.seal(path, data))

    def hint(self, path: str, data: bytes) -> None:
        self.inner.hint(self.out(path), self.seal(path, data))

    def replace(self, path: str, data: bytes) -> None:
        self.inner.replace(self.out(path), self.seal(path, data))

    def list(self, prefix: str) -> builtins.list[str]:
        return self.listing(prefix).names

    def listing(self, prefix: str) -> Listing:
        parts = prefix.split("/") if prefix else []
        if parts and parts[0] in _CONTENT and len(parts) <= 2:
            # fan-out folders of plaintext digests: from the whole (decrypted) listing
            names = [p.split("/") for p in self.scan(parts[0])]
            if len(parts) == 1:
                return Listing((), tuple(sorted({n[1] for n in names})))
            return Listing(tuple(sorted(n[2] for n in names if n[1] == parts[1])), ())
        try:
            stored = self.out(prefix)
        except ScopeErased:
            if parts[0] in (RUNS, TOMBSTONES):  # an erased run's folder: nothing to name
                return Listing((), ())
            raise
        got = self.inner.listing(stored)
        if not parts or parts[0] == TMP or (parts[0] in (RUNS, TOMBSTONES) and len(parts) > 1):
            return got  # below a run's (or a tombstone's) segment names are not encrypted

        def name(n: str) -> str | None:
            full = self.back(f"{stored}/{n}")
            return None if full is None else full.rsplit("/", 1)[-1]

        files = [x for x in map(name, got.files) if x is not None]
        folders = [x for x in map(name, got.folders) if x is not None]
        return Listing(tuple(sorted(files)), tuple(sorted(folders)))

    def scan(self, prefix: str) -> dict[str, ObjectStat]:
        out: dict[str, ObjectStat] = {}
        for path, st in self.inner.scan(self.out(prefix) if prefix else "").items():
            if path == CONFIG_PATH or path.startswith(f"{TMP}/"):
                out[path] = st
                continue
            logical = self.back(path)
            if logical is not None:
                out[logical] = ObjectStat(crypto_stream.plain_size(st.size), st.mtime,
                                          st.etag)
        return out

    def delete(self, path: str) -> None:
        self._forget(path)
        self.inner.delete(self.out(path))

    def delete_many(self, paths: Iterable[str]) -> None:
        ps = builtins.list(paths)
        for p in ps:
            self._forget(p)
        self.inner.delete_many([self.out(p) for p in ps])

    def delete_many_if(self, items: Iterable[tuple[str, str | None]]) -> builtins.list[str]:
        pairs = [(p, self.out(p), tag) for p, tag in items]
        for p, _, _ in pairs:
            self._forget(p)
        kept = set(self.inner.delete_many_if([(o, tag) for _, o, tag in pairs]))
        return [p for p, o, _ in pairs if o in kept]

    def size(self, path: str) -> int | None:
        got = self.inner.size(self.out(path))
        if got is None or path == CONFIG_PATH:
            return got
        return crypto_stream.plain_size(got)

    def mtime(self, path: str) -> float | None:
        return self.inner.mtime(self.out(path))

    def hard_linked(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for path, n in self.inner.hard_linked().items():
            logical = self.back(path)
            if logical is not None:
                out[logical] = n
        return out

    def close(self) -> None:
        self.inner.close()

    def __repr__(self) -> str:
        return f"EncryptedStorage({self.inner!r})"
