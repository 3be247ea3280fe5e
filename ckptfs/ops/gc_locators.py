"""GC's container rule for stores with complete locators (spec/v2.md 9.2, feature
``complete-locators``).

In such a store every writer locates every chunk a record does not carry, taking the locator
from the record's parent or from a container it wrote within the reuse window (spec/v2.md 3.5,
5.2), and readers try the snapshot's own record before reporting a chunk missing (6). So every
body a visible snapshot needs is in a visible record, in a container a visible record's
locators name, or behind a forward of such a container. GC therefore keeps exactly:

- the containers *named*: visible records, the containers their locators name, and those the
  forwards of named containers point into (transitively; maintenance keeps them one hop);
- containers younger than the grace period;

and deletes every other stray record and pack **without reading it** (batched, conditional on
the listing's ETag where the backend offers it), with the forwards of containers nothing
names. The named ones that are strays or packs are read and judged by the mark as before
(repacked and forwarded when they hold marked bodies). Stores without the feature keep the
rule that reads every old stray's header (``ckptfs.ops.gc.v2_victims``).
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from ckptfs.format import containers as ct
from ckptfs.format.containers import ContainerRef, RecordRef
from ckptfs.format.models import COMPLETE_LOCATORS
from ckptfs.format.names import forward_path
from ckptfs.ops.repack import RepackReport, forwards
from ckptfs.storage.base import ObjectStat, Storage
from ckptfs.store.containers import container_path
from ckptfs.store.listing import container_ref
from ckptfs.store.repository import Repository


def applies(repo: Repository) -> bool:
    """Whether the store promises complete locators (its config requires the feature)."""
    return COMPLETE_LOCATORS in repo.config.required


@attrs.frozen
class Unread:
    """An old container nothing named when it was judged: deleted without being read."""

    ref: ContainerRef
    stat: ObjectStat


@attrs.define
class Plan:
    """What the rule decided from the first mark; ``sweep`` decides again from the second."""

    forwards: dict[str, ct.Forward]
    unread: list[Unread] = attrs.field(factory=list)


def reached(named: Iterable[ContainerRef], fwd: dict[str, ct.Forward]) -> set[ContainerRef]:
    """``named`` and every container a forward of one of them points into, transitively."""
    out = set(named)
    todo = list(out)
    while todo:
        f = fwd.get(container_path(todo.pop()))
        if f is None:
            continue
        for loc in f.bodies.values():
            if loc.container not in out:
                out.add(loc.container)
                todo.append(loc.container)
    return out


def split(refs: Iterable[tuple[ContainerRef, ObjectStat | None]], keep: set[ContainerRef],
          cutoff_s: float, plan: Plan) -> tuple[list[tuple[ContainerRef, ObjectStat | None]],
                                               int]:
    """The containers among ``refs`` to read and judge (named ones), and how many are young
    (kept unread); every other one goes to ``plan.unread``."""
    read: list[tuple[ContainerRef, ObjectStat | None]] = []
    young = 0
    for ref, stat in refs:
        if ref in keep:
            read.append((ref, stat))
        elif stat is None or stat.mtime is None or stat.mtime >= cutoff_s:
            young += 1  # unknown age counts as young
        else:
            plan.unread.append(Unread(ref, stat))
    return read, young


def sweep(storage: Storage, plan: Plan, named: Iterable[ContainerRef], report: RepackReport,
          *, dry_run: bool = False) -> int:
    """Delete the unread containers still named by nothing after the second mark (``named``:
    what both marks named), and the forwards of containers nothing names, in batches; the
    number of records among the deleted (for the v1 counters). A container a record
    committed during the collection names is kept (a later collection judges it)."""
    keep = reached(named, plan.forwards)
    victims = [u for u in plan.unread if u.ref not in keep]
    stale = [forward_path(p) for p in plan.forwards
             if (r := container_ref(p)) is not None and r not in keep]
    records = sum(1 for u in victims if isinstance(u.ref, RecordRef))
    if dry_run:
        report.containers_deleted += len(victims)
        report.bytes_freed += sum(u.stat.size for u in victims)
        report.forwards_deleted += len(stale)
        return records
    changed = set(storage.delete_many_if((container_path(u.ref), u.stat.etag)
                                         for u in victims))
    if changed:
        report.problems += [f"{p}: changed since gc judged it; kept" for p in sorted(changed)]
        victims = [u for u in victims if container_path(u.ref) not in changed]
        records = sum(1 for u in victims if isinstance(u.ref, RecordRef))
    storage.delete_many(stale)
    report.forwards_deleted += len(stale)
    report.containers_deleted += len(victims)
    report.bytes_freed += sum(u.stat.size for u in victims)
    return records


def plan_forwards(storage: Storage, problems: list[str]) -> Plan | None:
    """The plan's forwards, read; None when one cannot be read (then gc keeps the rule that
    reads every old stray: a damaged forward may have pointed into any container)."""
    mine: list[str] = []
    fwd = forwards(storage, mine)
    if mine:
        problems += mine
        return None
    return Plan(fwd)


def locator_containers(h: ct.RecordHeader) -> tuple[ContainerRef, ...]:
    """The containers a record's locators name (spec/v2.md 3.5)."""
    return h.containers


def named_containers(repo: Repository) -> list[str]:
    """The paths of the stray records and packs of the store that its visible records name
    (their locators, and the forwards reached from named containers): the old containers a gc
    under this rule must read and judge rather than delete unread (spec/v2.md 9.2). Visible
    records are named too but not listed (gc never deletes them). A record that cannot be
    read raises (gc would then delete nothing)."""
    from ckptfs.errors import CkptfsError
    from ckptfs.ops.repack import packs
    from ckptfs.ops.runscan import RecordCache

    st = repo.storage
    cache = RecordCache()
    named: set[ContainerRef] = set()
    strays: set[ContainerRef] = set()
    for run_id in repo.run_ids():
        listing = cache.listing(st, run_id)
        strays.update(RecordRef(run_id, s) for s in listing.strays)
        for got in cache.records(repo, listing, listing.visible):
            if got.error is not None:
                raise got.error
            if got.container is not None:
                named.add(RecordRef(run_id, got.seq))
                h = got.container.header
                if isinstance(h, ct.RecordHeader):
                    named.update(locator_containers(h))
    problems: list[str] = []
    keep = reached(named, forwards(st, problems))
    if problems:
        raise CkptfsError("; ".join(problems))
    held = strays | set(packs(st))
    return sorted(container_path(r) for r in keep & held)
