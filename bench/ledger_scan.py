"""verify and gc wall time on a run with a long effect ledger (every snapshot's ledger is the
previous one plus new records, so reading each ledger in full is quadratic).

Builds a local store with one run of N effects (two commits each; every 50th result is large,
so it is stored as chunks and named by ``result_content``), then times ``verify``,
``verify --read-data`` and ``gc`` (nothing to collect), and counts chunk reads.

    python bench/ledger_scan.py [--effects 1000] [--dir /tmp/x]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import ckptfs
from ckptfs.ops.gc import gc
from ckptfs.ops.verify import verify
from ckptfs.storage.local import LocalStorage
from ckptfs.store.repository import Repository


class CountingStorage(LocalStorage):
    """Local storage that counts reads of chunk files (read_many calls read here)."""

    reads: Counter[str] = Counter()

    def read(self, path: str) -> bytes:
        if path.startswith("chunks/"):
            self.reads[path] += 1
        return super().read(path)  # read_many goes through read on this backend


def build(root: str, effects: int) -> None:
    run = ckptfs.open_store(root).start_run("long")
    for i in range(effects):
        big = i % 50 == 0
        run.effect("call", lambda i=i, big=big: {"i": i, "pad": ("x%d" % i) * (40000 if big else 20)},
                   key=f"k{i}")


def timed(label: str, root: str, fn: Any) -> None:
    CountingStorage.reads = Counter()
    repo = Repository(CountingStorage(root))
    t = time.perf_counter()
    rep = fn(repo)
    dt = time.perf_counter() - t
    reads = CountingStorage.reads
    print(f"{label:22s} {dt:8.2f} s  chunk reads {sum(reads.values()):7d} "
          f"(distinct {len(reads)}, max per chunk {max(reads.values(), default=0)})  "
          f"ok={getattr(rep, 'ok', not getattr(rep, 'problems', []))}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--effects", type=int, default=1000)
    ap.add_argument("--dir")
    a = ap.parse_args()
    root = a.dir or tempfile.mkdtemp(prefix="ckptfs-ledger-")
    try:
        if not Path(root, "ckptfs.cbor").exists():
            t = time.perf_counter()
            build(root, a.effects)
            print(f"built {a.effects} effects in {time.perf_counter() - t:.1f} s at {root}")
        timed("verify", root, lambda r: verify(r))
        timed("verify --read-data", root, lambda r: verify(r, read_data=True))
        timed("gc", root, lambda r: gc(r))
    finally:
        if not a.dir:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
