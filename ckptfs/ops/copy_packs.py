"""The bodies a copy into a v2 destination sends, read from the source as they are stored.

A source pack whose chunks the destination holds none of is **moved as a pack**: its file is
read whole, its name checked (the BLAKE3-256 of the file, spec/v2.md 3.4), its header decoded
and every body verified by digest, then the same bytes are written under the same name, and
the destination's records locate their chunks at the same offsets. Nothing is unframed and
framed again, and one PUT carries it. A pack whose bytes do not match its name, or that does
not decode, or holds a damaged body, is **refused**: it is not copied as a pack (the
destination never gets an object whose name lies about its bytes); the chunks the snapshots
need are then read one by one through the reader, each verified by its own digest, and
repacked (a damaged one stops the copy of that snapshot, as for any source). A pack some of
whose chunks the destination holds already is repacked too: only the chunks it lacks go, in
the copy's own packs.

Every other body (in a source record, or in a refused pack) is sent as its stored framed
bytes, verified by digest (``ChunkReader.read_stored``): a body is compressed once, by the
writer that first stored it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import attrs

from ckptfs.errors import FormatError
from ckptfs.format import containers as ct
from ckptfs.format.containers import Location, PackHeader, PackRef, frame_bodies
from ckptfs.format.digest import Digest
from ckptfs.format.models import ChunkRef
from ckptfs.format.names import pack_path
from ckptfs.store.containers import unframe_body
from ckptfs.store.repository import Repository


@attrs.frozen
class Gathered:
    """What one snapshot needs sent: source packs moved whole (path, bytes) with where their
    bodies land, and framed bodies (digest, size, stored) for a record or the copy's packs."""

    moved: list[tuple[str, bytes]]
    placed: dict[Digest, Location]
    bodies: list[tuple[Digest, int, bytes]]


class SourceBodies:
    """Reads the bodies a copy sends from one source store (module docstring). Remembers, per
    source pack, whether it was moved or not, so that each pack is judged once per copy."""

    def __init__(self, src: Repository, *, move: bool = True) -> None:
        self.src = src
        #: False: no pack is moved whole (a plaintext source's packs keep the manifest's body
        #: order, which an encrypted destination's packs must not: spec/encryption.md 5.3)
        self.move = move
        #: pack name -> True (moved by this copy) / False (repacked or refused)
        self.decided: dict[Digest, bool] = {}
        #: packs refused: their bytes did not match their name, or they did not decode
        self.refused: list[str] = []

    def gather(self, need: Sequence[ChunkRef], held: Callable[[Digest], bool], *,
               where: str) -> Gathered:
        """The bodies of ``need`` (chunks the destination lacks). ``held(d)``: the destination
        holds ``d`` already, or this copy is sending it (then a pack holding it is repacked)."""
        src = self.src
        if src.objects.layout < 2:  # v1 loose chunks: read and verified, framed for a container
            contents = src.objects.get_chunks(list(need), where=where)
            return Gathered([], {}, frame_bodies((c.digest, b) for c, b in zip(need, contents)))
        by_pack: dict[PackRef, list[ChunkRef]] = {}
        rest: list[ChunkRef] = []
        for c in need:
            loc = src.objects.locations.get(c.digest)
            if self.move and loc is not None and isinstance(loc.container, PackRef) \
                    and loc.container.digest not in self.decided:
                by_pack.setdefault(loc.container, []).append(c)
            else:
                rest.append(c)
        moved: list[tuple[str, bytes]] = []
        placed: dict[Digest, Location] = {}
        for ref, cs in by_pack.items():
            got = self._move(ref, held, where)
            if got is None:
                rest += cs
                continue
            moved.append(got[0])
            placed.update(got[1])
        rest = [c for c in rest if c.digest not in placed]
        stored = src.objects.reader.read_stored(rest, where=where)
        return Gathered(moved, placed, [(c.digest, c.size, b) for c, b in zip(rest, stored)])

    def _move(self, ref: PackRef, held: Callable[[Digest], bool], where: str
              ) -> tuple[tuple[str, bytes], dict[Digest, Location]] | None:
        """The pack's path and bytes and its bodies' locations, if it is to be moved whole."""
        path = pack_path(ref.digest)
        self.decided[ref.digest] = False
        try:
            data = self.src.storage.read(path)
        except FileNotFoundError:
            return None  # moved by maintenance: the reader follows the forward
        if Digest.of(data) != ref.digest:
            self.refused.append(path)
            return None
        if _shared_pack(self.src, path):
            return None  # bodies of many runs' scopes: each run's own are repacked
        try:
            c = ct.decode(data, what=f"{self.src.url}: {path}")
        except FormatError:
            self.refused.append(path)
            return None
        if not isinstance(c.header, PackHeader):
            self.refused.append(path)
            return None
        locs = ct.locations(c, ref)
        if any(held(d) for d in locs):
            return None  # the destination holds some of it: repacked, only what it lacks
        for b in c.header.bodies:
            loc = locs[b.digest]
            body = data[loc.start:loc.start + loc.stored]
            if unframe_body(body, ChunkRef(b.digest, b.size), where=where) is None:
                self.refused.append(path)
                return None
        self.decided[ref.digest] = True
        return (path, data), locs


def _shared_pack(src: Repository, path: str) -> bool:
    """Whether ``path`` is a pack of an encrypted source's ``shared`` key scope
    (spec/encryption.md 4.4). Its bodies serve records of many scopes: moved whole into the
    scope of the first run copied, the next run would need the same pack in its own scope at
    the same path. A copy sends each run the bodies it needs, in packs of its own scope."""
    from ckptfs.storage.encrypted import EncryptedStorage
    from ckptfs.storage.keyring import SHARED

    st = src.storage
    return isinstance(st, EncryptedStorage) and st.scope_of(path).kind == SHARED
