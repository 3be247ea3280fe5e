"""Where a LangGraph thread lives in a ckptfs store: run names, labels, and what a saver knows
of one run (``_RunIndex``), with the history labels that make lookups cheap (``chain_labels``)."""

from __future__ import annotations

import builtins
import re
import threading
from collections.abc import Mapping
from typing import Any

import attrs
from langchain_core.runnables import RunnableConfig

from ckptfs.errors import CorruptSnapshot
from ckptfs.format.digest import Digest
from ckptfs.format.models import Schema
from ckptfs.format.names import ENTRY_SEGMENT
from ckptfs.integrations.langgraph.listing import Marks
from ckptfs.integrations.lg_names import EFFECTS_PREFIX as EFFECTS_PREFIX
from ckptfs.integrations.lg_names import RUN_PREFIX as RUN_PREFIX
from ckptfs.integrations.lg_names import _h as _h
from ckptfs.integrations.lg_names import effects_run_id as effects_run_id
from ckptfs.integrations.lg_names import run_id_for as run_id_for
from ckptfs.integrations.lg_names import NS_LABEL, THREAD_LABEL
from ckptfs.integrations.lg_names import thread_prefix as thread_prefix
from ckptfs.store.entries import EntryWriter
from ckptfs.store.repository import Snapshot

SCHEMA = Schema("langgraph", 1)
TAG = "__lg__"
L_KIND = "lg.kind"
L_THREAD = THREAD_LABEL
L_NS = NS_LABEL
L_CID = "lg.checkpoint_id"
L_PARENT = "lg.parent_checkpoint_id"
L_CHANNEL = "lg.channel"
L_VERSION = "lg.version"
L_COPIED = "lg.copied_from"
L_MAX_CID = "lg.max_checkpoint_id"
L_MAX_WID = "lg.max_writes_id"
L_LAST_W = "lg.last_writes_seq"
L_ORDERED = "lg.ordered"
#: checkpoint ids rose (whatever the writes did): checkpoint lookups stay binary searches
L_CP_ORDERED = "lg.checkpoints_ordered"
#: the newest writes snapshot of checkpoint ``lg.max_writes_id`` (async durability commits
#: writes of an older checkpoint after a newer one's: this finds the newest one's anyway)
L_MAX_W_SEQ = "lg.max_writes_seq"
CHAIN = (L_MAX_CID, L_MAX_WID, L_LAST_W, L_ORDERED, L_CP_ORDERED, L_MAX_W_SEQ)
MAX_ID = 1024  # label values are at most 1024 characters
#: runs whose entry writers (the previous content of each channel, for append dedup) are kept
WARM_RUNS = 64
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
_Chunks = builtins.list[tuple[Digest, bytes | memoryview]]


def channel_entry(channel: str) -> str:
    """The entry name of a channel value: the name itself when it is a valid entry segment,
    else a readable form plus a hash (the real name is the entry's ``lg.channel`` label)."""
    if ENTRY_SEGMENT.match(channel) and channel not in (".", ".."):
        return f"channels/{channel}"
    safe = _UNSAFE.sub("-", channel)[:96].lstrip(".-") or "c"
    return f"channels/{safe}.{_h('channel', channel)[:16]}"


def _ids(config: RunnableConfig) -> tuple[str, str]:
    conf = config.get("configurable") or {}
    if conf.get("thread_id") is None:
        raise ValueError("config['configurable']['thread_id'] is required by CkptfsSaver")
    tid, ns = str(conf["thread_id"]), str(conf.get("checkpoint_ns") or "")
    for what, v in (("thread_id", tid), ("checkpoint_ns", ns)):
        if len(v) > MAX_ID:
            raise ValueError(f"{what} is {len(v)} characters; CkptfsSaver keeps ids as ckptfs "
                             f"labels, which hold at most {MAX_ID}: use a shorter id")
    return tid, ns


def _config(thread_id: Any, ns: str, checkpoint_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns,
                             "checkpoint_id": checkpoint_id}}


#: the most snapshots (and decoded metadata) one run's index keeps read: the head and the
#: latest lookups. Without a bound a saver of a long run held every manifest it committed or
#: read, and manifests grow with the state (about 5 KB each at 1,000 messages). A run whose
#: lookups scan every snapshot (its order broke: ``RunLookup._load_all``) keeps them all once
#: loaded, as before: bounded, each lookup would read the whole run again
LOADED_MAX = 64
META_MAX = 1024


def _bounded(d: dict[Any, Any], key: Any, value: Any, limit: int) -> bool:
    """Put ``key`` last in ``d`` and drop the longest-kept entries past ``limit``; True when
    any was dropped."""
    d.pop(key, None)
    d[key] = value
    dropped = False
    while len(d) > limit:
        del d[next(iter(d))]
        dropped = True
    return dropped


