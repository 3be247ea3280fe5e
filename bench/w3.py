"""W3, object store: ckptfs on a moto S3 server (its own process, on loopback) through s3fs.

Commit latency of a 1 MB state that spans many chunks against one PUT of the same bytes, restore
latency against one GET, and S3 requests per commit, counted with a botocore ``before-send``
hook on the client fsspec hands out for the same options (fsspec caches filesystem instances,
so it is the client ckptfs uses).
"""

from __future__ import annotations

import collections
import importlib.util
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench import common
from bench.data import messages

MB = 1_000_000
BUCKET = "bench"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class MotoServer:
    """``moto_server`` in a child process on 127.0.0.1 (stopped by ``stop``)."""

    def __init__(self) -> None:
        self.port = free_port()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError("moto server did not start within 30 s")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


class RequestCounter:
    """Counts S3 requests by operation name on an s3fs filesystem's botocore client."""

    def __init__(self, fs: Any) -> None:
        self.ops: collections.Counter[str] = collections.Counter()
        fs.ls(BUCKET)  # make sure the client exists
        fs.s3.meta.events.register("before-send.s3", self._hook)

    def _hook(self, request: Any = None, **kwargs: Any) -> None:
        name = kwargs.get("event_name", "before-send.s3.?").rsplit(".", 1)[-1]
        self.ops[name] += 1

    def take(self) -> collections.Counter[str]:
        out = self.ops.copy()
        self.ops.clear()
        return out


def run(workdir: str, *, quick: bool) -> str:
    import fsspec

    import ckptfs

    reps = 10 if quick else 30
    server = MotoServer()
    try:
        opts = {"endpoint_url": server.url, "key": "testing", "secret": "testing"}
        os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
        fs = fsspec.filesystem("s3", **opts)
        fs.mkdir(BUCKET)
        counter = RequestCounter(fs)
        # one PUT / one GET of 1 MB
        put_lat, get_lat = [], []
        put_reqs, get_reqs = collections.Counter[str](), collections.Counter[str]()
        for i in range(reps):
            data = os.urandom(MB)
            t0 = time.perf_counter()
            fs.pipe_file(f"{BUCKET}/plain/obj-{i}", data)
            put_lat.append(time.perf_counter() - t0)
            put_reqs += counter.take()
            t0 = time.perf_counter()
            assert fs.cat_file(f"{BUCKET}/plain/obj-{i}") == data
            get_lat.append(time.perf_counter() - t0)
            get_reqs += counter.take()
        url = f"s3://{BUCKET}/store"
        store = ckptfs.open_store(url, **opts)
        warm = store.start_run("warmup", schema=("bulk", 1))
        warm.checkpoint({"data": ckptfs.Blob(os.urandom(MB))})  # creates config, probes
        counter.take()
        results: dict[str, dict[str, Any]] = {}
        cases = {
            "1 MB random Blob": lambda i: {"data": ckptfs.Blob(os.urandom(MB))},
            "1,000 chat messages (~1 MB CBOR)": lambda i: {"messages": messages(1000, seed=i + 1)},
        }
        for label, make in cases.items():
            run = store.start_run(f"run-{len(results)}", schema=("bulk", 1))
            lat, reqs = [], collections.Counter[str]()
            for i in range(reps):
                state = make(i)
                t0 = time.perf_counter()
                run.checkpoint(state)
                lat.append(time.perf_counter() - t0)
                reqs += counter.take()
            rlat = []
            for _ in range(reps):
                fresh = ckptfs.open_store(url, **opts)
                t0 = time.perf_counter()
                st = fresh.read(run.id)
                if "data" in st:
                    st["data"].read()
                rlat.append(time.perf_counter() - t0)
            rreqs = counter.take()
            rreqs = collections.Counter({k: v for k, v in rreqs.items()})
            results[label] = {"lat": lat, "reqs": reqs, "rlat": rlat, "rreqs": rreqs}
        copy_note = copy_throughput(workdir, opts, quick=quick, put_ms=common.median(put_lat) * 1000,
                                    counter=counter)
    finally:
        server.stop()
    f = common.fmt
    put_ms = common.median(put_lat) * 1000
    rows = [["one PUT of 1 MB (s3fs `pipe_file`)", f(put_ms), f(common.pct(put_lat, 99) * 1000),
             "1.0x", f(sum(put_reqs.values()) / reps, 1), fmt_ops(put_reqs, reps),
             f(common.median(get_lat) * 1000), fmt_ops(get_reqs, reps)]]
    tgt = []
    for label, r in results.items():
        med = common.median(r["lat"]) * 1000
        rows.append([f"ckptfs commit: {label}", f(med), f(common.pct(r["lat"], 99) * 1000),
                     f"{f(med / put_ms, 2)}x", f(sum(r["reqs"].values()) / reps, 1),
                     fmt_ops(r["reqs"], reps), f(common.median(r["rlat"]) * 1000),
                     fmt_ops(r["rreqs"], reps)])
        if label.startswith("1 MB"):
            tgt.append(["commit <= 3x one PUT of the same bytes", f"{f(med / put_ms, 3)}x",
                        common.verdict(med / put_ms, 3)])
    md = ("# W3: object store (moto S3 server on loopback, s3fs)\n\n"
          + common.machine_md({"mode": "quick" if quick else "full", "repetitions": str(reps)})
          + "\nmoto runs in its own process on 127.0.0.1; every commit writes fresh random or "
            "fresh text content (no dedup hit). Latencies are medians; restore = a fresh "
            "store object reads the head and all its bytes. Requests are counted with a "
            "botocore `before-send` hook and shown per commit / per restore.\n\n"
          + common.table(["operation", "median ms", "p99 ms", "vs PUT", "requests",
                          "requests by kind", "restore ms", "restore requests"], rows)
          + "\n## Targets (issue 9)\n\n" + common.table(["target", "measured", "verdict"], tgt)
          + "\n## ckptfs copy local -> S3\n\n" + copy_note + "\n")
    common.write_result("w3" + ("-quick" if quick else ""), md)
    return md


