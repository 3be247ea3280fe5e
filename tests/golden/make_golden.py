"""Write the golden stores in tests/golden/ with this version of ckptfs (one command).

    .venv/bin/python tests/golden/make_golden.py

Each store ``tests/golden/<name>/store`` comes with ``expected.json``: for every committed
snapshot (``run@seq``) its id, metadata and the state the generator *asked* to store (not what a
reader returned), so ``tests/test_golden.py`` proves today's reader against what was written.
The clock is fixed and the data seeded, so a run of this script is reproducible. Regenerate only
for a deliberate format change, and see README.md in this folder first.
"""

from __future__ import annotations

import base64
import json
import random
import shutil
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

import ckptfs  # noqa: E402
from ckptfs.format.digest import Digest  # noqa: E402

#: fixed clock for reproducible manifests: 2026-01-01T00:00:00Z, one second per tick
EPOCH_MS = 1_767_225_600_000
#: an absolute file URL that will not exist on any machine: read leniently, it comes back missing
MISSING_URI = "file:///ckptfs-golden-does-not-exist/tool-output.json"
FAR_FUTURE_S = 7_258_118_400  # 2200-01-01


def migrations() -> ckptfs.Migrations:
    """The golden schemas' migrations: agent@1 -> 2 renames 'messages' to 'history'; shop@1 -> 2
    reshapes the result of the 'search' effect."""
    m = ckptfs.Migrations()

    @m.register("agent", 1)
    def rename_messages(state: dict[str, Any]) -> dict[str, Any]:
        if "messages" in state:
            state["history"] = state.pop("messages")
        return state

    @m.register("shop", 1, ledger_results=lambda effect, r: (
        {"count": r["hits"], "query": r["q"]} if effect == "search" else r))
    def shop_v2(state: dict[str, Any]) -> dict[str, Any]:
        return state

    return m


