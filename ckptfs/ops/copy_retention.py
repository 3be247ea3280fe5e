"""What ``copy`` carries besides snapshots: the retention layer's control objects of a run
(spec/retention.md section 9, "Copies").

A copy is a **backup** by default: the destination keeps its own history and its own
retention (``forget`` there), so the source's forgets are not repeated. ``mirror=True`` repeats
them. Either way every rule fails closed, so a copy never makes data live longer or come back:
- a tombstone in the source erases the run (or snapshot) in the destination too, or, when the
  destination holds nothing of it, arrives there (with a fence) before anything else;
- retired markers: a seq retired in the destination stays retired (it is never sent again);
  a seq the source retired that the destination holds no record of, below a record it holds
  or gets, is retired there too (a gap needs a marker, spec/retention.md 3). With ``mirror``,
  the marker is the merge of both stores' (a seq retired in either stays retired), and the
  destination's records it hides become invisible as a forget there would leave them: the
  records stay as strays, since later records may locate their bodies in them (spec/v2.md
  9.1), and its gc repacks them;
- expiry overrides arrive before the records they govern; where both stores hold one, the
  earlier expiry wins, and no snapshot's effective expiry in the destination ends up later
  than in the source (a lifetime belongs to the data, like the manifest's ``expires``, and a
  backup does not lengthen it);
- a snapshot already expired (in either store) is not copied: its seq is retired instead;
- nothing of a run the destination holds is changed, and nothing added to it, before
  ``History.check`` has shown that it is the source's run wherever that matters
  (ops/copy_history.py); otherwise the run is a conflict, left as it is.

``dry=True`` decides the same and writes nothing: the report says what a copy would do.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import attrs

from ckptfs.errors import CkptfsError, ConflictError
from ckptfs.format.digest import Digest
from ckptfs.format.lifecycle import FENCE_ALL, Expiry, Retired, Tombstone
from ckptfs.format.names import (
    EXPIRY,
    RETIRED,
    expiry_path,
    parse_seq_name,
    retired_dir,
    run_dir,
    seq_name,
    tombstone_path,
)
from ckptfs.ops.copy_history import History
from ckptfs.ops.erase import erase
from ckptfs.storage.base import Storage
from ckptfs.store.lifecycle import (
    read_expiry,
    read_retired,
    record_names_of,
    read_tombstone,
    snapshot_tombstones,
    tombstoned,
    write_retired,
)
from ckptfs.store.repository import Repository


@attrs.define
class LifeReport:
    """What the copy did to the destination's retention objects."""

    controls_written: int = 0
    erased: list[str] = attrs.field(factory=list)
    #: ``RUN@SEQ`` the copy retired in the destination because the source forgot them
    #: (``mirror`` only)
    forgotten: list[str] = attrs.field(factory=list)


def tombstoned_runs(storage: Storage) -> set[str]:
    """Runs with a tombstone (of the whole run or of one snapshot) in a store."""
    return {run_id for run_id, _ in tombstoned(storage)}


def _overrides(storage: Storage, run_id: str, names: Sequence[str] | None = None
               ) -> dict[int | None, Expiry]:
    """The run's expiry overrides: key None for the run's own, else the snapshot's seq.
    ``names``: the files of the run folder's listing when the caller holds it already."""
    out: dict[int | None, Expiry] = {}
    for name in (record_names_of(storage, storage.listing(run_dir(run_id))) if names is None
                 else names):
        if name == EXPIRY:
            seq: int | None = None
        elif name.startswith(EXPIRY + "-") and parse_seq_name(name[len(EXPIRY) + 1:]):
            seq = parse_seq_name(name[len(EXPIRY) + 1:])
        else:
            continue
        e = read_expiry(storage, run_id, seq)  # unreadable: CorruptObject, the copy stops
        if e is not None:
            out[seq] = e
    return out


def _closed(marker: Retired | None) -> bool:
    """A fence that keeps seqs: one whose store's reach ``_forgot`` can tell."""
    return marker is not None and marker.fenced and bool(marker.kept)


