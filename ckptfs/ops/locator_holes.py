"""Records with holes (spec/v2.md 3.5, "complete locators"): a chunk a visible v2 record's
snapshot needs that the record neither carries as a body nor locates (nor, in a store with
``v1-objects``, a loose object holds). In a store that requires ``complete-locators`` gc may
delete the container holding such a chunk without reading it, and a reader of that snapshot
alone cannot find it, so a hole is damage: ``verify`` reports it. ``upgrade`` adds the
feature to a version 2 store only when no visible record has one."""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from ckptfs.errors import CkptfsError
from ckptfs.format import containers as ct
from ckptfs.format.names import chunk_path
from ckptfs.ops.chunks import snapshot_chunks
from ckptfs.ops.runscan import RecordCache
from ckptfs.store.ledgers import LedgerScanner
from ckptfs.store.repository import Repository

V1_OBJECTS = "v1-objects"


@attrs.frozen
class Hole:
    """A visible record that does not carry or locate a chunk its snapshot needs (or that
    could not be read, so nothing can be promised of it)."""

    run: str
    seq: int
    why: str
    #: the record (or its snapshot) could not be read at all
    unreadable: bool = False


def locator_holes(repo: Repository, *, runs: Iterable[str] | None = None,
                  keep: object = None) -> tuple[int, list[Hole]]:
    """How many visible v2 records of ``runs`` (default: all) were checked, and the first hole
    of each record that has one. ``keep``: called once per run (a maintenance lease's
    renewal). One listing per run and one read per visible record."""
    loose = V1_OBJECTS in repo.config.optional
    cache = RecordCache()
    ledgers = LedgerScanner(repo.objects)
    holes: list[Hole] = []
    checked = 0
    for run_id in (list(runs) if runs is not None else repo.run_ids()):
        if callable(keep):
            keep()
        listing = cache.listing(repo.storage, run_id)
        for got in cache.records(repo, listing, listing.visible):
            if got.error is not None or got.record is None:
                holes.append(Hole(run_id, got.seq, f"unreadable ({got.error})", True))
                continue
            c = got.container
            if c is None:
                continue  # a v1 record: its chunks are loose objects, judged by the mark
            h = c.header
            assert isinstance(h, ct.RecordHeader)
            checked += 1
            own = {b.digest for b in h.bodies}
            prefixes = {x.prefix for x in h.locators}
            try:
                need = snapshot_chunks(repo, repo._recorded(got.record), ledgers=ledgers)
            except CkptfsError as e:
                holes.append(Hole(run_id, got.seq, f"unreadable ({e})", True))
                continue
            for what, ref in need:
                d = ref.digest
                if d in own or d.raw[:ct.LOCATOR_PREFIX] in prefixes:
                    continue
                if loose and repo.storage.exists(chunk_path(d)):
                    continue
                holes.append(Hole(run_id, got.seq,
                                  f"{what} chunk {d} is not located by its record"))
                break
    return checked, holes


__all__ = ["Hole", "V1_OBJECTS", "locator_holes"]