# -- the JSON form of a state, shared with tests/test_golden.py ---------------------------------
def to_json(value: Any) -> Any:
    """A state value as JSON: bytes, blobs and refs become one-key ``$bytes``/``$blob``/``$ref``
    maps (golden states use no such keys of their own)."""
    if isinstance(value, bytes):
        return {"$bytes": base64.b64encode(value).decode()}
    if isinstance(value, (ckptfs.Blob, ckptfs.StoredBlob)):
        data = value.read()
        return {"$blob": {"digest": Digest.of(data).text, "size": len(data), "type": value.type,
                          "labels": dict(value.labels)}}
    if isinstance(value, ckptfs.Ref):
        return {"$ref": {"uri": value.uri, "digest": value.digest.text if value.digest else None,
                         "size": value.size, "expires_at": value.expires_at,
                         "labels": dict(value.labels), "missing": value.missing is not None}}
    if isinstance(value, dict):
        return {k: to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    return value


@contextmanager
def fixed_clock() -> Iterator[None]:
    ticks = iter(range(EPOCH_MS, EPOCH_MS + 10**9, 1000))
    clock: Callable[[], int] = lambda: next(ticks)  # noqa: E731
    import contextlib
    import importlib

    with contextlib.ExitStack() as stack:  # the modules that read the clock (as of each version)
        for name in ("ckptfs.store.repository", "ckptfs.runtime.run", "ckptfs.runtime.store",
                     "ckptfs.runtime.effects"):
            if hasattr(importlib.import_module(name), "now_ms"):
                stack.enter_context(mock.patch(f"{name}.now_ms", clock))
        yield


class Golden:
    """One golden store being written, and what it is expected to hold."""

    def __init__(self, name: str, **store_options: Any) -> None:
        self.dir = HERE / name
        if self.dir.exists():
            shutil.rmtree(self.dir)
        self.dir.mkdir()
        self.store = ckptfs.open_store(str(self.dir / "store"), **store_options)
        self.expected: dict[str, Any] = {}
        #: per snapshot (run@seq): each effect key's expected fold in its ledger
        self.effects: dict[str, dict[str, Any]] = {}

    def commit(self, run: ckptfs.Run, state: dict[str, Any], boundary: str = "step",
               **kw: Any) -> ckptfs.Snapshot:
        snap = run.checkpoint(state, boundary, **kw)
        self.add(snap, state)
        return snap

    def add(self, snap: ckptfs.Snapshot, state: dict[str, Any]) -> None:
        ledger = snap.manifest.ledger
        self.expected[f"{snap.run}@{snap.seq}"] = {
            "id": snap.id, "schema": str(snap.manifest.schema), "boundary": snap.boundary,
            "parent": snap.parent, "resumed_from": snap.resumed_from, "attempt": snap.attempt,
            "labels": snap.labels, "expires": snap.expires,
            "migrated_from": str(snap.migrated_from) if snap.migrated_from else None,
            "ledger_records": ledger["count"] if ledger else 0,
            "state": to_json({k: _as_restored(v) for k, v in state.items()}),
        }

    def sync(self, run: ckptfs.Run, state: dict[str, Any]) -> None:
        """Add the snapshots that effects committed (their metadata as the store has it)."""
        for snap in self.store.snapshots(run.id):
            if f"{snap.run}@{snap.seq}" not in self.expected:
                self.add(snap, state)

    def finish(self) -> None:
        shutil.rmtree(self.dir / "store" / "tmp", ignore_errors=True)
        doc = {"format": self.store.repo.config.version, "written_by": self.store.writer_name,
               "chunker": self.store.repo.config.chunker.to_cbor(),
               "snapshots": self.expected, "effects": self.effects}
        (self.dir / "expected.json").write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")


def _as_restored(v: Any) -> Any:
    """What a lenient read gives back for a value written now (refs to MISSING_URI are missing)."""
    if isinstance(v, ckptfs.Ref) and v.uri == MISSING_URI:
        return ckptfs.Ref(v.uri, digest=v.digest, size=v.size, expires_at=v.expires_at,
                          labels=v.labels, missing="gone")
    return v


def basic() -> None:
    """Default chunker: values, cbor-seq lists, blobs (zstd and raw), a ref, labels, expiry,
    several snapshots, a resume, a fork and a migrated run."""
    g = Golden("v1-basic")
    rnd = random.Random(1)
    msgs = [{"role": "user", "content": "plan a trip to Lisbon", "n": 0}]
    base = {"plan": {"goal": "trip", "steps": ["search", "book"], "done": None},
            "messages": msgs, "big": 2**70, "neg": -7, "f": 1.5, "flags": [True, False],
            "raw": b"\x00\x01\xff", "text": "h\u00e9llo \u2713", "empty": [], "nested/entry": {}}
    alpha = g.store.start_run("alpha", schema=("agent", 1))
    g.commit(alpha, base, "start")
    msgs = msgs + [{"role": "assistant", "content": "searching", "n": 1,
                    "tool_calls": [{"name": "search", "args": {"q": "Lisbon"}}]}]
    small = ckptfs.Blob(b"tool output\n" * 10, type="text/plain", labels={"tool": "search"})
    g.commit(alpha, {**base, "messages": msgs, "page": small}, labels={"phase": "search"},
             entry_labels={"messages": {"pii": "yes"}})
    msgs = msgs + [{"role": "tool", "content": "result " * 300, "n": 2}]
    state3 = {**base, "messages": msgs, "page": small,
              "report": ckptfs.Blob(b"".join(b"line %d of a long report\n" % i for i in range(6000))),
              "noise": ckptfs.Blob(rnd.randbytes(40_000)),
              "doc": ckptfs.Ref(MISSING_URI, digest=Digest.of(b"gone").text, size=4,
                                labels={"source": "tool"})}
    g.commit(alpha, state3, "before_effect", expires_at=FAR_FUTURE_S)
    resumed = g.store.resume("alpha", lenient_refs=True)
    state4 = {**state3, "messages": msgs + [{"role": "user", "content": "ok", "n": 3}]}
    state4["doc"] = resumed.state["doc"]
    g.commit(resumed, state4, "after_effect")
    beta = g.store.fork("alpha@2", "beta")
    g.commit(beta, {**base, "messages": msgs[:2], "branch": "beta"})
    gamma = g.store.start_run("gamma", schema=("agent", 1))
    g.commit(gamma, {"messages": ["a", "b"], "plan": {"goal": "g"}})
    migrated = g.store.resume("gamma", schema=("agent", 2), migrations=migrations())
    g.commit(migrated, {**migrated.state, "history": ["a", "b", "c"]}, "final")
    g.finish()


def effects() -> None:
    """The effect ledger: completed (small and large results), failed, in doubt, and approvals
    decided and pending, across a resume; then a migration that reshapes a result."""
    g = Golden("v1-ledger")
    state = {"plan": ["search", "fetch", "charge", "email"], "done": []}
    run = g.store.start_run("agent", schema=("shop", 1))
    g.commit(run, state, "start")
    big = {"rows": [{"id": i, "text": "row %d " % i * 20} for i in range(700)]}
    run.effect("search", lambda q: {"hits": 3, "q": q}, "lisbon", key="search-1")
    run.effect("fetch", lambda: big, key="fetch-1")
    try:
        run.effect("charge", _decline, 1250, key="charge-1")
    except ValueError:
        pass
    try:
        run.effect("email", _die, "alice@example.com", key="email-1")
    except KeyboardInterrupt:  # the process "died" after the intent: in doubt
        pass
    g.sync(run, state)
    resumed = g.store.resume("agent")
    state = {**state, "done": ["search", "fetch"]}
    g.commit(resumed, state)
    try:
        resumed.wait_for_approval({"refund": 1250}, key="approve-refund")
    except ckptfs.errors.ApprovalPending:
        pass
    resumed.approve("approve-refund", {"by": "bob"})
    try:
        resumed.wait_for_approval({"delete": "account"}, key="approve-delete")
    except ckptfs.errors.ApprovalPending:
        pass
    g.sync(resumed, state)
    before = {
        "search-1": {"kind": "effect", "name": "search", "status": "completed", "via": "call",
                     "result": {"hits": 3, "q": "lisbon"}},
        "fetch-1": {"kind": "effect", "name": "fetch", "status": "completed", "via": "call",
                    "result": big, "large": True},
        "charge-1": {"kind": "effect", "name": "charge", "status": "failed", "via": "call",
                     "error": {"type": "ValueError", "message": "card declined"}},
        "email-1": {"kind": "effect", "name": "email", "status": "intended", "via": None},
        "approve-refund": {"kind": "approval", "name": "approval", "status": "completed",
                           "via": "manual", "request": {"refund": 1250},
                           "result": {"approved": True, "decision": {"by": "bob"}}},
        "approve-delete": {"kind": "approval", "name": "approval", "status": "intended",
                           "via": None, "request": {"delete": "account"}},
    }
    g.effects[f"agent@{resumed.seq}"] = before
    # a migration shop@1 -> 2 that reshapes the search result: the migrated run records it
    migrated = g.store.resume("agent", schema=("shop", 2), migrations=migrations())
    snap = g.commit(migrated, {**migrated.state, "version": 2}, "final")
    g.effects[f"agent@{snap.seq}"] = {**before, "search-1": {
        **before["search-1"], "result": {"count": 3, "query": "lisbon"}}}
    g.finish()


def _decline(amount: int) -> None:
    raise ValueError("card declined")


def _die(to: str) -> None:
    raise KeyboardInterrupt


def small_chunks() -> None:
    """Tiny chunker parameters: long entries over many chunks, appended step by step."""
    g = Golden("v1-small-chunks",
               chunker=ckptfs.ChunkerParams(min_size=64, avg_size=256, max_size=1024))
    run = g.store.start_run("chat", schema=("chat", 7))
    msgs: list[Any] = []
    for step in range(6):
        msgs = msgs + [{"role": "user" if i % 2 else "assistant", "content": f"step {step} msg {i}",
                        "tokens": i * step} for i in range(25)]
        g.commit(run, {"messages": msgs, "step": step,
                       "log": ckptfs.Blob(b"".join(b"event %d\n" % i for i in range(200 * (step + 1))))})
    g.finish()


# -- format version 2 (spec/v2.md) ----------------------------------------------------------------
def v2_basic(name: str = "v2-basic", compressed: bool = False) -> None:
    """Format 2: records that carry their manifest and new bodies, bulk content in packs, a
    streamed blob, a resume, a fork, a head hint, and a forward left by forget + gc.
    ``compressed``: the store requires ``compressed-headers`` (records' headers are zstd
    frames, container form 0x03); otherwise not (form 0x02, as ckptfs 0.2.0 wrote v2-basic)."""
    import tempfile

    import attrs

    from ckptfs.format.containers import HeadHint
    from ckptfs.format.models import COMPRESSED_HEADERS
    from ckptfs.format.names import CONFIG_PATH, head_hint_path
    from ckptfs.ops.gc import gc
    from ckptfs.ops.retention import forget_snapshots

    g = Golden(name, chunker=ckptfs.ChunkerParams(min_size=64, avg_size=256, max_size=1024))
    g.store.init(settings={"record_bulk_max": 4096, "pack_target": 8192})
    cfg = g.store.repo.config
    if not compressed:
        g.store.repo.storage.replace(CONFIG_PATH, attrs.evolve(cfg, required=tuple(
            f for f in cfg.required if f != COMPRESSED_HEADERS)).to_bytes())
        g.store.repo._config = None
    rnd = random.Random(2)
    doc = rnd.randbytes(9000)
    log = Path(tempfile.mkdtemp()) / "log.txt"
    log.write_bytes(rnd.randbytes(30_000))
    run = g.store.start_run("agent", schema=("agent", 2))
    intro = rnd.randbytes(2500)  # in agent@1's record; used by every later snapshot
    g.commit(run, {"intro": ckptfs.Blob(intro), "step": 1, "plan": ["a", "b"]}, "start")
    g.commit(run, {"intro": ckptfs.Blob(intro), "doc": ckptfs.Blob(doc), "step": 2,
                   "notes": "note " * 400})  # over record_bulk_max: packs
    g.commit(run, {"intro": ckptfs.Blob(intro), "doc": ckptfs.Blob(doc), "step": 3,
                   "notes": "note " * 400,
                   "log": ckptfs.Blob(log, type="text/plain")})  # streamed from a file
    resumed = g.store.resume("agent")
    last = g.commit(resumed, {**resumed.state, "step": 4}, "final")
    fork = g.store.fork("agent@2", "branch")
    g.commit(fork, {"doc": ckptfs.Blob(doc), "branch": True})
    small = g.store.start_run("small", schema=("agent", 2))
    g.commit(small, {"n": 1, "text": rnd.randbytes(1500).hex()})  # bodies in the record
    repo = g.store.repo
    repo.storage.hint(head_hint_path("agent"),
                      HeadHint("agent", last.seq, last.digest, EPOCH_MS).to_bytes())
    forget_snapshots(repo, {"agent": {1}}, now=EPOCH_MS + 10**8)
    del g.expected["agent@1"]
    store = HERE / name / "store"
    newest = max(f.stat().st_mtime for f in store.rglob("*") if f.is_file())
    gc(repo, grace_ms=0, now=int(newest * 1000) + 3_600_000)
    shutil.rmtree(store / "leases", ignore_errors=True)  # a time, host and pid: not content
    assert any((store / "moved").rglob("*")) and any((store / "packs").rglob("*"))
    g.finish()


#: the store layout each golden store is written in
VERSIONS = {"v1-basic": 1, "v1-ledger": 1, "v1-small-chunks": 1, "v2-basic": 2,
            "v2-compressed": 2}
WRITERS = {"v1-basic": basic, "v1-ledger": effects, "v1-small-chunks": small_chunks,
           "v2-basic": v2_basic, "v2-compressed": lambda: v2_basic("v2-compressed", True)}


def main(names: list[str] | None = None) -> None:
    """Write the named golden stores (default: all), each in its own layout."""
    import os

    for name in names or list(WRITERS):
        before = os.environ.get("CKPTFS_FORMAT_VERSION")
        os.environ["CKPTFS_FORMAT_VERSION"] = str(VERSIONS[name])
        try:
            with fixed_clock():
                WRITERS[name]()
        finally:
            if before is None:
                del os.environ["CKPTFS_FORMAT_VERSION"]
            else:
                os.environ["CKPTFS_FORMAT_VERSION"] = before
    print(f"wrote golden stores in {HERE}")


if __name__ == "__main__":
    main(sys.argv[1:] or None)
