"""Verify every retained snapshot of a store, not only heads.

Without ``read_data`` it proves every manifest parses and validates and every chunk it names
exists (and has a plausible size); with ``read_data`` it re-reads every chunk and recomputes
every digest (restic's ``check --read-data``). Problems are reported, never repaired.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import attrs

from ckptfs.errors import CkptfsError
from ckptfs.format import framing
from ckptfs.format.digest import Digest
from ckptfs.format.ledger import LedgerRef
from ckptfs.format.models import Captured, ChunkRef, Entry
from ckptfs.format.names import chunk_path
from ckptfs.store.repository import Repository


@attrs.frozen
class Problem:
    """One thing wrong, with the category of the spec's error list."""

    category: str
    run: str | None
    seq: int | None
    snapshot: str | None
    message: str

    def to_json(self) -> dict[str, object]:
        return attrs.asdict(self)


@attrs.define
class VerifyReport:
    runs: int = 0
    snapshots: int = 0
    chunks_checked: int = 0
    bytes_read: int = 0
    problems: list[Problem] = attrs.field(factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, object]:
        return {"ok": self.ok, "runs": self.runs, "snapshots": self.snapshots,
                "chunks_checked": self.chunks_checked, "bytes_read": self.bytes_read,
                "problems": [p.to_json() for p in self.problems]}


def verify(repo: Repository, *, runs: Iterable[str] | None = None, read_data: bool = False,
           progress: Callable[[str], None] | None = None) -> VerifyReport:
    """Check every snapshot of ``runs`` (default: all). Each chunk is checked once."""
    report = VerifyReport()
    try:
        repo.config
    except CkptfsError as e:
        report.problems.append(Problem(e.category, None, None, None, str(e)))
        return report
    checked: dict[Digest, str | None] = {}
    for run_id in (list(runs) if runs is not None else repo.run_ids()):
        report.runs += 1
        for seq in repo.seqs(run_id):
            report.snapshots += 1
            if progress:
                progress(f"{run_id}@{seq}")
            try:
                snap = repo.snapshot_at(run_id, seq)
            except CkptfsError as e:
                report.problems.append(Problem(e.category, run_id, seq, None, str(e)))
                continue
            if snap.manifest.run != run_id or snap.manifest.seq != seq:
                report.problems.append(Problem(
                    "corrupt", run_id, seq, snap.id,
                    f"manifest says run {snap.manifest.run!r} seq {snap.manifest.seq}"))
            named: list[tuple[str, Entry]] = list(snap.manifest.entries.items())
            if snap.manifest.ledger is not None:  # validated when the manifest was parsed
                named.append(("(ledger)", LedgerRef.from_cbor(snap.manifest.ledger).as_entry()))
            for name, entry in named:
                if not isinstance(entry, Captured):
                    continue
                for ref in entry.chunks:
                    if ref.digest not in checked:
                        checked[ref.digest] = _check_chunk(repo, ref, read_data, report)
                    why = checked[ref.digest]
                    if why is not None:
                        cat, _, msg = why.partition(":")
                        report.problems.append(Problem(
                            cat, run_id, seq, snap.id, f"entry {name!r}: chunk {ref.digest}: {msg}"))
    return report


def _check_chunk(repo: Repository, ref: ChunkRef, read_data: bool, report: VerifyReport) -> str | None:
    path = chunk_path(ref.digest)
    report.chunks_checked += 1
    if not read_data:
        size = repo.storage.size(path)
        if size is None:
            return "missing:chunk file is missing"
        if size < 2 and ref.size > 0:
            return "corrupt:chunk file is truncated"
        if size > ref.size + 1:
            return f"corrupt:chunk file is {size} bytes, larger than its content could be"
        return None
    try:
        stored = repo.storage.read(path)
    except FileNotFoundError:
        return "missing:chunk file is missing"
    report.bytes_read += len(stored)
    try:
        data = framing.unframe(stored, ref.size, what="chunk")
    except CkptfsError as e:
        return f"corrupt:{e}"
    if Digest.of(data) != ref.digest:
        return "corrupt:content does not match its digest"
    return None
