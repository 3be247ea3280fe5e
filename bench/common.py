"""Shared bench helpers: machine info, timing statistics, fsync counting, sizes, Markdown."""

from __future__ import annotations

import contextlib
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from importlib import metadata
from typing import Any

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
PACKAGES = ("ckptfs", "blake3", "pyfastcdc", "zstandard", "cbor2", "fsspec", "langgraph",
            "langgraph-checkpoint", "langgraph-checkpoint-sqlite",
            "langgraph-checkpoint-objectstorage", "ormsgpack", "s3fs", "moto", "matplotlib",
            "cryptography")


def machine_info() -> dict[str, str]:
    """What the numbers were measured on: cores, CPU, Python, package versions, disk."""
    cpu = platform.processor() or "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    versions = {}
    for p in PACKAGES:
        try:
            versions[p] = metadata.version(p)
        except metadata.PackageNotFoundError:
            versions[p] = "not installed"
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, cwd=os.path.dirname(RESULTS)).stdout.strip() or "?"
    except OSError:
        rev = "?"
    return {"nproc": str(os.cpu_count()), "cpu": cpu, "ckptfs commit": rev, "python": sys.version.split()[0],
            "platform": platform.platform(), "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "packages": ", ".join(f"{k} {v}" for k, v in versions.items()),
            # the machine is shared: the load says how far the absolute times can be trusted
            "load average (1/5/15 min) when written": " / ".join(
                f"{x:.2f}" for x in os.getloadavg())}


def machine_md(extra: dict[str, str] | None = None) -> str:
    info = machine_info()
    info.update(extra or {})
    return "\n".join(f"- **{k}**: {v}" for k, v in info.items()) + "\n"


def mean(xs: Sequence[float]) -> float:
    return statistics.fmean(xs) if xs else float("nan")


def pct(xs: Sequence[float], p: float) -> float:
    """The p-th percentile (nearest rank) of ``xs``."""
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, math.ceil(p / 100 * len(s)) - 1))]


def median(xs: Sequence[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


class FsyncCounter:
    """Counts ``os.fsync``/``os.fdatasync`` calls made from Python (sqlite's own are not seen)."""

    def __init__(self) -> None:
        self.count = 0
        self._orig = (os.fsync, getattr(os, "fdatasync", None))

    def install(self) -> FsyncCounter:
        orig_fsync, orig_fdatasync = self._orig

        def fsync(fd: Any) -> None:
            self.count += 1
            orig_fsync(fd)

        os.fsync = fsync
        if orig_fdatasync is not None:
            def fdatasync(fd: Any) -> None:
                self.count += 1
                orig_fdatasync(fd)
            os.fdatasync = fdatasync
        return self

    def uninstall(self) -> None:
        os.fsync = self._orig[0]
        if self._orig[1] is not None:
            os.fdatasync = self._orig[1]


def tree_size(path: str) -> tuple[int, int, int]:
    """(sum of file sizes in bytes, ``du -sk`` in KiB, number of files) under ``path``."""
    total = files = 0
    for d, _, names in os.walk(path):
        for n in names:
            with contextlib.suppress(FileNotFoundError):
                total += os.lstat(os.path.join(d, n)).st_size
                files += 1
    du = subprocess.run(["du", "-sk", path], capture_output=True, text=True, check=True)
    return total, int(du.stdout.split()[0]), files


def create_probe(directory: str, n: int = 200) -> dict[str, float]:
    """Small-file create latency (4 KiB write + fsync + rename) in ``directory``, in ms.

    Recorded beside results because file creation on these machines can be 20x slower for
    minutes after mass deletions (DESIGN.md, benchmarking traps). The files are left in place.
    """
    os.makedirs(directory, exist_ok=True)
    data = os.urandom(4096)
    lat = []
    for i in range(n):
        tmp = os.path.join(directory, f"p{i}.tmp")
        t0 = time.perf_counter()
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        os.write(fd, data)
        os.fsync(fd)
        os.close(fd)
        os.rename(tmp, os.path.join(directory, f"p{i}"))
        lat.append((time.perf_counter() - t0) * 1000)
    return {"median_ms": median(lat), "p99_ms": pct(lat, 99)}


def run_worker(module: str, args: Sequence[str], *, strace_out: str | None = None,
               timeout: float = 3600) -> dict[str, Any]:
    """Run ``python -m module args`` in a fresh process; its last stdout line is JSON."""
    cmd = [sys.executable, "-m", module, *args]
    if strace_out is not None:
        cmd = ["strace", "-f", "-c", "-e", "trace=fsync,fdatasync,sync_file_range", "-o",
               strace_out, *cmd]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=root)
    if p.returncode != 0:
        raise RuntimeError(f"worker {module} {' '.join(args)} failed:\n{p.stderr[-4000:]}")
    return dict(json.loads(p.stdout.strip().splitlines()[-1]))


def strace_syncs(path: str) -> int:
    """Total fsync-family calls from an ``strace -c`` summary file."""
    total = 0
    with open(path) as f:
        for line in f:
            parts = line.split()
            if parts and parts[-1] in ("fsync", "fdatasync", "sync_file_range"):
                total += int(parts[3])
    return total


def have_strace() -> bool:
    if shutil.which("strace") is None:
        return False
    p = subprocess.run(["strace", "-f", "-o", os.devnull, "true"], capture_output=True)
    return p.returncode == 0


def fmt(x: float, digits: int = 2) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    if abs(x) >= 100:
        return f"{x:,.0f}"
    if abs(x) >= 10:
        return f"{x:.1f}"
    return f"{x:.{digits}f}"


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A Markdown table."""
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    for r in rows:
        out.append("| " + " | ".join(str(c) for c in r) + " |")
    return "\n".join(out) + "\n"


def verdict(measured: float, limit: float, *, at_most: bool = True) -> str:
    if measured is None or math.isnan(measured):
        return "n/a"
    ok = measured <= limit if at_most else measured >= limit
    return "PASS" if ok else "MISS"


def write_result(name: str, text: str) -> str:
    os.makedirs(RESULTS, exist_ok=True)
    # "w1" and "w1.md" name the same file (a name given with its extension got it twice)
    path = os.path.join(RESULTS, name if name.endswith(".md") else f"{name}.md")
    with open(path, "w") as f:
        f.write(text)
    return path


@contextlib.contextmanager
def timer() -> Iterator[list[float]]:
    """``with timer() as t: ...`` then ``t[0]`` is the elapsed seconds."""
    out: list[float] = []
    t0 = time.perf_counter()
    try:
        yield out
    finally:
        out.append(time.perf_counter() - t0)