def _forgot(marker: Retired | None, erased: set[int], beyond: set[int], *,
            head_kept: bool = False) -> Retired | None:
    """``marker`` as far as it retires seqs its store held (forgot or erased), keeping the
    seqs of ``beyond`` above them (spec/retention.md 9, "Erase fences"). An erase fence also
    retires every seq above the run's head, which the store never held: it stops a stale
    writer there (section 5), it is no forget, and a copy neither forgets a record there nor
    is refused there. While a fence keeps a seq, the highest seq its store ever held is the
    highest it keeps or erased (the head is forgotten only with the whole run), its *reach*;
    a fence that keeps nothing tells nothing of where the run ended and retires every seq.
    ``head_kept``: only when the reach is a kept seq (a visible head, which the copy's proof
    of one history compares; an erased head is not compared, and nothing goes above it)."""
    if marker is None or not _closed(marker):
        return marker
    reach = max({*marker.kept, *erased})
    above = {s for s in beyond if s > reach}
    if not above or head_kept and reach not in marker.kept:
        return marker
    return attrs.evolve(marker, kept=tuple(sorted({*marker.kept, *above})))


def _stone_ids(stone: Tombstone | None) -> tuple[tuple[int, Digest], ...]:
    return stone.snapshots if stone is not None else ()


def _earlier(a: int | None, b: int | None) -> bool:
    """True when expiry ``a`` comes before ``b`` (None is never)."""
    return a is not None and (b is None or a < b)


