"""Encrypted vs plaintext stores (issue 33), in one run: W1 (a growing conversation, one ~1 KB
message appended and checkpointed per step, then a restore in a fresh store object), store
size, and W2 (write, then read and verify a large blob). Ratios are encrypted / plaintext.
Restores (21) and reads (``--reads``, 5) alternate plaintext and encrypted; medians of wall
time, and of the reads' CPU time.

    python -m bench.encrypted [--n 500] [--blob-mib 256] [--reads 5] [--dir /tmp/x]
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from collections.abc import Callable
from typing import Any

import ckptfs
from bench.data import message


def _size(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def _alternate(fns: dict[str, Callable[[], Any]], times: int,
               cpu: dict[str, float] | None = None) -> dict[str, float]:
    """The median seconds of each of ``fns``, called in turn ``times`` times (plaintext and
    encrypted interleaved, so that the shared machine's load drifts on both alike). ``cpu``,
    when given, gets each one's median process CPU seconds (every thread's): on a machine
    whose cores are all busy, wall time follows CPU time, and CPU time drifts less."""
    got: dict[str, list[float]] = {k: [] for k in fns}
    used: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(times):
        for k, fn in fns.items():
            c, t = time.process_time(), time.perf_counter()
            fn()
            got[k].append(time.perf_counter() - t)
            used[k].append(time.process_time() - c)
    if cpu is not None:
        cpu.update({k: statistics.median(v) for k, v in used.items()})
    return {k: statistics.median(v) for k, v in got.items()}


def w1(base: Path, n: int, encrypted: bool) -> tuple[dict[str, float], Callable[[], Any]]:
    """Step medians and size; and the restore (a fresh store object, then the head)."""
    url = str(base / ("enc" if encrypted else "plain"))
    kw: dict[str, Any] = {"keyring": str(base / "ring")} if encrypted else {}
    store = ckptfs.open_store(url, **kw)
    run = store.start_run("w1", schema=("chat", 1))
    state: dict[str, Any] = {"messages": []}
    steps = []
    for i in range(n):
        state["messages"].append(message(i))
        t = time.perf_counter()
        run.checkpoint(state)
        steps.append(time.perf_counter() - t)

    def restore() -> None:
        assert len(ckptfs.open_store(url, **kw).read("w1")["messages"]) == n

    return {"step_ms": statistics.median(steps) * 1000, "bytes": _size(Path(url))}, restore


def w2(base: Path, mib: int, encrypted: bool) -> tuple[dict[str, float], Callable[[], Any]]:
    """Write rate and size; and the read+verify of the blob."""
    url = str(base / ("w2enc" if encrypted else "w2plain"))
    kw: dict[str, Any] = {"keyring": str(base / "ring2")} if encrypted else {}
    data = os.urandom(mib << 20)
    store = ckptfs.open_store(url, **kw)
    t = time.perf_counter()
    store.start_run("w2").checkpoint({"blob": ckptfs.Blob(io.BytesIO(data))})
    write = time.perf_counter() - t

    def read() -> None:
        blob = ckptfs.open_store(url, **kw).read("w2")["blob"]
        assert sum(len(piece) for piece in blob.iter_bytes()) == len(data)

    return {"write_mib_s": mib / write, "bytes": _size(Path(url))}, read


def _counted(fn: Callable[[], Any]) -> dict[str, int]:
    """The read system calls of one call of ``fn`` (local disk: ``pread`` and ``preadv``
    calls, bytes read): counts that do not drift with the machine's load."""
    from ckptfs.storage import local_os

    got = {"preads": 0, "bytes": 0}
    real = {name: getattr(local_os, name) for name in ("pread", "pread_into")}

    def wrap(name: str) -> Callable[..., Any]:
        def counted(*a: Any) -> Any:
            out = real[name](*a)
            got["preads"] += 1
            got["bytes"] += out if isinstance(out, int) else len(out)
            return out
        return counted

    try:
        for name in real:
            setattr(local_os, name, wrap(name))
        fn()
    finally:
        for name, f in real.items():
            setattr(local_os, name, f)
    return got


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=500)
    ap.add_argument("--blob-mib", type=int, default=256)
    ap.add_argument("--reads", type=int, default=5, help="W2 reads of each store (alternated)")
    ap.add_argument("--dir", default=None)
    ap.add_argument("--out", default=None, help="also write the figures here (markdown)")
    a = ap.parse_args()
    base = Path(a.dir or tempfile.mkdtemp(prefix="ckptfs-enc-bench-"))
    load0 = os.getloadavg()
    try:
        (p1, pr), (e1, er) = w1(base, a.n, False), w1(base, a.n, True)
        r1 = _alternate({"plain": pr, "enc": er}, 21)
        p1["restore_ms"], e1["restore_ms"] = r1["plain"] * 1000, r1["enc"] * 1000
        (p2, pr), (e2, er) = w2(base, a.blob_mib, False), w2(base, a.blob_mib, True)
        n2 = {"plain": _counted(pr), "enc": _counted(er)}
        cpu2: dict[str, float] = {}
        r2 = _alternate({"plain": pr, "enc": er}, a.reads, cpu2)
        p2["read_mib_s"], e2["read_mib_s"] = a.blob_mib / r2["plain"], a.blob_mib / r2["enc"]
    finally:
        shutil.rmtree(base, ignore_errors=True)
    lines = [f"load average before/after: {load0} / {os.getloadavg()}"]
    lines += [f"W1 n={a.n}: step median plain {p1['step_ms']:.2f} ms, encrypted "
          f"{e1['step_ms']:.2f} ms, ratio {e1['step_ms'] / p1['step_ms']:.2f}",
              f"W1 restore median plain {p1['restore_ms']:.1f} ms, encrypted "
          f"{e1['restore_ms']:.1f} ms, ratio {e1['restore_ms'] / p1['restore_ms']:.2f}",
              f"W1 store size plain {p1['bytes']} B, encrypted {e1['bytes']} B, ratio "
          f"{e1['bytes'] / p1['bytes']:.3f}",
              f"W2 {a.blob_mib} MiB: write plain {p2['write_mib_s']:.0f} MiB/s, encrypted "
          f"{e2['write_mib_s']:.0f} MiB/s; read+verify plain {p2['read_mib_s']:.0f} MiB/s, "
          f"encrypted {e2['read_mib_s']:.0f} MiB/s, ratio "
          f"{e2['read_mib_s'] / p2['read_mib_s']:.2f}; size ratio "
          f"{e2['bytes'] / p2['bytes']:.4f}",
              f"W2 read+verify CPU (all threads) median of {a.reads}: plain "
          f"{cpu2['plain'] * 1000:.0f} ms, encrypted {cpu2['enc'] * 1000:.0f} ms, plain/encrypted "
          f"{cpu2['plain'] / cpu2['enc']:.2f}",
              f"W2 one read+verify: plain {n2['plain']['preads']} preads, "
          f"{n2['plain']['bytes']} B read; encrypted {n2['enc']['preads']} preads, "
          f"{n2['enc']['bytes']} B read (no fsync in a read); store bytes plain {p2['bytes']}, "
          f"encrypted {e2['bytes']}"]
    text = "\n".join(lines)
    print(text)
    if a.out:
        Path(a.out).write_text(f"# bench.encrypted (one run)\n\n```\n{text}\n```\n")


if __name__ == "__main__":
    main()
