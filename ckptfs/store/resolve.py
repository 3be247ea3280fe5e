"""Resolving what a user names a snapshot by: ``blake3:<hex>``, a unique hex prefix (>= 6
characters), ``RUN`` (its head), ``RUN@head`` or ``RUN@SEQ`` (``Repository.resolve_ref``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ckptfs.errors import CkptfsError, FormatError, MissingObject, NotFound
from ckptfs.format.digest import Digest
from ckptfs.format.names import RUN_ID, check_run_id, parse_uint
from ckptfs.storage.encrypted_open import is_encrypted_view
from ckptfs.store.heads import HeadLook
from ckptfs.store.snapshot import Snapshot

if TYPE_CHECKING:
    from ckptfs.store.repository import Repository


def resolve_ref(repo: Repository, ref: str) -> tuple[Snapshot, HeadLook | None]:
    """The snapshot ``ref`` names, and the head search that found it when it was found as its
    run's head just now (``RUN``, ``RUN@head``; else None): a caller that needs the head then
    need not find it again, and may check the run's retired range and expiry from that look."""
    ref = ref.strip()
    if ref.startswith("blake3:") or (len(ref) == 64 and _is_hex(ref)):
        return repo.snapshot(Digest.parse(ref)), None
    if "@" in ref:
        run_id, _, seq_text = ref.rpartition("@")
        check_run_id(run_id)
        if seq_text == "head":
            return _head_snapshot(repo, run_id)
        seq = parse_uint(seq_text, what=f"{ref!r:.200}: expected RUN@SEQ, and SEQ")
        snap = repo.snapshot_at(run_id, seq)
        repo._check_retained(run_id, snap.seq)
        return snap, None
    if _is_hex(ref) and len(ref) >= 6 and ref not in repo.run_ids():
        matches = repo.snapshot_ids(ref)
        if len(matches) > 1:
            raise NotFound(f"snapshot prefix {ref!r} is ambiguous ({len(matches)} matches)")
        if matches:
            return repo.snapshot(matches[0]), None
    if RUN_ID.match(ref):
        return _head_snapshot(repo, ref)
    raise NotFound(f"{ref!r} names no snapshot or run in {repo.url}")


def _head_snapshot(repo: Repository, run_id: str) -> tuple[Snapshot, HeadLook]:
    look = repo.head_look(run_id)
    if look.record is None:
        raise repo.erased(run_id) or NotFound(f"no run {run_id!r} in {repo.url}")
    try:
        return repo._recorded(look.record), look
    except (FormatError, MissingObject) as e:  # the head's manifest: as a damaged record
        raise damaged_head(repo, run_id, e) from e


def damaged_head(repo: Repository, run_id: str, e: CkptfsError) -> CkptfsError:
    """``e`` (the head record of ``run_id``, or its manifest, is damaged) with what to do
    about it: a reader never falls back to an older record (format.md 8.3), so only a repair
    (format.md 8.4) makes the run resumable again."""
    # an encrypted store's run ids may be personal data: its errors never carry one (the
    # caller knows which run it read; spec/encryption.md 8)
    shown = "RUN" if is_encrypted_view(repo.storage) else run_id
    named = "this run" if shown == "RUN" else f"run {run_id!r}"
    return type(e)(
        f"{e}. This is the head of {named}, so the run cannot be resumed (a reader "
        f"never falls back to an older record): 'ckptfs repair {repo.url} {shown}' makes its "
        "last good snapshot the head again, keeping the damaged record; or fork an older "
        f"snapshot (store.fork('{shown}@SEQ', NEW_RUN))")


def _is_hex(s: str) -> bool:
    return bool(s) and all(c in "0123456789abcdef" for c in s)
