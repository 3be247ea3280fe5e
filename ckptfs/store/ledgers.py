"""Reading the effect ledgers of many snapshots in a row (verify, gc, erase, copy) in time
linear in the ledger's length, not quadratic.

A run's ledger only grows: each snapshot's ledger content is the previous one plus new records,
held in mostly the same chunks (the writer reuses them and merges small trailing ones). So the
scanner keeps the last ledger it decoded (its chunks' bytes, a BLAKE3 state after its content,
and its fold) and, when the next one extends it, reads only the chunks it does not hold, hashes
and decodes only the new bytes, and folds only the new records. Ledgers already seen (same
content digest) are answered from a cache. Checks are those of a full read: every chunk read
is verified, the content digest and the record count are checked, every record is validated
and folded. Errors are not cached.
"""

from __future__ import annotations

from typing import Any

import attrs

from ckptfs.errors import CorruptSnapshot, FormatError
from ckptfs.format import cbor
from ckptfs.format.digest import Digest, hasher
from ckptfs.format.ledger import Effect, LedgerRef, Record, fold
from ckptfs.format.models import Captured
from ckptfs.store.entry_reads import check_assembled_size
from ckptfs.store.objects import ObjectStore
from ckptfs.store.repository import Snapshot

#: ``(key, result_content)`` of every record of a ledger whose result is stored as chunks
Results = tuple[tuple[str, Captured], ...]


@attrs.define
class _Decoded:
    """The last ledger decoded: its pieces (chunk digest or None when inline, bytes), the hash
    state after its content, its record count, fold and large results."""

    pieces: list[tuple[Digest | None, bytes]]
    hash_state: Any
    count: int
    effects: dict[str, Effect]
    results: list[tuple[str, Captured]]


class LedgerScanner:
    """Large effect results of many snapshots' ledgers; each ledger chunk read once per
    extension chain (a fork's ledger re-reads what it shares with an older ledger)."""

    def __init__(self, objects: ObjectStore) -> None:
        self.objects = objects
        self._seen: dict[Digest, Results] = {}
        self._last: _Decoded | None = None
        self._offered: dict[Digest, bytes] = {}

    def offer(self, d: Digest, data: bytes) -> None:
        """Hand over a ledger chunk the caller has just read and verified (verify --read-data),
        for the next ledger read to use instead of reading it again."""
        self._offered[d] = data

    def results(self, snap: Snapshot) -> Results:
        """``(key, result_content)`` for the records of ``snap``'s ledger (verified)."""
        m = snap.manifest
        if m.ledger is None:
            return ()
        where = f"snapshot {snap.digest.short} (run {m.run!r} seq {m.seq}) ledger"
        ref = LedgerRef.from_cbor(m.ledger, what=where)
        check_assembled_size(ref.size, where=where)
        hit = self._seen.get(ref.digest)
        if hit is not None:
            return hit
        last, self._last = self._last, None  # cleared until this ledger proves sound
        try:
            dec = self._decode(ref, last, where)
        except FormatError as e:
            raise CorruptSnapshot(str(e)) from e
        self._last = dec
        out = self._seen[ref.digest] = tuple(dec.results)
        return out

    def _pieces(self, ref: LedgerRef, last: _Decoded | None, where: str
                ) -> list[tuple[Digest | None, bytes]]:
        """The ledger content in pieces; chunks the last ledger held are not read again."""
        if ref.inline is not None:
            return [(None, ref.inline)]
        held = {d: b for d, b in last.pieces if d is not None} if last else {}
        held.update(self._offered)
        self._offered.clear()
        todo = [c for c in ref.chunks if c.digest not in held]
        held.update(zip((c.digest for c in todo), self.objects.get_chunks(todo, where=where)))
        return [(c.digest, held[c.digest]) for c in ref.chunks]

    def _decode(self, ref: LedgerRef, last: _Decoded | None, where: str) -> _Decoded:
        pieces = self._pieces(ref, last, where)
        tail = _extension(last.pieces, pieces) if last is not None else None
        if last is not None and tail is not None:
            h = last.hash_state.copy()
            dec = _Decoded(pieces, h, last.count, last.effects, last.results)
        else:
            tail = b"".join(b for _, b in pieces)
            h = hasher()
            dec = _Decoded(pieces, h, 0, {}, [])
        h.update(tail)
        if Digest(h.digest()) != ref.digest:
            raise CorruptSnapshot(f"{where}: content does not match its digest {ref.digest}")
        for item in cbor.decode_sequence(tail, what=where):
            r = Record.from_cbor(item, what=f"{where} record {dec.count}")
            dec.effects[r.key] = fold(dec.effects.get(r.key), r, what=where)
            if r.result_content is not None:
                dec.results.append((r.key, r.result_content))
            dec.count += 1
        if dec.count != ref.count:
            raise CorruptSnapshot(f"{where}: holds {dec.count} records, count says {ref.count}")
        return dec


def _extension(old: list[tuple[Digest | None, bytes]], new: list[tuple[Digest | None, bytes]]
               ) -> bytes | None:
    """The bytes ``new`` content adds to ``old`` when it starts with it, else None. Chunks the
    two share at the start are not compared; only the rest is."""
    k = 0
    while k < min(len(old), len(new)) and old[k][0] is not None and old[k][0] == new[k][0]:
        k += 1
    old_rest = b"".join(b for _, b in old[k:])
    new_rest = b"".join(b for _, b in new[k:])
    return new_rest[len(old_rest):] if new_rest.startswith(old_rest) else None
