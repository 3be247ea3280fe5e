"""Issue 15, local: W2 blob write vs ``cp`` and read+verify vs ``cat``, v1 vs v2, same run.

``python -m bench.v2_w2 [--mib 256] [--rounds 3] [--quick] [--name v2_w2]`` writes
``bench/results/<name>.md``.
The file is random bytes (incompressible), fsynced before the first round; the page cache is
warm for the source in every case.
Write = ``run.checkpoint({"data": Blob(path)})`` (durable) vs ``cp src dst && sync dst``;
read+verify = a fresh store object reads the blob back, BLAKE3-verifying every chunk, vs
``cat dst > /dev/null``. Medians over interleaved rounds.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import tempfile
import time

from bench import common

MiB = 1 << 20


def write_source(path: str, mib: int) -> None:
    """``mib`` MiB of random bytes at ``path``, fsynced: its writeback must not land in a
    timed round."""
    with open(path, "wb") as f:
        for _ in range(mib):
            f.write(os.urandom(MiB))
        f.flush()
        os.fsync(f.fileno())


def time_peers(src: str, dst: str, res: dict[str, list[float]]) -> None:
    """One round of the peers: ``cp`` + ``sync`` of ``src`` to ``dst``, then ``cat`` of it
    (seconds appended to ``res["cp"]`` and ``res["cat"]``); ``dst`` is removed after."""
    t0 = time.perf_counter()
    subprocess.run(["cp", src, dst], check=True)
    subprocess.run(["sync", dst], check=True)
    res.setdefault("cp", []).append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    subprocess.run(f"cat {dst} > /dev/null", shell=True, check=True)
    res.setdefault("cat", []).append(time.perf_counter() - t0)
    os.unlink(dst)


def main(argv: list[str] | None = None) -> None:
    import ckptfs

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--name", default="v2_w2", help="result file bench/results/NAME.md")
    a = ap.parse_args(argv)
    if a.quick:
        a.mib, a.rounds = 32, 1
    work = tempfile.mkdtemp(prefix="v2w2-", dir="/tmp")
    load0 = os.getloadavg()
    src = os.path.join(work, "src.bin")
    write_source(src, a.mib)
    res: dict[str, list[float]] = {}
    files: dict[str, int] = {}
    try:
        for rnd in range(a.rounds):
            time_peers(src, os.path.join(work, f"cp-{rnd}"), res)
            for fmt in (("1", "2") if rnd % 2 == 0 else ("2", "1")):
                os.environ["CKPTFS_FORMAT_VERSION"] = fmt
                root = os.path.join(work, f"s{fmt}-{rnd}")
                st = ckptfs.open_store(root)
                run = st.start_run("w2", schema=("bulk", 1))
                t0 = time.perf_counter()
                run.checkpoint({"data": ckptfs.Blob(src)})
                res.setdefault(f"w{fmt}", []).append(time.perf_counter() - t0)
                st.close()
                files[fmt] = common.tree_size(root)[2]
                fresh = ckptfs.open_store(root)
                t0 = time.perf_counter()
                blob = fresh.read("w2")["data"]
                n = 0
                for b in blob.iter_bytes():
                    n += len(b)
                res.setdefault(f"r{fmt}", []).append(time.perf_counter() - t0)
                assert n == a.mib * MiB
                fresh.close()
                shutil.rmtree(root, ignore_errors=True)
    finally:
        os.environ.pop("CKPTFS_FORMAT_VERSION", None)
        shutil.rmtree(work, ignore_errors=True)
    med = {k: common.median(v) for k, v in res.items()}
    mbps = {k: a.mib / v for k, v in med.items()}
    f = common.fmt
    rows = [["`cp` + `sync`", f(mbps["cp"]), "1.00", "-"], ["`cat`", f(mbps["cat"]), "1.00", "-"]]
    tg = []
    for fmt in ("1", "2"):
        w, r = mbps[f"w{fmt}"] / mbps["cp"], mbps[f"r{fmt}"] / mbps["cat"]
        rows += [[f"v{fmt} blob write (durable)", f(mbps[f"w{fmt}"]), f(w), str(files[fmt])],
                 [f"v{fmt} read + verify", f(mbps[f"r{fmt}"]), f(r), "-"]]
        tg += [[f"v{fmt} write >= 0.5x cp", f"{f(w)}x", common.verdict(w, 0.5, at_most=False)],
               [f"v{fmt} read+verify >= 0.5x cat", f"{f(r)}x", common.verdict(r, 0.5, at_most=False)]]
    md = ("# Issue 15, local W2: one blob, v1 vs v2 vs cp / cat (same run)\n\n"
          + common.machine_md({"blob": f"{a.mib} MiB random (not 1 GiB: shared machine)",
                               "rounds": str(a.rounds),
                               "load average (1/5/15) at start": " / ".join(f"{x:.2f}" for x in load0),
                               "load average at end": " / ".join(f"{x:.2f}" for x in os.getloadavg())})
          + "\n" + common.table(["case", "MB/s (MiB/s)", "x cp / cat", "store files"], rows)
          + "\n## Targets\n\n" + common.table(["target", "measured", "verdict"], tg))
    path = common.write_result(a.name + ("-quick" if a.quick else ""), md)
    print(md)
    print("wrote", path)


if __name__ == "__main__":
    main()
