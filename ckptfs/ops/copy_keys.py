"""Copies between key regimes (spec/encryption.md 7.1): into an encrypted store whose keyring
is not the source's (``ckptfs copy --encrypt`` from a plaintext store, or ``--dst-keyring``
from an encrypted one), and out of an encrypted store into a plaintext one (``--decrypt``).

What a copy moves is the plaintext store seen through the encryption layer: manifests with
their exact bytes (snapshot ids never change) and chunks by their plain BLAKE3 ids (version 1
of the scheme keeps chunk ids inside sealed objects, unkeyed: they do not change either). Only
the sealing changes. Each source key scope gets a scope of its own in the destination's
keyring: a run's own scope a new run scope, a subject's scope one new subject scope for all of
its runs (the subject's name entry carried with ``Keyring.import_names``, so that ``erase
--subject`` finds it there), and each run of a plaintext source a run scope of its own. Each
run is then copied through a view of its destination scope (``scoped``), so its packs and
records are sealed under it and no record locates into another scope's container
(encryption.md 4.2). Content the source held in its ``shared`` scope is carried in each run's
scope (which entries were marked shared is not in the manifest).

Chunks keep the source's boundaries (readers only concatenate); later commits to the
destination cut with its scopes' seeded chunkers.
"""

from __future__ import annotations

import threading

from ckptfs.errors import CkptfsError, InvalidArgument
from ckptfs.storage.encrypted import EncryptedStorage
from ckptfs.storage.keyring import KeyringError, Scope, ScopeErased
from ckptfs.store.repository import Repository


def check_decrypt(src: Repository, dst: Repository, decrypt: bool) -> None:
    """A copy out of an encrypted store into a plaintext one writes every byte decrypted: it
    is refused unless asked for (``decrypt=True``, ``--decrypt``); ``decrypt`` for a copy
    that decrypts nothing is refused too (it would say something untrue)."""
    src_enc = isinstance(src.storage, EncryptedStorage)
    dst_enc = isinstance(dst.storage, EncryptedStorage)
    if src_enc and not dst_enc and not decrypt:
        raise KeyringError(
            f"{src.url} is encrypted and {dst.url} is a plaintext store: this copy would write "
            "every state, name and blob of the copied runs in the clear. Pass --decrypt "
            "(copy_runs(..., decrypt=True)) to do so knowingly, or copy into an encrypted "
            "store (--keyring, --dst-keyring)")
    if decrypt and not (src_enc and not dst_enc):
        raise InvalidArgument(
            "--decrypt copies an encrypted store into a plaintext one; here "
            f"{'the source is not encrypted' if not src_enc else 'the destination is encrypted'}"
            ": leave --decrypt out")


def rekeys(src: Repository, dst: Repository) -> bool:
    """Whether each run is copied through a view of its destination scope (``Rekey``): into
    every encrypted destination (under the source's keyring too: a pack the copy makes anew
    is sealed under its run's scope)."""
    return isinstance(dst.storage, EncryptedStorage)


def erased_seqs(src: Repository, run_id: str) -> int:
    """How many snapshots of ``run_id`` the source holds (0 when it cannot open them)."""
    try:
        return len(src.seqs(run_id))
    except CkptfsError:
        return 0


class Rekey:
    """The destination scope of each copied run, and the Repository that writes it."""

    def __init__(self, src: Repository, dst: Repository) -> None:
        view = dst.storage
        assert isinstance(view, EncryptedStorage) and view.scope is None
        self.dst, self.view = dst, view
        self.src_view = src.storage if isinstance(src.storage, EncryptedStorage) else None
        #: source scope id -> destination scope
        self.scopes: dict[bytes, Scope] = {}
        self.repos: dict[bytes, Repository] = {}
        self._lock = threading.Lock()
        self._src_names: dict[str, bytes] | None = None

    def repo_for(self, run_id: str) -> Repository | None:
        """The Repository that writes ``run_id`` in the destination: through a view of the
        run's scope there (given one now, before anything of the run is written). None when
        the run's scope is erased in the destination's keyring: nothing of it is copied (an
        erased subject never comes back; under one keyring the source cannot open it either)."""
        with self._lock:
            try:
                scope = self.view.run_scope(run_id)
            except ScopeErased:
                return None
            if scope is None:
                scope = self._new_scope(run_id)
                self.view.register_run(run_id, scope)
            repo = self.repos.get(scope.id)
            if repo is None:
                repo = self.repos[scope.id] = Repository(self.view.scoped(scope))
                repo._configured(self.dst.config)
            return repo

    def _new_scope(self, run_id: str) -> Scope:
        ring = self.view.keyring
        src = None
        if self.src_view is not None:
            try:
                src = self.src_view.run_scope(run_id)
            except CkptfsError:  # erased in the source: its tombstone travels, in a new scope
                src = None
        if src is None or src.kind != "subject":
            return ring.new_scope("run")
        got = self.scopes.get(src.id)
        if got is None:
            got = self.scopes[src.id] = ring.new_scope("subject")
            assert self.src_view is not None
            if self._src_names is None:  # read once per copy, not once per subject
                self._src_names = self.src_view.keyring.name_entries()
            ring.import_names(self.src_view.keyring, {src.id: got.id}, self._src_names)
        return got
