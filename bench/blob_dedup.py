"""Issue 30 defect 7: the same streamed blob in two checkpoints, and a 1-byte edit.

``python -m bench.blob_dedup [--mib 256] [--rounds 3] [--quick] [--name blob_dedup]`` writes
``bench/results/<name>.md``. Every case starts from a store holding one checkpoint of the
blob (random bytes, incompressible, fsynced before the first round; page cache warm):

- *first write*: that checkpoint itself (a new store), beside ``cp`` + ``sync`` of the file;
- *same run, same process*: the same file checkpointed again by the same run object;
- *after a restart*: a fresh store object resumes the run and checkpoints the same file
  (what a new process does; nothing of the first write is remembered);
- *1-byte edit after a restart*: the same, with one byte in the middle of the file changed;
- *another run after a restart*: a new run of a fresh store object (spec/retention.md 4.1:
  written again, which refreshes it).

Measured per case: bytes added to the store (the store is create-only: its growth is what
was written), files added, fsyncs made from Python (bench.common.FsyncCounter) and seconds
(medians over the rounds). Run it against another tree with ``PYTHONPATH=<tree>:.`` to get
the "before" numbers.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from typing import Any

from bench import common
from bench.v2_w2 import time_peers, write_source

MiB = 1 << 20
CASES = ("first write", "same run, same process", "after a restart",
         "1-byte edit after a restart", "another run after a restart")


def _edit(src: str, dst: str) -> None:
    """``dst`` = ``src`` with the byte in its middle flipped, fsynced."""
    shutil.copyfile(src, dst)
    with open(dst, "r+b") as f:
        f.seek(os.path.getsize(dst) // 2)
        b = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([b[0] ^ 0xFF]))
        f.flush()
        os.fsync(f.fileno())


def _measure(root: str, fn: Callable[[], Any], out: dict[str, list[float]], case: str) -> None:
    """Run ``fn`` (one checkpoint) and append its bytes, files, fsyncs and seconds."""
    b0, _, f0 = common.tree_size(root) if os.path.exists(root) else (0, 0, 0)
    counter = common.FsyncCounter().install()
    try:
        t0 = time.perf_counter()
        fn()
        dt = time.perf_counter() - t0
    finally:
        counter.uninstall()
    b1, _, f1 = common.tree_size(root)
    for k, v in (("bytes", b1 - b0), ("files", f1 - f0), ("fsyncs", counter.count),
                 ("s", dt)):
        out.setdefault(f"{case}|{k}", []).append(float(v))


def one_round(work: str, src: str, edited: str, rnd: int, res: dict[str, list[float]]) -> None:
    import ckptfs

    root = os.path.join(work, f"s{rnd}")
    store = ckptfs.open_store(root)
    run = store.start_run("r", schema=("bulk", 1))
    _measure(root, lambda: run.checkpoint({"data": ckptfs.Blob(src)}), res, CASES[0])
    _measure(root, lambda: run.checkpoint({"data": ckptfs.Blob(src), "n": 2}), res, CASES[1])
    store.close()
    _measure(root, lambda: ckptfs.open_store(root).resume("r").checkpoint(
        {"data": ckptfs.Blob(src), "n": 3}), res, CASES[2])
    _measure(root, lambda: ckptfs.open_store(root).resume("r").checkpoint(
        {"data": ckptfs.Blob(edited), "n": 4}), res, CASES[3])
    _measure(root, lambda: ckptfs.open_store(root).start_run("other").checkpoint(
        {"data": ckptfs.Blob(src)}), res, CASES[4])
    fresh = ckptfs.open_store(root)
    assert fresh.read("r")["data"].read() == open(edited, "rb").read()
    fresh.close()
    shutil.rmtree(root, ignore_errors=True)


def main(argv: list[str] | None = None) -> None:
    import ckptfs

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--name", default="blob_dedup", help="result file bench/results/NAME.md")
    a = ap.parse_args(argv)
    if a.quick:
        a.mib, a.rounds = 32, 1
    work = tempfile.mkdtemp(prefix="blobdedup-", dir="/tmp")
    load0 = os.getloadavg()
    src, edited = os.path.join(work, "src.bin"), os.path.join(work, "edited.bin")
    write_source(src, a.mib)
    _edit(src, edited)
    res: dict[str, list[float]] = {}
    try:
        for rnd in range(a.rounds):
            time_peers(src, os.path.join(work, f"cp-{rnd}"), res)
            one_round(work, src, edited, rnd, res)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    med = {k: common.median(v) for k, v in res.items()}
    f = common.fmt
    size = a.mib * MiB
    rows = [["`cp` + `sync` of the file", f"{size:,}", "1", "-", f(med["cp"], 3), "1.00"]]
    for case in CASES:
        s = med[f"{case}|s"]
        rows.append([case, f"{int(med[f'{case}|bytes']):,}", str(int(med[f"{case}|files"])),
                     str(int(med[f"{case}|fsyncs"])), f(s, 3), f(s / med["cp"])])
    md = (f"# Issue 30 defect 7: the same {a.mib} MiB blob in two checkpoints\n\n"
          + common.machine_md({"ckptfs": os.path.dirname(ckptfs.__file__),
                               "blob": f"{a.mib} MiB random", "rounds": str(a.rounds),
                               "load average (1/5/15) at start":
                                   " / ".join(f"{x:.2f}" for x in load0),
                               "load average at end":
                                   " / ".join(f"{x:.2f}" for x in os.getloadavg())})
          + "\n" + common.table(["case", "bytes added", "files added", "fsyncs", "seconds",
                                 "x cp time"], rows))
    path = common.write_result(a.name + ("-quick" if a.quick else ""), md)
    print(md)
    print("wrote", path)


if __name__ == "__main__":
    main()