class RunLife:
    """Carries one run's control objects from ``src`` to ``dst``, in the order the copy of its
    snapshots needs: ``carry`` before any record, ``admit``/``ready`` around each snapshot,
    ``finish`` at the end."""

    def __init__(self, src: Repository, dst: Repository, run_id: str, now: int,
                 report: LifeReport, dst_stones: set[str] | None = None, *,
                 mirror: bool = False, dry: bool = False) -> None:
        self.src, self.dst, self.run, self.now, self.report = src, dst, run_id, now, report
        #: repeat the source's forgets (else only its erasures, module docstring)
        self.mirror = mirror
        #: decide only: nothing is written to the destination (``copy --dry-run``)
        self.dry = dry
        #: the runs the destination has tombstones of, when the copy listed them once
        self.dst_stones = dst_stones
        self.src_over = _overrides(src.storage, run_id)
        # one listing of the destination's run folder serves its overrides, its records and
        # whether it has retired markers at all (no "retired" folder: no second listing)
        dst.load_config()
        listing = dst.storage.listing(run_dir(run_id))
        names = record_names_of(dst.storage, listing)
        self.dst_over = _overrides(dst.storage, run_id, names)
        self.marker = read_retired(dst.storage, run_id,
                                   None if RETIRED in listing.folders else [])
        #: the marker as the destination holds it (``marker`` may keep more: ``carry``)
        self.stored = self.marker
        self.dst_records = sorted(s for s in map(parse_seq_name, names) if s is not None
                                  and s >= 1)
        #: the destination's visible seqs once ``carry`` has run (what the copy finds present)
        self.dst_seqs: list[int] = []
        self.src_seqs = src.seqs(run_id)
        self.candidates = set(self.src_seqs) | set(self.dst_records)
        self.expired: set[int] = set()  # skipped, to be retired before any record above them
        self.history = History(src, dst, run_id)

    # -- before any record ----------------------------------------------------------------------
    def carry(self) -> list[int]:
        """Tombstones, overrides and the merged marker; the source seqs still to copy or check.
        ConflictError (nothing written) when the destination's run is not the source's."""
        st = self.src.storage
        stone = read_tombstone(st, self.run)
        if stone is not None:
            self._erased_run(stone)
            return []
        if (self.dst_stones is None or self.run in self.dst_stones) \
                and read_tombstone(self.dst.storage, self.run) is not None:
            return []  # erased in the destination: nothing of it may come back
        erased_seqs = snapshot_tombstones(st, self.run)
        erased_ids = [pair for s in erased_seqs
                      for pair in _stone_ids(read_tombstone(st, self.run, s))]
        erased = set(erased_seqs)
        records = set(self.dst_records)
        if _closed(self.marker):  # the source's snapshots above this store's head may come
            self.marker = _forgot(self.marker, set(snapshot_tombstones(self.dst.storage, self.run)),
                                  set(self.src_seqs) - records, head_kept=True)
        before = self._visible_set(records)
        theirs = _forgot(read_retired(st, self.run), erased, self.candidates)
        # what the source says was at seqs it no longer holds: its tombstones and its marker
        erased_ids += theirs.ids if theirs is not None else ()
        hidden = {s for s in before if theirs is not None and not theirs.visible(s)} - erased
        # what the destination will hold visibly, and whether the copy adds to its run
        new = [s for s in self.src_seqs if s not in records and self._visible(s)]
        if self.mirror:
            merged = self._merged(theirs, erased)
            forgets = hidden
        else:  # a backup: only the seqs it never had (gaps) are retired, nothing it holds
            top = max([*before, *new], default=0)
            merged = self._merged(self._gaps(theirs, records, top),
                                  {s for s in erased if s < top})
            forgets = set()
        # to hide or erase a record, or to add records above one the source forgot, the copy
        # must show that the destination's run is the source's (spec/retention.md 9 step 0)
        proof = (before & erased) | (hidden if self.mirror or new else set())
        same = self.history.check(self.src_seqs, before, proof, erased_ids,
                                  expired=self._expired_here)
        # not proven one run: no lifetimes; no run here before or after: none to govern
        for seq in [None, *self.src_seqs] if same and (before or new) else []:
            self._merge_expiry(seq)
        self._write_marker(merged)
        # what the source committed stays visible in the fence of the erase repeated here
        keep = {s for s in self.src_seqs if self._visible(s)} - erased
        for s in sorted(records & erased) if same else []:
            self._erase(s, keep)
        for s in sorted(forgets):
            self.report.forgotten.append(f"{self.run}@{s}")
        for s in erased_seqs if same else []:
            if read_tombstone(self.dst.storage, self.run, s) is None:
                self._put(tombstone_path(self.run, s), st.read(tombstone_path(self.run, s)))
        self.dst_seqs = sorted(s for s in before - forgets - erased if self._visible(s))
        return [s for s in self.src_seqs if self._visible(s)]

    def _gaps(self, theirs: Retired | None, records: set[int], top: int) -> Retired | None:
        """The part of the source's marker that a backup takes: the seqs below ``top`` (the
        highest seq the destination will hold) that the source retired and the destination
        holds no record of; None when there is none. Such a seq would otherwise be a gap
        without a marker, which a stale writer could fill (spec/retention.md 3)."""
        if theirs is None or top <= 1:
            return None
        through = min(theirs.through, top - 1)
        kept = sorted(s for s in set(theirs.kept) | records if s <= through)
        if len(kept) >= through:  # every seq up to ``through`` is kept: it retires nothing
            return None
        return Retired(run=self.run, through=through, kept=tuple(kept),
                       created=self.now).with_ids(theirs.ids)

    def _erased_run(self, stone: Tombstone) -> None:
        """The run was erased in the source: erase it here too (when this store's run is
        that run, or this store is erasing it itself), or fence it and put the tombstone here
        when this store holds none of its records."""
        st, dt = self.src.storage, self.dst.storage
        theirs = read_tombstone(dt, self.run)
        records = self.dst.record_seqs(self.run)
        if records and theirs is None:
            self.history.check((), records, erased_ids=stone.snapshots, whole=True)
        if records or theirs is not None and theirs.state == "erasing":
            self._erase(None)
            return
        old = self.marker
        self._publish(Retired(run=self.run, through=FENCE_ALL, kept=(), created=self.now))
        if not self.dry and (old is None or not old.fenced) and self.dst.record_seqs(self.run):
            self._withdraw_fence(old)
        if theirs is None:
            self._put(tombstone_path(self.run), st.read(tombstone_path(self.run)))

    def _expired_here(self, seq: int) -> bool:
        """True when the destination's snapshot at ``seq`` has expired there (unreadable: no)."""
        try:
            when = self.dst.expiry(self.dst.snapshot_at(self.run, seq))
        except CkptfsError:
            return False
        return when is not None and when <= self.now

    def _withdraw_fence(self, old: Retired | None) -> None:
        """A writer started a run of this id in the destination while the fence went up (it
        creates its record before it checks for a fence, so its record is listed by now): its
        commit returned, and a fence must not hide it. Take the fence back (the marker before
        it returns) and report a conflict; a writer that saw the fence has withdrawn itself."""
        if old is not None:
            write_retired(self.dst.storage, old)
        self.dst.storage.delete(f"{retired_dir(self.run)}/{seq_name(FENCE_ALL)}")
        self.marker = self.stored = old
        raise ConflictError(
            f"run {self.run!r} was erased in {self.src.url}, and a run of the same id was "
            f"started in {self.dst.url} while the copy fenced it there: that run is another "
            "history and was left as it is. Erase it there too if it must go ('ckptfs erase').")

    def _erase(self, seq: int | None, keep: set[int] | None = None) -> None:
        """Repeat the source's erase of ``seq`` (None: the run) here. Its fence keeps ``keep``
        besides this store's visible seqs: the source's snapshots this copy brings, which a
        fence that retired every seq above this store's head would refuse (spec/retention.md
        9, "Erase fences"); a stale writer is refused there all the same (writer rule)."""
        stone = read_tombstone(self.src.storage, self.run, seq)
        assert stone is not None
        self.report.erased.append(self.run if seq is None else f"{self.run}@{seq}")
        if self.dry:
            return
        erase(self.dst, self.run, seq=seq, reason=stone.reason, keep=keep or (), now=self.now)
        self.marker = self.stored = read_retired(self.dst.storage, self.run)

    # -- expiry --------------------------------------------------------------------------------
    def _merge_expiry(self, seq: int | None) -> None:
        """Give the destination the source's override unless it holds an earlier one."""
        theirs, ours = self.src_over.get(seq), self.dst_over.get(seq)
        if theirs is not None and (ours is None or _earlier(theirs.expires, ours.expires)):
            self._put(expiry_path(self.run, seq), theirs.to_bytes())
            self.dst_over[seq] = theirs

    def _effective(self, over: dict[int | None, Expiry], seq: int,
                   manifest: Callable[[], int | None]) -> int | None:
        for key in (seq, None):
            if key in over:
                return over[key].expires
        return manifest()

    def admit(self, seq: int, manifest: Callable[[], int | None], *, present: bool) -> bool:
        """Make the destination's expiry of ``seq`` no later than the source's; False (and the
        seq is to be retired, not copied) when it is not ``present`` and has expired."""
        theirs = self._effective(self.src_over, seq, manifest)
        ours = self._effective(self.dst_over, seq, manifest)
        when = theirs if _earlier(theirs, ours) else ours
        if not present and when is not None and when <= self.now:
            self.expired.add(seq)
            return False
        if _earlier(theirs, ours):
            e = Expiry(run=self.run, seq=seq, expires=theirs, set_at=self.now)
            self._put(expiry_path(self.run, seq), e.to_bytes())
            self.dst_over[seq] = e
        return True

    # -- retired ranges ------------------------------------------------------------------------
    def ready(self, seq: int | None = None) -> None:
        """Before the record of ``seq`` is created: retire the expired seqs skipped below it."""
        due = {s for s in self.expired if seq is None or s < seq}
        if due:
            self._publish(None, due)
            self.expired -= due

    def finish(self) -> None:
        """After the run's last record: retire every expired seq still pending."""
        self.ready()

    def _visible(self, seq: int) -> bool:
        return self.marker is None or self.marker.visible(seq)

    def _visible_set(self, seqs: set[int]) -> set[int]:
        return {s for s in seqs if self._visible(s)}

    def _merged(self, other: Retired | None, hidden: set[int] | None = None) -> Retired | None:
        """The marker that retires what the destination's marker, ``other`` and ``hidden``
        retire (a seq retired anywhere stays retired); None when nothing is retired."""
        hidden = hidden or set()
        markers = [m for m in (self.marker, other) if m is not None]
        throughs = [m.through for m in markers] + list(hidden)
        if not throughs:
            return None
        through = max(throughs)
        kept = tuple(sorted(s for s in self.candidates if s <= through and s not in hidden
                            and all(m.visible(s) for m in markers)))
        return Retired(run=self.run, through=through, kept=kept, created=self.now).with_ids(
            *(m.ids for m in markers))

    def _write_marker(self, marker: Retired | None) -> None:
        """Publish ``marker`` in the destination unless it retires what it already retires."""
        if marker is None:
            return
        self.marker = marker
        if self.stored is not None and (self.stored.through, set(self.stored.kept)) == (
                marker.through, set(marker.kept)):
            return
        self.stored = marker
        if not self.dry:
            write_retired(self.dst.storage, marker)
        self.report.controls_written += 1

    def _publish(self, other: Retired | None, hidden: set[int] | None = None) -> None:
        self._write_marker(self._merged(other, hidden))

    def _put(self, path: str, data: bytes) -> None:
        if not self.dry:
            self.dst.storage.replace(path, data)
        self.report.controls_written += 1
