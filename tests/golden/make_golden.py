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


#: the golden stores this script writes; the version 1 stores (v1-basic, v1-ledger,
#: v1-small-chunks) were written by the version 1 writer of ckptfs 0.1, which ckptfs no longer
#: has: they are frozen, never written again
WRITERS = {"v2-basic": v2_basic, "v2-compressed": lambda: v2_basic("v2-compressed", True)}


def main(names: list[str] | None = None) -> None:
    """Write the named golden stores (default: all it can write)."""
    for name in names or list(WRITERS):
        if name not in WRITERS:
            raise SystemExit(f"{name}: not written by this script (the version 1 golden "
                             "stores are frozen)")
        with fixed_clock():
            WRITERS[name]()
    print(f"wrote golden stores in {HERE}")


if __name__ == "__main__":
    main(sys.argv[1:] or None)
