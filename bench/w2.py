"""W2, bulk data: one large incompressible ``Blob`` written, read back and edited in the middle.

Compares ckptfs's write with ``cp`` of the same file on the same disk and with the BLAKE3 and
FastCDC rates measured in the same run; read+verify with ``cat > /dev/null``; counts the new
chunk bytes a 1 MiB mid-file insertion costs; and reads peak memory (VmHWM) of the
ckptfs worker process for two file sizes. Worker: ``python -m bench.w2 MODE ...``.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from typing import Any

from bench import common

MiB = 1 << 20
RUN = "bulk"


# -- workers (fresh processes, so ru_maxrss is theirs alone) ---------------------------------
def _rss_kib() -> int:
    """Peak RSS of this process image (VmHWM: unlike ru_maxrss, not inherited across exec)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def worker(argv: list[str]) -> dict[str, Any]:
    import ckptfs

    mode, store_path = argv[0], argv[1]
    base_rss = _rss_kib()
    store = ckptfs.open_store(store_path)
    t0 = time.perf_counter()
    if mode == "write":
        run = store.start_run(argv[3], schema=("bulk", 1))
        run.checkpoint({"data": ckptfs.Blob(argv[2])})
    elif mode == "rewrite":
        run = store.resume(argv[3])
        run.checkpoint({"data": ckptfs.Blob(argv[2])})
    elif mode == "iter":
        blob = store.read(argv[3])["data"]
        n = 0
        for piece in blob.iter_bytes():
            n += len(piece)
        assert n == blob.size
    elif mode == "save":
        store.read(argv[3])["data"].save(argv[2])
    elif mode == "idle":
        pass
    secs = time.perf_counter() - t0
    store.close()
    return {"s": secs, "maxrss_kib": _rss_kib(), "rss_after_import_kib": base_rss}


# -- helpers ---------------------------------------------------------------------------------
def make_file(path: str, size: int, seed: bytes = b"") -> None:
    """``size`` incompressible bytes, written in 8 MiB pieces and fsynced."""
    with open(path, "wb") as f:
        left = size
        while left:
            piece = os.urandom(min(8 * MiB, left))
            f.write(piece)
            left -= len(piece)
        f.flush()
        os.fsync(f.fileno())


def insert_middle(src: str, dst: str, extra: int) -> None:
    """``dst`` = first half of ``src`` + ``extra`` random bytes + second half (streamed)."""
    size = os.path.getsize(src)
    with open(src, "rb") as fi, open(dst, "wb") as fo:
        left = size // 2
        while left:
            b = fi.read(min(8 * MiB, left))
            fo.write(b)
            left -= len(b)
        fo.write(os.urandom(extra))
        while b := fi.read(8 * MiB):
            fo.write(b)
        fo.flush()
        os.fsync(fo.fileno())


def timed(cmd: str) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, shell=True, check=True)
    return time.perf_counter() - t0


def hash_rates(path: str) -> dict[str, float]:
    """BLAKE3 (one thread) and FastCDC (pyfastcdc, ckptfs's default parameters) in MB/s."""
    import blake3
    from pyfastcdc.cy import FastCDC

    import ckptfs

    size = os.path.getsize(path)
    h = blake3.blake3()
    t0 = time.perf_counter()
    with open(path, "rb") as f:
        while b := f.read(8 * MiB):
            h.update(b)
    b3 = size / (time.perf_counter() - t0) / 1e6
    p = ckptfs.ChunkerParams()
    cdc = FastCDC(p.avg_size, min_size=p.min_size, max_size=p.max_size,
                  normalized_chunking=p.normalization)
    t0 = time.perf_counter()
    n = sum(1 for _ in cdc.cut_file(path))
    fc = size / (time.perf_counter() - t0) / 1e6
    return {"blake3": b3, "fastcdc": fc, "chunks": n}


def chunk_files(store: str) -> dict[str, int]:
    """Every file of the store but the writers' tmp/ (v2: records and packs hold the bodies)."""
    out = {}
    for d, _, names in os.walk(store):
        if os.path.relpath(d, store).split(os.sep)[0] == "tmp":
            continue
        for n in names:
            p = os.path.join(d, n)
            out[p] = os.path.getsize(p)
    return out


def ck(args: list[str]) -> dict[str, Any]:
    return common.run_worker("bench.w2", args)


