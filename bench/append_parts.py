"""W1 by ``run.append`` (issue 36): what a record's bytes are, per part, and what a head restore
costs, next to a pickle of the same state.

    PYTHONPATH=. python -m bench.append_parts [--n 1000,5000] [--profile]

Per N (a fresh local store): one ``checkpoint`` of the first message, then ``run.append`` of
one ~1 KB message per step (bench.data.message); the store's bytes split by part
(bench.lg_store_parts), the ratio store / bytes appended (the messages' canonical CBOR), the
step time with fsyncs and bytes written per step, and the head restore (a fresh store object)
against a pickle load and a pickle+fsync step of the same state.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pickle  # bench baseline only (issue 2 names it); never used by ckptfs
import pstats
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import ckptfs
from bench import common
from bench.data import message
from bench.peers import PickleFsync
from bench import lg_store_parts
from ckptfs.format import cbor
from ckptfs.storage.open import open_storage
from ckptfs.store.header_bases import allow, decode_at


def store_parts(root: Path) -> tuple[dict[str, int], int]:
    """(part -> bytes, records) of every file under ``root``, as bench.lg_store_parts splits
    them, with records of any form decoded (a form 0x04 header through its base records). In
    a form 0x03 or 0x04 record a negative row says what storing the header compressed
    saved against its canonical CBOR."""
    import collections

    storage = open_storage(str(root))
    allow(storage, b"delta-headers" in (root / "ckptfs.cbor").read_bytes())
    parts: collections.Counter[str] = collections.Counter()
    records = 0
    for data, c, h in lg_store_parts.records(
            root, parts, lambda rel, data: decode_at(storage, rel, data, what=rel)):
        records += 1
        for name, v in lg_store_parts.record_parts(data, c, h).items():
            parts[name] += v
    return dict(parts), records


def _written(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def build(path: Path, n: int, delta: bool = False) -> dict[str, Any]:
    """The W1 store of n messages by run.append; per-step times, fsyncs and bytes.
    ``delta``: a store that requires ``delta-headers`` (spec/v2.md 3.1.2)."""
    store = ckptfs.open_store(str(path))
    store.init(delta_headers=delta)
    run = store.start_run("w1", schema=("chat", 1))
    msgs = [message(i) for i in range(n)]
    appended = sum(len(cbor.encode(m)) for m in msgs)
    run.checkpoint({"messages": [msgs[0]]})
    counter = common.FsyncCounter().install()
    lat = []
    cpu = []
    for m in msgs[1:]:
        t, c = time.perf_counter(), time.process_time()
        run.append("messages", m)
        lat.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    counter.uninstall()
    store.close()
    return {"lat": lat, "cpu": cpu, "fsyncs": counter.count / max(1, len(lat)),
            "appended": appended, "msgs": msgs}


def pickle_step(msgs: list[dict[str, Any]], d: Path, k: int = 50) -> float:
    """Median ms of a pickle+fsync of the whole state (file, fsync, rename, dir fsync)."""
    peer = PickleFsync(str(d))
    ts = []
    for i in range(k):
        t = time.perf_counter()
        peer.put(msgs, i)
        ts.append(time.perf_counter() - t)
    return statistics.median(ts) * 1000


def restore_times(path: Path, msgs: list[dict[str, Any]], k: int = 9,
                  profile: bool = False) -> tuple[float, float, float, float, str]:
    """Medians of a head restore through a fresh store object and of a pickle load of the
    same state, wall ms and CPU ms (the machine is shared: CPU time is the steadier), and
    a profile text. The pickle is read from a file each time, as a restore reads its store."""
    ts, cs = [], []
    for _ in range(k):
        t, c = time.perf_counter(), time.process_time()
        store = ckptfs.open_store(str(path))
        got = store.read("w1")["messages"]
        ts.append(time.perf_counter() - t)
        cs.append(time.process_time() - c)
        store.close()
    assert list(got) == msgs
    pfile = path.parent / "state.pkl"
    pfile.write_bytes(pickle.dumps({"messages": msgs}, protocol=pickle.HIGHEST_PROTOCOL))
    pk, pc = [], []
    for _ in range(k):
        t, c = time.perf_counter(), time.process_time()
        with open(pfile, "rb") as f:
            pickle.load(f)
        pk.append(time.perf_counter() - t)
        pc.append(time.process_time() - c)
    text = ""
    if profile:
        prof = cProfile.Profile()
        prof.enable()
        store = ckptfs.open_store(str(path))
        store.read("w1")
        store.close()
        prof.disable()
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("cumulative").print_stats(25)
        text = s.getvalue()
    med = statistics.median
    return med(ts) * 1000, med(pk) * 1000, med(cs) * 1000, med(pc) * 1000, text


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", default="1000,5000")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--out", default=None, help="result name under bench/results/")
    ap.add_argument("--modes", default="whole",
                    help="comma-separated: whole (records' headers stored whole, today's "
                         "default), delta (a store with delta-headers)")
    a = ap.parse_args()
    load0 = os.getloadavg()[0]
    out = ["# W1 by run.append: record bytes by part, step and head restore (issue 36)\n",
           common.machine_md({"command": f"python -m bench.append_parts --n {a.n} "
                                         f"--modes {a.modes}"}), ""]
    summary = ["| headers | N | store bytes | appended bytes | store / appended | records | bytes per "
               "record | step ms (median) | step CPU ms | pickle+fsync ms | step / pickle+fsync "
               "| fsyncs per step | restore ms | pickle load ms | restore / pickle load "
               "| restore CPU ms | pickle load CPU ms | CPU ratio |",
               "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    details = []
    for mode, n in [(m, int(x)) for x in a.n.split(",") for m in a.modes.split(",")]:
        with tempfile.TemporaryDirectory() as d:
            root = Path(d) / "store"
            b = build(root, n, delta=mode == "delta")
            size = _written(root)
            parts, records = store_parts(root)
            pdir = Path(d) / "pickle"
            pdir.mkdir()
            pk_step = pickle_step(b["msgs"], pdir)
            r_ms, pk_ms, r_cpu, pk_cpu, prof = restore_times(root, b["msgs"],
                                                             profile=a.profile and n == 1000)
            step = statistics.median(b["lat"]) * 1000
            summary.append(
                f"| {mode} | {n} | {size:,} | {b['appended']:,} | {size / b['appended']:.2f} | {records} "
                f"| {size / records:,.0f} | {step:.2f} "
                f"| {statistics.median(b['cpu']) * 1000:.2f} | {pk_step:.2f} "
                f"| {step / pk_step:.2f} | {b['fsyncs']:.2f} | {r_ms:.2f} | {pk_ms:.2f} "
                f"| {r_ms / pk_ms:.2f} | {r_cpu:.2f} | {pk_cpu:.2f} | {r_cpu / pk_cpu:.2f} |")
            details.append(f"\n## {mode}, N = {n}: bytes by part ({records} records)\n")
            details.append("| part | bytes | per record |\n|---|---|---|")
            for name, v in sorted(parts.items(), key=lambda kv: -kv[1]):
                details.append(f"| {name} | {v:,} | {v / records:,.0f} |")
            if prof:
                details.append(f"\n### head restore profile, {mode}, N = {n}\n\n```\n{prof}```")
            print(summary[-1], flush=True)
    out += ["Bytes appended = the messages' canonical CBOR. Bytes per record = store / records "
            "(all files) = bytes written per step. fsyncs per step counted from Python (os.fsync/fdatasync).\n",
            *summary, *details]
    out.insert(2, f"- **load average (1 min) at start / end**: {load0:.2f} / "
                  f"{os.getloadavg()[0]:.2f}\n")
    text = "\n".join(out) + "\n"
    if a.out:
        common.write_result(a.out, text)
    print(text)


if __name__ == "__main__":
    main()
