"""Is the destination's run the source's run? What ``copy`` must prove before it changes
anything of a run that the destination already holds (docs/operations/copy.md: a run whose history
differs between the stores is a conflict, and it is not touched).

A snapshot id is the digest of a manifest that names its run, its seq and its parent (the
previous snapshot of the run), so two stores that hold the same id at a seq hold the same
history up to that seq. ``History.check`` compares, at every seq the destination holds, what
the source says is there: its record, the parent named by its first snapshot after a gap
(a forgotten range), and the ids its tombstones list. Then:

- any seq where the two differ is a conflict (the first such seq is named);
- a destination record that the copy would remove (forgotten or erased in the source) must
  lie at or below a seq where the two agree, or have expired in the destination; otherwise
  nothing proves it is the source's snapshot, and that is a conflict too;
- a whole run erased in the source is erased in the destination only if they agree at one
  seq at least.

A conflict is raised before the copy has written anything of the run to the destination.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from ckptfs.errors import ConflictError, CorruptSnapshot, FormatError
from ckptfs.format.digest import Digest
from ckptfs.format.models import RunRecord
from ckptfs.format.names import record_path
from ckptfs.format.containers import RecordRef
from ckptfs.store.records import read_record_head
from ckptfs.store.repository import Repository


def source_record(src: Repository, run_id: str, seq: int) -> tuple[bytes, RunRecord]:
    """A run record's bytes (copied verbatim; of a v2 record, its header only) and their
    validated meaning. A v2 record is read up to the end of its header: its bodies are read
    once, by the copy that sends them (a copy that does not need them reads none)."""
    what = f"{src.url}: run record {record_path(run_id, seq)}"
    data, rec, container = read_record_head(src.storage, run_id, seq, what=what)
    if container is not None:  # v2: where its chunks are, for the copy that reads them
        src.objects.locations.learn(container, RecordRef(run_id, seq))
    return data, rec


def diverged(src: Repository, dst: Repository, run_id: str, seq: int) -> ConflictError:
    return ConflictError(
        f"run {run_id!r} seq {seq} differs between {src.url} and {dst.url}: the two stores hold "
        "different histories of this run (it was written to both). Nothing more of this run was "
        "copied; fork it under a new id in one of them, or copy into another store.")


class History:
    """The comparison of one run's history in ``src`` and ``dst``. The records it reads are
    kept for the copy that follows (``record``, ``dst_id``), so none is read twice."""

    def __init__(self, src: Repository, dst: Repository, run_id: str) -> None:
        self.src, self.dst, self.run = src, dst, run_id
        self._src_records: dict[int, tuple[bytes, RunRecord]] = {}
        self._dst_ids: dict[int, Digest] = {}

    def record(self, seq: int) -> tuple[bytes, RunRecord]:
        """The source's record at ``seq`` (read once)."""
        if seq not in self._src_records:
            self._src_records[seq] = source_record(self.src, self.run, seq)
        return self._src_records[seq]

    def dst_id(self, seq: int) -> Digest:
        """The snapshot id the destination's record at ``seq`` names (read once)."""
        if seq not in self._dst_ids:
            self._dst_ids[seq] = self.dst.record(self.run, seq).snapshot
        return self._dst_ids[seq]

    def forget(self, seq: int) -> None:
        """The destination's record at ``seq`` changed (created by the copy, or removed)."""
        self._dst_ids.pop(seq, None)

    def check(self, src_seqs: Iterable[int], dst_seqs: Iterable[int],
              remove: Iterable[int] = (), erased_ids: Iterable[tuple[int, Digest]] = (), *,
              whole: bool = False, expired: Callable[[int], bool] = lambda s: False) -> bool:
        """Raise ConflictError unless the destination's records at ``dst_seqs`` are the
        source's (whose retained seqs are ``src_seqs`` and whose tombstones list
        ``erased_ids``), enough to remove the seqs ``remove`` (every one, with ``whole``).
        A seq that has ``expired`` in the destination needs no proof to be removed: it is not
        served there any more, and its own gc would forget it anyway. Returns whether the two
        runs are shown to be one (they agree at a seq, or the destination holds none)."""
        theirs = self._source_ids(set(src_seqs), set(dst_seqs), erased_ids)
        agree = 0
        for s in sorted(theirs):
            if self.dst_id(s) != theirs[s]:
                raise diverged(self.src, self.dst, self.run, s)
            agree = s
        if whole and set(dst_seqs) and not agree:
            self._unproven(min(dst_seqs), "erased")
        unproven = sorted(s for s in remove if s > agree and not whole and not expired(s))
        if unproven:
            self._unproven(unproven[0], "forgot or erased")
        return agree > 0 or not set(dst_seqs)

    def _source_ids(self, src_seqs: set[int], dst_seqs: set[int],
                    erased_ids: Iterable[tuple[int, Digest]]) -> dict[int, Digest]:
        """What the source says is at each of ``dst_seqs`` it knows about."""
        out = {s: self.record(s)[1].snapshot for s in sorted(src_seqs & dst_seqs)}
        for s in sorted(src_seqs):  # after a gap, the parent names the seq before it
            if s > 1 and s - 1 in dst_seqs and s - 1 not in out:
                parent = self.src.snapshot_at(self.run, s).manifest.parent
                if parent is not None:
                    out[s - 1] = parent
        for s, d in erased_ids:
            if s in dst_seqs:
                out.setdefault(s, d)
        return out

    def _unproven(self, seq: int, what: str) -> None:
        raise ConflictError(
            f"run {self.run!r} seq {seq}: {self.src.url} {what} it, but nothing shows that the "
            f"snapshot {self.dst.url} holds there is the same one (the stores share no snapshot "
            f"of this run at or above seq {seq}). Nothing of this run was changed. If it is the "
            "same run, forget or erase it in the destination ('ckptfs forget', 'ckptfs "
            "erase'); otherwise fork one of them under a new id.")