def fmt_ops(c: collections.Counter[str], reps: int) -> str:
    return ", ".join(f"{k} {v / reps:.1f}" for k, v in sorted(c.items()))


def copy_throughput(workdir: str, opts: dict[str, Any], *, quick: bool, put_ms: float,
                    counter: RequestCounter) -> str:
    """``ckptfs copy`` (ckptfs.ops.copy.copy_runs) of a local store to S3: MB/s of stored bytes,
    against sequential single PUTs of 1 MB measured above, and S3 requests per copied MB."""
    import fsspec

    import ckptfs
    from ckptfs.ops.copy import copy_runs

    size_mb = 16 if quick else 64
    src_url = os.path.join(workdir, "w3-copy-src")
    src = ckptfs.open_store(src_url)
    for r in range(4):
        run = src.start_run(f"copy-{r}", schema=("bulk", 1))
        for _ in range(size_mb // 8):
            run.checkpoint({"data": ckptfs.Blob(os.urandom(2 * MB)), "messages": messages(200, seed=r)})
    stored = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(src_url) for f in fs)
    dst = ckptfs.open_store(f"s3://{BUCKET}/copy-dst", **opts)
    counter.take()
    t0 = time.perf_counter()
    rep = copy_runs(src.repo, dst.repo)
    took = time.perf_counter() - t0
    reqs = counter.take()
    t0 = time.perf_counter()
    again = copy_runs(src.repo, dst.repo)
    noop = time.perf_counter() - t0
    again_reqs = counter.take()
    # the floor: the same store files (records, packs, config) as plain concurrent PUTs (one
    # s3fs ``pipe``), no ckptfs; the writers' tmp/ is not part of the store
    chunk_files = [os.path.join(d, f) for d, _, fs_ in os.walk(src_url) for f in fs_
                   if os.path.relpath(d, src_url).split(os.sep)[0] != "tmp"]
    plain = {f"{BUCKET}/copy-plain/{i}": Path(p).read_bytes() for i, p in enumerate(chunk_files)}
    fs = fsspec.filesystem("s3", **opts)
    t0 = time.perf_counter()
    fs.pipe(plain)
    plain_mbps = sum(map(len, plain.values())) / MB / (time.perf_counter() - t0)
    counter.take()
    mbps = stored / MB / took
    per_mb = sum(reqs.values()) / (stored / MB)
    return (f"{stored / MB:.1f} MB stored in 4 runs ({rep.snapshots_copied} snapshots, "
            f"{rep.chunks_copied} chunks) copied local -> S3 in {took:.2f} s: **{mbps:.1f} MB/s**, "
            f"{mbps * put_ms / 1000:.2f}x sequential 1 MB PUTs ({1000 / put_ms:.1f} MB/s), "
            f"{mbps / plain_mbps:.2f}x the same {len(plain)} store files as concurrent plain PUTs "
            f"({plain_mbps:.1f} MB/s: the per-request cost of small objects bounds any copy); "
            f"{sum(reqs.values())} S3 requests, **{per_mb:.1f} per MB** ({fmt_ops(reqs, 1)}; "
            f"PUTs: records, packs and the config). Copying again (nothing "
            f"new): {noop:.2f} s, {again.snapshots_copied} snapshots and {again.chunks_copied} "
            f"chunks sent, {sum(again_reqs.values())} requests ({fmt_ops(again_reqs, 1)}).\n")
