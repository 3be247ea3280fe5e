"""Erase on format v2 stores: the containers that hold the erased snapshots' bodies.

Erase does not wait for a grace period or a second mark (spec/v2.md "Erase"). It keeps exactly
the bodies retained snapshots use (``keep``: the gc mark, taken after the fence) and drops
every other body of the containers it rewrites, whoever wrote it: a body only a forgotten
snapshot used (of the erased run or not) is not copied into a new pack. It rewrites:

- the erased run's records, and every container (stray records of any run, packs of any age)
  holding a body only the erased snapshots used (``gone``);
- every *settled* container holding a body no retained snapshot uses: one older than the grace
  period, or a pack maintenance wrote (gc, erase). No writer relies on such a body (spec/v2.md
  5.2), and it is what is left of the content of snapshots whose records a gc already deleted
  (the forgotten history of the erased run among it), which nothing else can attribute.

Bodies retained snapshots use are copied out first, with forwards; forward rows naming a body
that is not kept are removed, so no digest of erased content stays (a digest confirms a guess).

A pack younger than the grace period, written by a writer, that no record names and that holds
no body a retained snapshot uses belongs to a commit that has not landed: one in flight (of any
run) or one that crashed between its packs and its record (of the erased run, say). Nothing in
it says which: erase keeps it and names it (``Unresolved``); an erase or gc run once it is
older than the grace period removes it.
"""

from __future__ import annotations

from collections.abc import Callable, Container

import attrs

from ckptfs.format.containers import PackHeader, PackRef, RecordHeader, RecordRef
from ckptfs.format.digest import Digest
from ckptfs.ops.gc import WRITER as GC_WRITER
from ckptfs.ops.repack import Held, RepackReport, held, packs, repack
from ckptfs.storage.base import ObjectStat
from ckptfs.store.containers import container_path
from ckptfs.store.listing import record_ref
from ckptfs.store.repository import Repository

WRITER = "ckptfs erase"
#: container bytes rewritten per repack (the bodies it copies are held in memory meanwhile)
BATCH_BYTES = 256 << 20
#: the writer names of packs only maintenance writes (no commit relies on their bodies)
MAINTENANCE_WRITERS = frozenset({WRITER, GC_WRITER})


@attrs.frozen
class Unresolved:
    """A pack erase kept although no retained snapshot uses it (see the module docstring)."""

    path: str
    #: its size in bytes
    stored: int
    #: when it was written (seconds since the epoch; None: unknown)
    written: float | None

    def to_json(self) -> dict[str, object]:
        return attrs.asdict(self)


@attrs.frozen
class Erased:
    bodies: int
    bytes: int
    unresolved: tuple[Unresolved, ...] = ()
    #: the containers it deleted or rewrote whose file had other names (hard links from outside
    #: the store, ``Storage.hard_linked``): their bytes survive under those names
    linked: tuple[str, ...] = ()


def erase_containers(repo: Repository, run_id: str, targets: list[int], gone: set[Digest],
                     keep: set[Digest], cutoff_s: float, keep_lease: Callable[[], None],
                     links: Container[str] = frozenset()) -> Erased:
    """Delete the erased run's records ``targets`` and rewrite every container that holds a
    body in ``gone`` (the erased snapshots' unique chunks), or, settled (older than
    ``cutoff_s`` or written by maintenance), a body not in ``keep``; now. Only the bodies in
    ``keep`` (every chunk a retained snapshot uses) are copied out. ``links``: the store's
    paths whose files have other names (``Storage.hard_linked``), to report those it removes."""
    st = repo.storage
    refs: list[tuple[RecordRef | PackRef, ObjectStat | None]] = [
        (RecordRef(run_id, s), None) for s in targets]
    for other in repo.run_ids():  # stray records of other runs may hold the same bodies
        visible = set(repo.seqs(other))
        refs += [(RecordRef(other, s), None) for s in repo.record_seqs(other)
                 if s not in visible and not (other == run_id and s in targets)]
    refs += list(packs(st).items())
    problems: list[str] = []
    plain: list[str] = []  # version 1 records of an upgraded store: no bodies, not containers
    found = held(st, refs, problems, plain)
    own = {RecordRef(run_id, s) for s in targets}
    st.delete_many(p for p in plain if record_ref(p) in own)
    named = {c for h in found if isinstance(h.container.header, RecordHeader)
             for c in h.container.header.containers}
    victims: list[Held] = []
    unresolved: list[Unresolved] = []
    for h in found:
        bodies = h.container.header.bodies
        if h.ref in own or any(b.digest in gone for b in bodies):
            victims.append(h)
        elif any(b.digest not in keep for b in bodies):
            if _settled(h, cutoff_s):
                victims.append(h)
            elif (isinstance(h.ref, PackRef) and h.ref not in named
                  and not any(b.digest in keep for b in bodies)):
                unresolved.append(Unresolved(container_path(h.ref), h.stored, h.mtime))
    erased = [b for h in victims for b in h.container.header.bodies if b.digest not in keep]
    report = RepackReport()
    for part in _batches(victims):  # each a complete repack: memory bounded by BATCH_BYTES
        repack(st, part, lambda d: d in keep, writer=WRITER, report=report,
               drop_from_forwards=lambda d: d not in keep, lease_keep=keep_lease)
        keep_lease()
    if problems or report.problems:
        from ckptfs.errors import CkptfsError

        raise CkptfsError("erase could not read every container; what it could not read may "
                          "still hold erased data (run erase again after fixing them): "
                          + "; ".join([*problems, *report.problems][:5]))
    return Erased(len({b.digest for b in erased}), sum(b.stored for b in erased),
                  tuple(sorted(unresolved, key=lambda u: u.path)),
                  tuple(sorted(p for p in (container_path(h.ref) for h in victims)
                               if p in links)))


def _batches(victims: list[Held]) -> list[list[Held]]:
    """``victims`` in runs of at most ``BATCH_BYTES`` of containers (at least one each): a
    repack holds the bodies it copies in memory, and the settled containers an erase rewrites
    may be most of a store."""
    out: list[list[Held]] = [[]]
    size = 0
    for h in victims:
        if out[-1] and size + h.stored > BATCH_BYTES:
            out.append([])
            size = 0
        out[-1].append(h)
        size += h.stored
    return out if out[0] else []


def _settled(h: Held, cutoff_s: float) -> bool:
    """Whether no writer may rely on the bodies of ``h`` that no retained snapshot uses: it is
    older than the grace period (spec/v2.md 5.2: a writer relies on what it wrote less than
    ``REUSE_WINDOW`` ago), or a pack maintenance wrote (no commit wrote its bodies there)."""
    if h.mtime is not None and h.mtime < cutoff_s:
        return True
    head = h.container.header
    return isinstance(head, PackHeader) and head.writer in MAINTENANCE_WRITERS
