"""Issue 14: the CPU of a LangGraph W1 superstep through ``CkptfsSaver``, phase by phase.

``python bench/lg_step_phases.py [--n 1000] [--durability sync]`` runs bench/langgraph_w1.py's
graph (one ~1 KB AIMessage per superstep) on a fresh store with the saver's phases wrapped in
timers of the calling thread's CPU (``time.thread_time``; LangGraph calls the saver from its
executor threads) and prints ms per superstep for each phase. Unlike cProfile
(bench/lg_step_profile.py ``--profile``) it times only the listed functions, so the numbers
are close to an unprofiled run's and add up: nested phases are marked with dots under their
parent, whose time includes theirs. Also printed: the process CPU and wall time per
superstep. Run it with each tree first on PYTHONPATH to compare two trees.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import ckptfs.format.manifest_bytes as manifest_bytes  # noqa: E402
import ckptfs.format.models as models  # noqa: E402
import ckptfs.format.record_bytes as record_bytes  # noqa: E402
import ckptfs.integrations.langgraph.appends as appends  # noqa: E402
import ckptfs.integrations.langgraph.channels as channels  # noqa: E402
import ckptfs.integrations.langgraph.index as index  # noqa: E402
import ckptfs.integrations.langgraph.saver as saver_mod  # noqa: E402
import ckptfs.integrations.langgraph.values as values  # noqa: E402
import ckptfs.storage.local as local  # noqa: E402
import ckptfs.store.entries as entries  # noqa: E402
import ckptfs.store.objects as objects  # noqa: E402
import ckptfs.store.repository as repository  # noqa: E402
from bench.langgraph_w1 import build  # noqa: E402

#: (depth, label, owner, attribute): the phases, in the order printed; an owner is a class or
#: a module (a module function is wrapped where its caller looks it up)
PHASES: list[tuple[int, str, Any, str]] = [
    (0, "put", saver_mod.CkptfsSaver, "put"),
    (1, "channel_entries", saver_mod, "channel_entries"),
    (2, "pack_list (list channel: new items packed)", channels, "pack_list"),
    (3, "_unchanged (committed items' fields still the same objects)", appends, "_unchanged"),
    (1, "_commit", saver_mod.CkptfsSaver, "_commit"),
    (2, "Repository.commit", repository.Repository, "commit"),
    (3, "prepare_v2", objects.ObjectStore, "prepare_v2"),
    (4, "manifest bytes (ManifestEncoder.to_bytes)", manifest_bytes.ManifestEncoder, "to_bytes"),
    (4, "frame_bodies (new chunk bodies)", objects, "frame_bodies"),
    (4, "_relied (locate every named chunk)", objects.ObjectStore, "_relied"),
    (4, "build_record_raw", objects, "build_record_raw"),
    (5, "locator table", record_bytes.LocatorRows, "table"),
    (3, "storage commit (write, fsync, link, fsync folder)", local.LocalStorage, "commit"),
    (0, "put_writes", saver_mod.CkptfsSaver, "put_writes"),
    (0, "(across put and put_writes) _encode: entry writer", saver_mod.CkptfsSaver, "_encode"),
    (1, "EntryWriter._append (list channel)", entries.EntryWriter, "_append"),
    (1, "EntryWriter._value (other entries)", entries.EntryWriter, "_value"),
    (0, "(across) Packer.pack: LangGraph serde / codecs", values.Packer, "pack"),
    (0, "(across) _catch_up: look for records above the head", index.RunLookup, "_catch_up"),
]
#: classmethods wrapped apart (the reader checks of a new manifest's fresh entries)
CHECK = "(in manifest bytes) Manifest.from_cbor: reader checks of the fresh entries"


def _wrap(owner: Any, name: str, label: str, acc: dict[str, float]) -> None:
    fn = getattr(owner, name)

    def timed(*a: Any, **k: Any) -> Any:
        t = time.thread_time()
        try:
            return fn(*a, **k)
        finally:
            acc[label] = acc.get(label, 0.0) + time.thread_time() - t

    setattr(owner, name, timed)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--durability", choices=("sync", "async"), default="sync")
    args = ap.parse_args()
    acc: dict[str, float] = {}
    for _, label, owner, name in PHASES:
        _wrap(owner, name, label, acc)
    from_cbor = models.Manifest.from_cbor.__func__  # type: ignore[attr-defined]

    def checked(cls: Any, *a: Any, **k: Any) -> Any:
        t = time.thread_time()
        try:
            return from_cbor(cls, *a, **k)
        finally:
            acc[CHECK] = acc.get(CHECK, 0.0) + time.thread_time() - t

    models.Manifest.from_cbor = classmethod(checked)  # type: ignore[method-assign,assignment]
    from ckptfs.integrations.langgraph import CkptfsSaver

    root = Path(tempfile.mkdtemp(prefix="lgphases-"))
    try:
        saver = CkptfsSaver(str(root / "s"))
        app = build(args.n, []).compile(checkpointer=saver)
        config: Any = {"configurable": {"thread_id": "w1"}, "recursion_limit": args.n + 10}
        c0, t0 = time.process_time(), time.perf_counter()
        app.invoke({"messages": [], "n": 0}, config, durability=args.durability)
        c1, t1 = time.process_time(), time.perf_counter()
        saver.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    n = args.n
    print(f"durability={args.durability} n={n}: process CPU {(c1 - c0) / n * 1e3:.3f} ms/step, "
          f"wall {(t1 - t0) / n * 1e3:.3f} ms/step")
    print("| phase | CPU ms/step |\n|---|---|")
    for depth, label, _, _ in PHASES:
        print(f"| {'· ' * depth}{label} | {acc.get(label, 0.0) / n * 1e3:.3f} |")
    print(f"| {CHECK} | {acc.get(CHECK, 0.0) / n * 1e3:.3f} |")


if __name__ == "__main__":
    main()
