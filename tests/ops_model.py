"""The reference model of tests/test_ops_stateful.py: what each store should hold after any
sequence of the operations (checkpoint, fork, effects, forget, gc, erase, copy, LangGraph prune
and delete_thread), written from the spec (spec/v2.md 9, spec/retention.md), not the code.

A store's model knows every snapshot it holds a record of (``held``: retained ones and
forgotten strays), which seqs are retired (forgotten), its tombstones, and the marker tokens of
the content erased there (``dead``). Each snapshot carries unique marker tokens ("MK" + six
digits + "Z"); a token may be in a store only while some snapshot it holds (retained or
forgotten, not erased) contains it.
"""

from __future__ import annotations

import re
from typing import Any

import attrs

TOKEN = re.compile(rb"MK\d{6}Z")


def token(uid: int) -> str:
    return f"MK{uid:06d}Z"


def tokens_in(*parts: Any) -> frozenset[str]:
    """Every marker token in ``parts`` (strings, bytes, lists and dicts of them, nested)."""
    out: set[str] = set()

    def walk(v: Any) -> None:
        if isinstance(v, (bytes, bytearray)):
            out.update(t.decode() for t in TOKEN.findall(bytes(v)))
        elif isinstance(v, str):
            walk(v.encode())
        elif isinstance(v, dict):
            for k, x in v.items():
                walk(k)
                walk(x)
        elif isinstance(v, (list, tuple)):
            for x in v:
                walk(x)

    for p in parts:
        walk(p)
    return frozenset(out)


@attrs.frozen
class Snap:
    """One snapshot as its commit reported it. ``state``: what ``read`` must give back (a
    streamed blob as its bytes); ``effects``: key -> (status, result) of its ledger."""

    run: str
    seq: int
    id: str
    parent: str | None
    state: dict[str, Any]
    labels: dict[str, str]
    tokens: frozenset[str]
    effects: dict[str, tuple[str, Any]]


@attrs.define
class StoreModel:
    name: str
    held: dict[str, dict[int, Snap]] = attrs.field(factory=dict)
    retired: dict[str, set[int]] = attrs.field(factory=dict)
    erased_runs: set[str] = attrs.field(factory=set)
    erased_snaps: set[tuple[str, int]] = attrs.field(factory=set)
    #: tokens of erased snapshots, forgotten ones among them
    dead: set[str] = attrs.field(factory=set)
    upgraded: bool = False
    #: the store requires ``delta-headers`` (spec/v2.md 3.1.2): a record may be stored against
    #: an earlier record of its run, its *base*, which stays visible while it is (9.1)
    delta: bool = False
    #: (run, seq) -> the seq of its record's header base, in this store (which record a
    #: writer stores against is its choice; what follows from it is the spec's)
    bases: dict[tuple[str, int], int] = attrs.field(factory=dict)

    # -- views ---------------------------------------------------------------------------
    def retained(self, run: str) -> dict[int, Snap]:
        gone = self.retired.get(run, set())
        return {s: x for s, x in self.held.get(run, {}).items() if s not in gone}

    def runs(self) -> list[str]:
        return sorted(r for r in self.held if self.retained(r))

    def head(self, run: str) -> int:
        return max(self.retained(run), default=0)

    def forgotten(self, run: str) -> dict[int, Snap]:
        gone = self.retired.get(run, set())
        return {s: x for s, x in self.held.get(run, {}).items() if s in gone}

    def live_tokens(self) -> set[str]:
        return {t for snaps in self.held.values() for x in snaps.values() for t in x.tokens}

    def forbidden(self) -> set[str]:
        """Tokens no byte of which may be in the store once a gc past the grace ran."""
        return self.dead - self.live_tokens()

    # -- operations ----------------------------------------------------------------------
    def commit(self, snap: Snap) -> None:
        self.held.setdefault(snap.run, {})[snap.seq] = snap

    def needed(self, run: str, keep: set[int]) -> set[int]:
        """The seqs the records of ``keep`` need as header bases, directly or through other
        bases (none in a store without ``delta-headers``)."""
        out: set[int] = set()
        todo = list(keep)
        while todo:
            b = self.bases.get((run, todo.pop()))
            if b is not None and b not in out:
                out.add(b)
                todo.append(b)
        return out

    def _retire(self, run: str, drop: set[int]) -> None:
        """A forget of ``drop``: all of it with the whole run, else less the bases of the
        records that stay visible (spec/v2.md 9.1)."""
        vis = set(self.retained(run))
        drop &= vis
        if drop and drop != vis:
            drop -= self.needed(run, vis - drop)
        self.retired.setdefault(run, set()).update(drop)

    def forget_keep_last(self, n: int) -> None:
        for run in list(self.held):
            vis = sorted(self.retained(run))
            self._retire(run, set(vis[:-n] if n else vis))

    def forget_seq(self, run: str, seq: int) -> None:
        assert seq != self.head(run), "a head is forgotten only with its run"
        self._retire(run, {seq})

    def erase_refused(self, run: str, seq: int) -> bool:
        """Erasing ``seq`` alone is refused while a visible record is stored against it."""
        return seq in self.needed(run, set(self.retained(run)) - {seq})

    def erase_run(self, run: str) -> None:
        snaps = self.held.pop(run, {})
        self.retired.pop(run, None)
        for x in snaps.values():
            self.dead |= x.tokens
        self.erased_runs.add(run)

    def erase_snap(self, run: str, seq: int) -> None:
        x = self.held.get(run, {}).pop(seq, None)
        if x is not None:
            self.dead |= x.tokens
        self.erased_snaps.add((run, seq))

    def prune_keep_latest(self, runs: list[str]) -> None:
        for run in runs:
            vis = sorted(self.retained(run))
            self._retire(run, set(vis[:-1]))


def copy(src: StoreModel, dst: StoreModel, *, mirror: bool = False) -> None:
    """What ``copy_runs(src, dst)`` does to the destination (module docstring of
    ckptfs/ops/copy_retention.py): erasures are repeated, forgotten and erased snapshots never
    come back, every retained snapshot of the source the destination lacks arrives."""
    for run in sorted(src.erased_runs):
        if run in dst.held or run not in dst.erased_runs:
            dst.erase_run(run)
    for run, seq in sorted(src.erased_snaps):
        if (run, seq) not in dst.erased_snaps and run not in dst.erased_runs:
            dst.erase_snap(run, seq)
    for run in sorted(src.held):
        if run in dst.erased_runs:
            continue
        if mirror:  # a plain copy is a backup: it keeps the destination's own history
            # forgotten as a forget in the destination would (its records' bases stay)
            theirs = src.retired.get(run, set())
            dst._retire(run, set(theirs))
            dst.retired.setdefault(run, set()).update(
                theirs - set(dst.held.get(run, {})))  # gaps it does not hold: retired too
        gone = dst.retired.get(run, set())
        for seq, snap in sorted(src.retained(run).items()):
            if seq in gone or (run, seq) in dst.erased_snaps or seq in dst.held.get(run, {}):
                continue
            dst.commit(snap)