@attrs.define
class _RunIndex:
    """What a saver knows of one run: its visible sequence numbers (one listing) and the
    snapshots read so far (lazily, from the head down, or by binary search)."""

    run_id: str
    thread_id: str | None
    ns: str | None
    seqs: builtins.list[int] = attrs.field(factory=list)
    #: snapshots read or committed, at most LOADED_MAX (``remember``)
    loaded: dict[int, Snapshot] = attrs.field(factory=dict)
    complete: bool = False  # every visible snapshot is in ``loaded``
    writers: dict[str, EntryWriter] = attrs.field(factory=dict)
    #: entry name -> what was last packed of a list channel (appends.ListMemo)
    lists: dict[str, Any] = attrs.field(factory=dict)
    rows: dict[Digest, builtins.list[Any]] = attrs.field(factory=dict)
    meta: dict[Digest, Any] = attrs.field(factory=dict)
    #: the run's retired markers when ``seqs`` was last listed whole (None: never looked)
    marks: Marks | None = None
    #: LangGraph waits for this run's writes before its next put (DeltaChannel): writes are
    #: not held for the child's put (fold.py)
    waited_on: bool = False
    #: guards the fields above; held briefly, after (never while taking) a thread lock
    lock: threading.RLock = attrs.field(factory=threading.RLock)

    @property
    def top(self) -> int:
        return self.seqs[-1] if self.seqs else 0

    def check(self, snap: Snapshot) -> Snapshot:
        """``snap`` if it belongs to this (thread, namespace), else CorruptSnapshot."""
        labels = snap.manifest.labels
        tid, ns = labels.get(L_THREAD), labels.get(L_NS)
        if self.thread_id is None or self.ns is None:
            self.thread_id, self.ns = tid, ns
        if (tid, ns) != (self.thread_id, self.ns) or tid is None:
            raise CorruptSnapshot(
                f"run {self.run_id!r} seq {snap.seq} is labelled thread {tid!r} namespace {ns!r}, "
                f"not {self.thread_id!r} {self.ns!r}: it was not written by CkptfsSaver; keep "
                f"runs named {RUN_PREFIX}* for LangGraph threads only")
        return snap

    def reset(self, seqs: builtins.list[int], marks: Marks | None = None) -> None:
        """Adopt a new listing (and the markers read before it): forget what is no longer
        visible."""
        self.marks = marks
        keep = set(seqs)
        self.loaded = {s: v for s, v in self.loaded.items() if s in keep}
        self.complete = self.complete and keep <= self.loaded.keys()
        self.seqs = seqs

    def remember(self, snap: Snapshot) -> Snapshot:
        """Keep ``snap`` read (the longest-kept others beyond LOADED_MAX are dropped, unless
        every visible snapshot is kept: ``complete``)."""
        if self.complete:
            self.loaded[snap.seq] = snap
        elif _bounded(self.loaded, snap.seq, snap, LOADED_MAX):
            self.complete = False
        return snap

    def remember_meta(self, digest: Digest, meta: Any) -> Any:
        """Keep a snapshot's decoded metadata (at most META_MAX of them)."""
        _bounded(self.meta, digest, meta, META_MAX)
        return meta

    def added(self, snap: Snapshot) -> None:
        """Record this saver's own commit (the new head)."""
        self.remember(snap)
        if not self.seqs or self.seqs[-1] < snap.seq:
            self.seqs.append(snap.seq)


def _kind(snap: Snapshot) -> str | None:
    return snap.manifest.labels.get(L_KIND)


def _cid(snap: Snapshot) -> str:
    return snap.manifest.labels.get(L_CID, "")


def chain_labels(head: Mapping[str, str] | None, kind: str, cid: str, seq: int
                 ) -> dict[str, str]:
    """The history labels of a new snapshot at ``seq`` whose run's head has labels ``head``
    (docs/guides/langgraph.md, "Finding checkpoints"): running maxima of checkpoint ids and of
    writes' checkpoint ids, the last writes snapshot, and whether both kept their order."""
    head = head or {}
    ordered = head.get(L_ORDERED) == "true" if head else True
    cp_ordered = checkpoints_ordered(head) if head else True
    top_c, top_w = head.get(L_MAX_CID), head.get(L_MAX_WID)
    out: dict[str, str] = {}
    if L_MAX_W_SEQ in head:
        out[L_MAX_W_SEQ] = head[L_MAX_W_SEQ]
    if kind == "checkpoint":
        ordered = ordered and (top_c is None or cid > top_c)
        cp_ordered = cp_ordered and (top_c is None or cid > top_c)
        top_c = cid if top_c is None else max(top_c, cid)
    elif kind == "writes":
        ordered = ordered and (top_w is None or cid >= top_w)
        if top_w is None or cid >= top_w:
            out[L_MAX_W_SEQ] = str(seq)
        top_w = cid if top_w is None else max(top_w, cid)
        out[L_LAST_W] = str(seq)
    if kind != "writes" and L_LAST_W in head:
        out[L_LAST_W] = head[L_LAST_W]
    if top_c is not None:
        out[L_MAX_CID] = top_c
    if top_w is not None:
        out[L_MAX_WID] = top_w
    if ordered:
        out[L_ORDERED] = "true"
    if cp_ordered:
        out[L_CP_ORDERED] = "true"
    return out


def checkpoints_ordered(head: Mapping[str, str] | None) -> bool:
    """Whether the head vouches that checkpoint ids rose with the sequence number (either
    label: runs written before ``lg.checkpoints_ordered`` existed carry only ``lg.ordered``)."""
    return head is None or head.get(L_ORDERED) == "true" or head.get(L_CP_ORDERED) == "true"
