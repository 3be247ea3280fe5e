"""Erase on format v2 stores: the containers that hold the erased snapshots' bodies.

Erase does not wait for a grace period or a second mark (spec/v2.md "Erase"): every container
holding a body that only the erased snapshots use is repacked at once, without those bodies,
and the erased run's records are deleted the same way (the bodies other snapshots still use are
copied out first, with forwards). Forwards that name an erased body lose that row, so no digest
of erased content stays in the store (a digest confirms a guess).
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from ckptfs.format.containers import PackRef, RecordRef
from ckptfs.format.digest import Digest
from ckptfs.ops.repack import held, packs, repack
from ckptfs.storage.base import ObjectStat
from ckptfs.store.listing import record_ref
from ckptfs.store.repository import Repository

WRITER = "ckptfs erase"


@attrs.frozen
class Erased:
    bodies: int
    bytes: int


def erase_containers(repo: Repository, run_id: str, targets: list[int], gone: set[Digest],
                     keep_lease: Callable[[], None]) -> Erased:
    """Delete the erased run's records ``targets`` and repack every other container that
    holds a body in ``gone`` (the erased snapshots' unique chunks), now."""
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
    victims = [h for h in found
               if h.ref in own or any(b.digest in gone for b in h.container.header.bodies)]
    erased = [b for h in victims for b in h.container.header.bodies if b.digest in gone]
    report = repack(st, victims, lambda d: d not in gone, writer=WRITER,
                    drop_from_forwards=lambda d: d in gone, lease_keep=keep_lease)
    if problems or report.problems:
        from ckptfs.errors import CkptfsError

        raise CkptfsError("erase could not read every container; what it could not read may "
                          "still hold erased data (run erase again after fixing them): "
                          + "; ".join([*problems, *report.problems][:5]))
    return Erased(len({b.digest for b in erased}), sum(b.stored for b in erased))