def run(workdir: str, *, quick: bool) -> str:
    size = (256 if quick else 1024) * MiB
    small = 64 * MiB
    probe = common.create_probe(os.path.join(workdir, "probe"))
    src = os.path.join(workdir, "src.bin")
    make_file(src, size)
    rates = hash_rates(src)
    cp_s = timed(f"cp {src} {workdir}/cp.bin")
    cp_sync_s = timed(f"cp {src} {workdir}/cp2.bin && sync {workdir}/cp2.bin")
    cat_s = timed(f"cat {src} > /dev/null")
    store = os.path.join(workdir, "store")
    w = ck(["write", store, src, RUN])
    it = ck(["iter", store, "", RUN])
    sv = ck(["save", store, os.path.join(workdir, "restored.bin"), RUN])
    subprocess.run(["cmp", src, os.path.join(workdir, "restored.bin")], check=True)
    same = True
    before = chunk_files(store)
    src2 = os.path.join(workdir, "src2.bin")
    insert_middle(src, src2, MiB)
    rw = ck(["rewrite", store, src2, RUN])
    after = chunk_files(store)
    new_bytes = sum(v for k, v in after.items() if k not in before)
    new_files = len(set(after) - set(before))
    # peak memory for a small file, in another store
    small_src = os.path.join(workdir, "small.bin")
    make_file(small_src, small)
    store_s = os.path.join(workdir, "store-small")
    ws = ck(["write", store_s, small_src, RUN])
    its = ck(["iter", store_s, "", RUN])
    idle = ck(["idle", os.path.join(workdir, "store-idle"), "", RUN])
    mb = size / 1e6
    f = common.fmt
    rows = [
        ["BLAKE3 hash (1 thread, same file)", f(rates["blake3"]), "", ""],
        ["FastCDC cut points (pyfastcdc)", f(rates["fastcdc"]), "", ""],
        ["`cp` (page cache, no fsync)", f(mb / cp_s), "", ""],
        ["`cp` + `sync FILE` (durable)", f(mb / cp_sync_s), "", ""],
        ["ckptfs checkpoint of `Blob(path)` (durable)", f(mb / w["s"]),
         f(w["s"] / cp_s, 2) + "x cp time", f(w["maxrss_kib"] / 1024, 0)],
        ["`cat FILE > /dev/null`", f(mb / cat_s), "", ""],
        ["ckptfs read+verify, `iter_bytes()` discarded", f(mb / it["s"]),
         f(it["s"] / cat_s, 2) + "x cat time", f(it["maxrss_kib"] / 1024, 0)],
        ["ckptfs read+verify, `StoredBlob.save(path)`", f(mb / sv["s"]), "",
         f(sv["maxrss_kib"] / 1024, 0)],
        ["ckptfs second snapshot after 1 MiB inserted mid-file", f((size + MiB) / 1e6 / rw["s"]),
         "", f(rw["maxrss_kib"] / 1024, 0)],
    ]
    share = new_bytes / size
    write_ratio = (mb / w["s"]) / (mb / cp_s)
    write_ratio_sync = (mb / w["s"]) / (mb / cp_sync_s)
    read_ratio = (mb / it["s"]) / (mb / cat_s)
    mem_ratio = w["maxrss_kib"] / ws["maxrss_kib"]
    tgt = [
        ["write >= 0.5x `cp`", f"{f(write_ratio, 3)}x (vs cp+sync: {f(write_ratio_sync, 3)}x)",
         common.verdict(write_ratio, 0.5, at_most=False)],
        ["read+verify >= 0.5x `cat`", f"{f(read_ratio, 3)}x",
         common.verdict(read_ratio, 0.5, at_most=False)],
        ["1 MiB insertion adds <= 1 % new bytes",
         f"{new_bytes / 1e6:.3f} MB in {new_files} new files = {share * 100:.3f} %",
         common.verdict(share, 0.01)],
        [f"peak memory independent of file size (write RSS {size // MiB} MiB file / "
         f"{small // MiB} MiB file <= 1.2)",
         f"{f(w['maxrss_kib'] / 1024, 0)} MiB / {f(ws['maxrss_kib'] / 1024, 0)} MiB = "
         f"{f(mem_ratio, 3)}x (read: {f(it['maxrss_kib'] / 1024, 0)} / "
         f"{f(its['maxrss_kib'] / 1024, 0)} MiB)", common.verdict(mem_ratio, 1.2)],
    ]
    md = ("# W2: bulk data (one incompressible Blob)\n\n"
          + common.machine_md({"mode": "quick" if quick else "full",
                               "file size": f"{size // MiB} MiB (and {small // MiB} MiB for "
                                            "the memory comparison)",
                               "small-file create probe": f"{f(probe['median_ms'])} ms median, "
                                                          f"{f(probe['p99_ms'])} ms p99"})
          + "\nEach ckptfs step runs in a fresh process (peak RSS from /proc VmHWM, in MiB; "
            f"an idle process that imports ckptfs and opens a store peaks at "
            f"{f(idle['maxrss_kib'] / 1024, 0)} MiB). The source file and the store are in the "
            "page cache for both ckptfs and the shell tools (warm reads). Restored bytes "
            f"identical to the source: {'yes' if same else 'NO'}.\n\n"
          + common.table(["operation", "MB/s", "vs tool", "peak RSS MiB"], rows)
          + "\n## Targets (issue 9)\n\n"
          + common.table(["target", "measured", "verdict"], tgt))
    common.write_result("w2" + ("-quick" if quick else ""), md)
    return md


if __name__ == "__main__":
    print(json.dumps(worker(sys.argv[1:])))
