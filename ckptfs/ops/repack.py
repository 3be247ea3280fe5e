"""Format v2 maintenance on containers: judge, repack and delete (spec/v2.md "Maintenance").

GC and erase decide per chunk (a body is *kept* when the caller says so) and act per container:
a container none of whose bodies is kept is deleted; one holding kept bodies among others is
repacked: the kept bodies are copied (verified) into new packs, a forward
``moved/<container path>`` says where each went, and only then is the container deleted.
Forwards that pointed into a repacked container are rewritten to the new places (readers then
follow at most one hop), and forwards whose bodies are all gone are deleted.

Order, so that a crash at any point leaves every kept body findable: new packs (durable), then
forwards, then the deletes. A rerun repacks again what is left (the first run's packs then hold
duplicates, which a later collection judges like any other pack).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import attrs

from ckptfs.errors import CkptfsError
from ckptfs.format import containers as ct
from ckptfs.format.containers import Body, Container, ContainerRef, Location, PackRef, RecordRef
from ckptfs.format.digest import Digest
from ckptfs.format.names import MOVED, PACKS, forward_path
from ckptfs.store.containers import (
    PACK_TARGET,
    container_path,
    header_from,
    pack_bodies,
    random_order,
)
from ckptfs.store.listing import forward_ref, pack_ref
from ckptfs.storage.base import ObjectStat, Storage
from ckptfs.store.repository import Repository
from ckptfs.ops.runscan import known_header, remember_header

#: container headers read per batch (each at most a 64 KiB range)
BATCH = 256


@attrs.frozen
class Held:
    """A container maintenance may act on: where it is, its header, its age."""

    ref: ContainerRef
    container: Container
    mtime: float | None
    stored: int
    #: the ETag of the listing it was judged by (object stores), for a conditional delete
    etag: str | None = None


@attrs.define
class RepackReport:
    containers_deleted: int = 0
    containers_repacked: int = 0
    bodies_moved: int = 0
    bytes_moved: int = 0
    bytes_freed: int = 0
    forwards_written: int = 0
    forwards_deleted: int = 0
    problems: list[str] = attrs.field(factory=list)


def packs(storage: Storage) -> dict[PackRef, ObjectStat]:
    """Every pack of the store by its listing (names that are no pack's are ignored)."""
    out = {}
    for path, stat in storage.scan(PACKS).items():
        ref = pack_ref(path)
        if ref is not None:
            out[ref] = stat
    return out


def held(storage: Storage, refs: Iterable[tuple[ContainerRef, ObjectStat | None]],
         problems: list[str], v1_records: list[str] | None = None,
         repo: Repository | None = None) -> list[Held]:
    """The headers of ``refs``, by ranged reads of their first 64 KiB made ``BATCH`` at a time
    (overlapped); unreadable ones are reported, not held. The age and size come from the
    listing stat given with a ref (no request), else are asked. Version 1 records among them
    (an upgraded store) hold no bodies: their paths go to ``v1_records`` when given.
    ``repo``: headers this process read before under the same ETag are not read again."""
    out = []
    todo = []
    for ref, stat in refs:
        c = known_header(repo, container_path(ref), stat) if repo is not None else None
        if c is not None and stat is not None:
            out.append(Held(ref, c, stat.mtime, stat.size, stat.etag))
        else:
            todo.append((ref, stat))
    for i in range(0, len(todo), BATCH):
        part = todo[i:i + BATCH]
        try:
            got = storage.read_ranges([(container_path(r), 0, ct.HEAD_READ) for r, _ in part])
        except (CkptfsError, OSError) as e:  # one failed read: ask each, to name which
            got = [_first(storage, container_path(r), problems) for r, _ in part]
            problems.append(f"(batch header read) {e}")
        for (ref, stat), first in zip(part, got):
            path = container_path(ref)
            if first is None:
                continue  # absent (deleted since the listing)
            try:
                c = header_from(storage, path, first, what=path)
            except FileNotFoundError:
                continue
            except CkptfsError as e:
                if v1_records is not None and isinstance(ref, RecordRef) and _v1(first):
                    v1_records.append(path)
                else:
                    problems.append(f"{path}: {e}")
                continue
            except OSError as e:
                problems.append(f"{path}: {e}")
                continue
            if stat is None:
                mtime, size, etag = storage.mtime(path), storage.size(path) or 0, None
            else:
                mtime, size, etag = stat.mtime, stat.size, stat.etag
                if repo is not None:
                    remember_header(repo, path, stat, c)
            out.append(Held(ref, c, mtime, size, etag))
    return out


def _first(storage: Storage, path: str, problems: list[str]) -> bytes | None:
    try:
        return storage.read_range(path, 0, ct.HEAD_READ)
    except FileNotFoundError:
        return None
    except (CkptfsError, OSError) as e:
        problems.append(f"{path}: {e}")
        return None


def _v1(first: bytes) -> bool:
    return len(first) >= 1 and 0xa0 <= first[0] <= 0xbf  # a CBOR map: a v1 record


def forwards(storage: Storage, problems: list[str]) -> dict[str, ct.Forward]:
    """Every forward of the store, by the path of the container it stands for (one listing,
    the forwards read together). Names under ``moved/`` that are no forward's are skipped."""
    out: dict[str, ct.Forward] = {}
    paths = sorted(p for p in storage.scan(MOVED) if forward_ref(p) is not None)
    try:
        got: list[bytes | None] = storage.read_many(paths)
    except (CkptfsError, OSError):  # one failed read: read each, to know which
        got = [_read_or_none(storage, p, problems) for p in paths]
    for path, data in zip(paths, got):
        if data is None:
            continue
        try:
            out[path[len(MOVED) + 1:]] = ct.Forward.from_bytes(data, what=path)
        except (CkptfsError, OSError) as e:
            problems.append(f"{path}: {e}")
    return out


def _read_or_none(storage: Storage, path: str, problems: list[str]) -> bytes | None:
    try:
        return storage.read(path)
    except FileNotFoundError:
        return None
    except (CkptfsError, OSError) as e:
        problems.append(f"{path}: {e}")
        return None


def _copy_bodies(storage: Storage, todo: list[tuple[Held, Body]]
                 ) -> list[tuple[Digest, int, bytes]]:
    """The framed bytes of each body (read back from its container and verified)."""
    from ckptfs.format.models import ChunkRef
    from ckptfs.store.containers import unframe_body

    items = [(container_path(h.ref), h.container.body_start + b.offset,
              h.container.body_start + b.offset + b.stored) for h, b in todo]
    got = storage.read_ranges(items)
    out = []
    for (h, b), stored in zip(todo, got):
        if unframe_body(stored, ChunkRef(b.digest, b.size), where="repack") is None:
            raise CkptfsError(
                f"{container_path(h.ref)}: body {b.digest} is missing or damaged; it is kept "
                "in place and nothing of this container is deleted. Run 'ckptfs verify'.")
        assert stored is not None
        out.append((b.digest, b.size, stored))
    return out


def repack(storage: Storage, victims: list[Held], keep: Callable[[Digest], bool], *,
           writer: str, dry_run: bool = False, report: RepackReport | None = None,
           drop_from_forwards: Callable[[Digest], bool] | None = None,
           lease_keep: Callable[[], None] = lambda: None) -> RepackReport:
    """Delete the containers ``victims``, after copying each body ``keep`` says to keep into
    new packs and writing forwards for them; fix every forward pointing into a victim.
    ``drop_from_forwards``: digests no forward may name any more (erase; default: the bodies
    ``keep`` rejects, among those the victims held)."""
    report = RepackReport() if report is None else report
    fwd = forwards(storage, report.problems)
    moving: list[tuple[Held, Body]] = []
    seen: set[Digest] = set()
    for h in victims:
        for b in h.container.header.bodies:
            if keep(b.digest) and b.digest not in seen:
                seen.add(b.digest)
                moving.append((h, b))
    victim_refs = {h.ref for h in victims}
    if dry_run:
        report.containers_deleted += len(victims)
        report.bodies_moved += len(moving)
        report.bytes_moved += sum(b.stored for _, b in moving)
        report.bytes_freed += sum(h.stored for h in victims) - sum(b.stored for _, b in moving)
        return report
    new: dict[Digest, Location] = {}
    moved_bytes = 0
    if moving:
        from ckptfs.storage.encrypted import writer_for

        framed = _copy_bodies(storage, moving)
        # bodies go into packs of their own container's key scope (encrypted stores; one group
        # on any other storage)
        groups: dict[bytes, tuple[Storage, list[tuple[Digest, int, bytes]]]] = {}
        for (h, _), body in zip(moving, framed):
            key, view = writer_for(storage, container_path(h.ref))
            groups.setdefault(key, (view, []))[1].append(body)
        for view, part in groups.values():
            objects, locs = pack_bodies(part, target=PACK_TARGET, writer=writer,
                                        shuffle=random_order(view))
            view.write_many(objects)
            new.update(locs)
        moved_bytes = sum(len(b) for _, _, b in framed)
        report.bodies_moved += len(framed)
        report.bytes_moved += moved_bytes
    lease_keep()
    dropped = drop_from_forwards or (lambda d: not keep(d))
    # forwards: one for every victim that held a kept body, and every old one fixed
    writes: dict[str, dict[Digest, Location]] = {}
    for h in victims:
        kept = {b.digest: new[b.digest] for b in h.container.header.bodies if b.digest in new}
        if kept:
            writes[container_path(h.ref)] = kept
    deletes: list[str] = []
    for path, f in fwd.items():
        rows = {}
        for d, loc in f.bodies.items():
            if dropped(d) and (loc.container in victim_refs or drop_from_forwards is not None):
                continue
            rows[d] = new.get(d, loc) if loc.container in victim_refs else loc
        if path in writes:
            rows.update(writes.pop(path))
        if rows != dict(f.bodies):
            if rows:
                writes[path] = rows
            else:
                deletes.append(forward_path(path))
    for path, rows in writes.items():
        storage.replace(forward_path(path), ct.Forward(rows).to_bytes())
        report.forwards_written += 1
    lease_keep()
    # conditional where the backend offers it: a container whose ETag changed since it was
    # judged is kept (it cannot be the bytes judged; spec/v2.md 9.2 says why it cannot happen
    # under the protocol: a pack's name is its digest, a record is created once)
    changed: set[str] = set(storage.delete_many_if((container_path(h.ref), h.etag) for h in victims))
    if changed:
        report.problems += [f"{p}: changed since gc judged it; kept" for p in sorted(changed)]
        victims = [h for h in victims if container_path(h.ref) not in changed]
    storage.delete_many(deletes)
    report.forwards_deleted += len(deletes)
    report.containers_deleted += len(victims)
    report.containers_repacked += sum(1 for h in victims
                                      if any(b.digest in new for b in h.container.header.bodies))
    report.bytes_freed += sum(h.stored for h in victims) - moved_bytes
    return report
