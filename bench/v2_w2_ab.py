"""Issue 15, local W2, before/after: two ckptfs trees timed in one run against ``cp``/``cat``.

``python -m bench.v2_w2_ab [--base REV] [--mib 256] [--rounds 3] [--name v2_w2-ab]`` exports
``REV`` (default ``main``) with ``git archive`` and times, in every round, ``cp src dst &&
sync dst``, ``cat dst > /dev/null``, then a format v2 blob write (durable) and a fresh read +
verify with the exported tree ("before") and with this tree ("after"), in alternating order.
Each ckptfs case runs in a subprocess whose ``PYTHONPATH`` is its tree (start-up untimed); the
subprocess counts ``fsync`` calls. Ratios are of medians over the rounds, same run, same
source file (random bytes, warm page cache). Writes ``bench/results/<name>.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

MiB = 1 << 20
HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def worker(src: str, root: str) -> None:
    """One write + one fresh read of the tree on PYTHONPATH; prints timings as JSON."""
    calls = {"fsync": 0}
    real = os.fsync

    def counted(fd: int) -> None:
        calls["fsync"] += 1
        real(fd)

    os.fsync = counted
    import ckptfs

    os.environ["CKPTFS_FORMAT_VERSION"] = "2"
    st = ckptfs.open_store(root)
    run = st.start_run("w2", schema=("bulk", 1))
    t0 = time.perf_counter()
    run.checkpoint({"data": ckptfs.Blob(src)})
    w = time.perf_counter() - t0
    st.close()
    fsyncs = calls["fsync"]
    files = sum(len(f) for _, _, f in os.walk(root))
    fresh = ckptfs.open_store(root)
    t0 = time.perf_counter()
    blob = fresh.read("w2")["data"]
    n = pieces = 0
    for b in blob.iter_bytes():
        n += len(b)
        pieces += 1
    r = time.perf_counter() - t0
    fresh.close()
    assert n == os.path.getsize(src)
    print(json.dumps({"w": w, "r": r, "fsync": fsyncs, "files": files, "pieces": pieces}))


def _export(rev: str, into: str) -> str:
    sha = subprocess.run(["git", "-C", HERE, "rev-parse", "--short", rev], check=True,
                         capture_output=True, text=True).stdout.strip()
    tar = subprocess.run(["git", "-C", HERE, "archive", rev, "ckptfs"], check=True,
                         capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", into], input=tar, check=True)
    subprocess.run([sys.executable, "-m", "compileall", "-q", os.path.join(into, "ckptfs")],
                   check=True, env={k: v for k, v in os.environ.items()
                                    if k != "PYTHONDONTWRITEBYTECODE"})
    return sha


def _case(tree: str, src: str, root: str) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=tree)
    env.pop("CKPTFS_FORMAT_VERSION", None)
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", src, root],
                         env=env, check=True, capture_output=True, text=True).stdout
    shutil.rmtree(root, ignore_errors=True)
    return dict(json.loads(out.strip().splitlines()[-1]))


def main(argv: list[str] | None = None) -> None:
    from bench import common
    from bench.v2_w2 import time_peers, write_source

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", default="main")
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--name", default="v2_w2-ab")
    a = ap.parse_args(argv)
    work = tempfile.mkdtemp(prefix="v2w2ab-", dir="/tmp")
    load0 = os.getloadavg()
    try:
        base = os.path.join(work, "base")
        os.makedirs(base)
        sha = _export(a.base, base)
        trees = {"before": base, "after": HERE}
        src = os.path.join(work, "src.bin")
        write_source(src, a.mib)
        res: dict[str, list[float]] = {}
        extra: dict[str, dict[str, float]] = {}
        for rnd in range(a.rounds):
            time_peers(src, os.path.join(work, f"cp-{rnd}"), res)
            for name in (("before", "after") if rnd % 2 == 0 else ("after", "before")):
                got = _case(trees[name], src, os.path.join(work, f"s-{name}-{rnd}"))
                res.setdefault(f"w-{name}", []).append(got["w"])
                res.setdefault(f"r-{name}", []).append(got["r"])
                extra[name] = got
    finally:
        shutil.rmtree(work, ignore_errors=True)
    med = {k: common.median(v) for k, v in res.items()}
    mbps = {k: a.mib / v for k, v in med.items()}
    f = common.fmt
    rows = [["`cp` + `sync`", f(mbps["cp"]), "1.00", "1 (sync)", "-"],
            ["`cat`", f(mbps["cat"]), "1.00", "-", "-"]]
    tg = []
    for name in ("before", "after"):
        w, r = mbps[f"w-{name}"] / mbps["cp"], mbps[f"r-{name}"] / mbps["cat"]
        e = extra[name]
        rows += [[f"{name}: v2 blob write (durable)", f(mbps[f"w-{name}"]), f(w),
                  str(int(e["fsync"])), str(int(e["files"]))],
                 [f"{name}: v2 read + verify", f(mbps[f"r-{name}"]), f(r), "0",
                  f"{int(e['pieces'])} pieces"]]
        tg += [[f"{name}: v2 write >= 0.5x cp", f"{f(w)}x", common.verdict(w, 0.5, at_most=False)],
               [f"{name}: v2 read+verify >= 0.5x cat", f"{f(r)}x",
                common.verdict(r, 0.5, at_most=False)]]
    md = ("# Issue 15, local W2: v2 blob write / read+verify, before vs after, vs cp / cat "
          "(same run)\n\n"
          + common.machine_md({"before": f"{a.base} ({sha})", "after": "this tree",
                               "blob": f"{a.mib} MiB random", "rounds": str(a.rounds),
                               "load average (1/5/15) at start": " / ".join(
                                   f"{x:.2f}" for x in load0),
                               "load average at end": " / ".join(
                                   f"{x:.2f}" for x in os.getloadavg())})
          + "\n" + common.table(["case", "MB/s (MiB/s, median)", "x cp / cat", "fsync calls",
                                 "store files / pieces"], rows)
          + "\nRounds (s): " + "; ".join(f"{k} " + " ".join(f"{x:.3f}" for x in v)
                                         for k, v in res.items())
          + "\n\n## Targets\n\n" + common.table(["target", "measured", "verdict"], tg))
    path = common.write_result(a.name, md)
    print(md)
    print("wrote", path)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--worker":
        worker(sys.argv[2], sys.argv[3])
    else:
        main()
