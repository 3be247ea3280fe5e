"""Issue 15, copy local -> S3: two source trees (e.g. main's and a branch's) compared in one
run, alternating, on one moto server, each against plain concurrent PUTs of the same bytes
in 16 MiB objects taken just before it (the peer of bench/v2_s3.py's copy case).

``python bench/copy_peer.py --trees /path/main /path/branch [--rounds 3] [--mb 96]``

Each measurement is a child process with that tree first on ``sys.path`` (the ckptfs it
imports is the tree's). It reports wall seconds, its own CPU (client) and the moto server's
CPU over the copy, the S3 requests by operation, and the same for the plain PUTs. The parent
also measures moto's CPU per small PUT (a record's size) and states the floor a copy that
makes one PUT per snapshot can reach on this machine (see ``floor``).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Any

MB = 1_000_000
MiB = 1 << 20
BUCKET = "bench"


def _srv_cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        x = f.read().rsplit(")", 1)[1].split()
    return (int(x[11]) + int(x[12])) / os.sysconf("SC_CLK_TCK")


def _fs(url: str) -> Any:
    import fsspec

    return fsspec.filesystem("s3", endpoint_url=url, key="testing", secret="testing")


def child(endpoint: str, pid: int, src: str) -> dict[str, Any]:
    """One copy of ``src`` into a fresh prefix, with plain PUTs of its bytes just before."""
    os.environ["CKPTFS_FORMAT_VERSION"] = "2"
    import ckptfs
    from ckptfs.ops.copy import copy_runs

    opts = {"endpoint_url": endpoint, "key": "testing", "secret": "testing"}
    fs = _fs(endpoint)
    ops: collections.Counter[str] = collections.Counter()
    fs.ls(BUCKET)
    fs.s3.meta.events.register(
        "before-send.s3", lambda **kw: ops.update([kw["event_name"].rsplit(".", 1)[-1]]))
    total = sum(os.path.getsize(os.path.join(d, n)) for d, _, ns in os.walk(src) for n in ns)
    files = {f"{BUCKET}/plain/{uuid.uuid4().hex}/{i}": os.urandom(min(16 * MiB, total - i * 16 * MiB))
             for i in range((total + 16 * MiB - 1) // (16 * MiB))}
    c0, s0, t0 = time.process_time(), _srv_cpu(pid), time.perf_counter()
    fs.pipe(files)
    plain = {"s": time.perf_counter() - t0, "cpu": time.process_time() - c0,
             "srv": _srv_cpu(pid) - s0}
    del files
    s = ckptfs.open_store(src)
    d = ckptfs.open_store(f"s3://{BUCKET}/{uuid.uuid4().hex[:12]}", **opts)
    ops.clear()
    c0, s0, t0 = time.process_time(), _srv_cpu(pid), time.perf_counter()
    copy_runs(s.repo, d.repo)
    out = {"s": time.perf_counter() - t0, "cpu": time.process_time() - c0,
           "srv": _srv_cpu(pid) - s0, "ops": dict(ops), "mb": total / MB, "plain": plain}
    return out


def puts(endpoint: str, pid: int, n: int, size: int) -> float:
    """Moto CPU seconds of ``n`` concurrent PUTs of ``size`` bytes."""
    fs = _fs(endpoint)
    files = {f"{BUCKET}/small/{uuid.uuid4().hex}/{i}": os.urandom(size) for i in range(n)}
    s0 = _srv_cpu(pid)
    fs.pipe(files)
    return _srv_cpu(pid) - s0


def build(path: str, mb: int) -> None:
    """The bench's copy source (bench/v2_s3.py copy_case): 4 runs of 2 MB snapshots."""
    os.environ["CKPTFS_FORMAT_VERSION"] = "2"
    import ckptfs

    st = ckptfs.open_store(path)
    for r in range(4):
        run = st.start_run(f"c{r}", schema=("bulk", 1))
        for _ in range(max(1, mb // 8)):
            run.checkpoint({"data": ckptfs.Blob(os.urandom(2 * MB))})
    st.close()


def floor(r: dict[str, Any]) -> float:
    """The least wall time this copy's CPU allows on 2 cores with moto serving one request at
    a time: moto's CPU (it runs on one core, on its GIL), and half of moto's plus the
    client's (both share the 2 cores)."""
    return max(r["srv"], (r["srv"] + r["cpu"]) / 2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trees", nargs="+", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--mb", type=int, default=96)
    ap.add_argument("--child", nargs=3, metavar=("ENDPOINT", "PID", "SRC"))
    a = ap.parse_args()
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    if a.child:
        print(json.dumps(child(a.child[0], int(a.child[1]), a.child[2])))
        return
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sys.path.insert(0, here)
    from bench.w3 import MotoServer

    work = tempfile.mkdtemp(prefix="copypeer-", dir="/tmp")
    src = os.path.join(work, "src")
    env = dict(os.environ, PYTHONPATH=here)
    subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {here!r}); "
                    f"from bench.copy_peer import build; build({src!r}, {a.mb})"],
                   check=True, env=env)
    server = MotoServer()
    res: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    try:
        _fs(server.url).mkdir(BUCKET)
        pid = server.proc.pid
        puts(server.url, pid, 8, 1000)  # warm up
        per_put = puts(server.url, pid, 48, 2000) / 48
        total = sum(os.path.getsize(os.path.join(d, n)) for d, _, ns in os.walk(src) for n in ns)
        recs = [puts(server.url, pid, 48, total // 48) for _ in range(2)]
        big = [puts(server.url, pid, (total + 16 * MiB - 1) // (16 * MiB), 16 * MiB)
               for _ in range(2)]
        print(f"load {os.getloadavg()}; moto CPU per small PUT {per_put * 1000:.1f} ms; "
              f"48 PUTs of {total // 48} B (one per snapshot, nothing else): moto CPU "
              f"{min(recs):.2f} s vs {min(big):.2f} s for the bytes in 16 MiB objects: a copy "
              f"with one PUT per snapshot and no other request or client CPU reaches at best "
              f"{min(big) / min(recs):.2f}x on moto-bound time")
        for rnd in range(a.rounds):
            trees = a.trees if rnd % 2 == 0 else a.trees[::-1]
            for t in trees:
                p = subprocess.run(
                    [sys.executable, os.path.abspath(__file__), "--trees", t, "--child",
                     server.url, str(server.proc.pid), src],
                    check=True, capture_output=True, text=True,
                    env=dict(os.environ, PYTHONPATH=t), cwd=t)
                r = json.loads(p.stdout.strip().splitlines()[-1])
                res[t].append(r)
                pl = r["plain"]
                print(f"round {rnd} {t}: copy {r['s']:.2f} s (client {r['cpu']:.2f}, moto "
                      f"{r['srv']:.2f}), plain {pl['s']:.2f} s (client {pl['cpu']:.2f}, moto "
                      f"{pl['srv']:.2f}): {pl['s'] / r['s']:.2f}x; CPU floors: copy "
                      f"{floor(r):.2f} s, plain {floor(pl):.2f} s = {floor(pl) / floor(r):.2f}x;"
                      f" {sum(r['ops'].values())} requests "
                      f"{dict(sorted(r['ops'].items()))}", flush=True)
        print(f"load {os.getloadavg()}")
        for t, rs in res.items():
            med = sorted(rs, key=lambda r: r["plain"]["s"] / r["s"])[len(rs) // 2]
            print(f"median {t}: {med['plain']['s'] / med['s']:.2f}x plain "
                  f"({med['mb'] / med['s']:.1f} MB/s vs {med['mb'] / med['plain']['s']:.1f}); "
                  f"client CPU {min(r['cpu'] for r in rs):.2f}-{max(r['cpu'] for r in rs):.2f} s, "
                  f"moto CPU {min(r['srv'] for r in rs):.2f}-{max(r['srv'] for r in rs):.2f} s")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
