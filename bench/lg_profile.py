"""Where a CkptfsSaver step and a fresh ``get_state`` spend their time (issue 36).

Two measurements of W1 through LangGraph (``bench/langgraph_w1.py``: one ~1 KB message per
superstep, one thread), each in its own fresh process:

* **phase timers** (no profiler; wall time): the saver's ``put`` and ``put_writes`` and, inside
  them, packing values (``Packer.pack``; of it LangGraph's ``serde.dumps_typed``), encoding
  entries (``EntryWriter.encode_state``), the commit (``Repository.commit``; of it the fsyncs
  and the rest of the I/O), per superstep. Nested timers are inclusive; the table also says
  what is left of each parent.
* **cProfile**: every function's own time (``tottime``) over the whole run, summed by phase
  (saver bookkeeping, LangGraph serde, our encoding, hashing, compression, manifest and
  locators, I/O, fsync, LangGraph's loop, other), so that the rows add up to the profiled total.

Then the same two for a fresh ``get_state`` of the N-step thread (the time a restarted agent
waits), with the count of storage reads.

    python -m bench.lg_profile [--n 1000] [--durability sync] [--out FILE]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import machine_md  # noqa: E402

#: (phase, test on (file, function name)); the first that matches wins
PHASES: list[tuple[str, Callable[[str, str], bool]]] = [
    ("fsync", lambda f, n: "fsync" in n or "fdatasync" in n),
    ("I/O (open, write, link, rename, stat, list, read)",
     lambda f, n: f == "~" and any(k in n for k in (
         "posix.", "io.open", "_io.", "'write' of", "'read' of", "'close' of", "scandir",
         "'readinto'", "nt."))),
    ("hashing (blake3)", lambda f, n: "blake3" in n or "blake3" in f or f.endswith(
        "format/digest.py")),
    ("compression (zstd)", lambda f, n: "zstd" in n.lower() or "zstandard" in f or f.endswith(
        "format/zstd.py")),
    ("LangGraph serde (dumps_typed / loads_typed, ormsgpack)",
     lambda f, n: "langgraph/checkpoint/serde" in f or "ormsgpack" in n or "ormsgpack" in f),
    ("saver: append detection (appends.py)", lambda f, n: f.endswith("langgraph/appends.py")),
    ("saver: bookkeeping (put, put_writes, labels, lookups, fold)",
     lambda f, n: "ckptfs/integrations/" in f),
    ("our encoding (entries, fast_plain, cbor, codecs, values)",
     lambda f, n: any(f.endswith(m) for m in (
         "store/entries.py", "format/fast_plain.py", "format/cbor.py", "format/cbor_parts.py",
         "format/values.py", "format/typed.py", "runtime/codecs.py", "runtime/codecs_builtin.py",
         "runtime/codecs_classes.py", "store/entry_reads.py", "format/cdc.py"))
     or "cbor2" in n or "cbor2" in f or "msgpack" in n),
    ("manifest bytes and models (manifest_bytes, models, chunk_lists, names)",
     lambda f, n: any(f.endswith(m) for m in (
         "format/manifest_bytes.py", "format/models.py", "format/chunk_lists.py",
         "format/names.py", "format/limits.py"))),
    ("record building: locators, bodies, header (record_bytes, chunk_sets, containers)",
     lambda f, n: any(f.endswith(m) for m in (
         "format/record_bytes.py", "store/chunk_sets.py", "format/containers.py",
         "store/containers.py", "format/framing.py", "format/pointers.py"))),
    ("commit protocol and storage (Python side)",
     lambda f, n: "ckptfs/store/" in f or "ckptfs/storage/" in f or "ckptfs/runtime/" in f
     or "ckptfs/observe" in f or "ckptfs/format/" in f),
    ("LangGraph loop and graph (not the saver)",
     lambda f, n: "langgraph/" in f or "langchain_core/" in f),
    ("threads and locks (waits, executor)",
     lambda f, n: "threading.py" in f or "concurrent/futures" in f or "acquire" in n
     or "queue.py" in f),
]


def phase_of(f: str, n: str) -> str:
    for name, test in PHASES:
        if test(f, n):
            return name
    return "other (Python runtime, copy, pydantic, ...)"


def by_phase(prof: cProfile.Profile) -> tuple[dict[str, float], float,
                                               dict[str, list[tuple[float, str]]]]:
    """Own time per phase (seconds), the total, and the top functions of each phase."""
    st = pstats.Stats(prof)
    out: dict[str, float] = defaultdict(float)
    top: dict[str, list[tuple[float, str]]] = defaultdict(list)
    total = 0.0
    for (f, line, n), (_cc, _nc, tt, _ct, callers) in st.stats.items():  # type: ignore[attr-defined]
        p = phase_of(f, n)
        short = f"{Path(f).name}:{line}({n})" if f != "~" else n
        total += tt
        if p.startswith("other") and f == "~" and callers:
            # a built-in (any, dict.get, ...): its time goes to the phases of its callers
            for (cf, _cl, cn), row in callers.items():
                q = phase_of(cf, cn)
                out[q] += row[2]
                top[q].append((row[2], f"{short} from {Path(cf).name}:{cn}"))
            continue
        out[p] += tt
        top[p].append((tt, short))
    for p in top:
        top[p].sort(reverse=True)
    return dict(out), total, dict(top)


class Timers:
    """Inclusive wall time and calls per named phase (wrapped callables)."""

    def __init__(self) -> None:
        self.t: dict[str, float] = defaultdict(float)
        self.n: dict[str, int] = defaultdict(int)

    def wrap(self, owner: Any, attr: str, name: str) -> None:
        fn = getattr(owner, attr)
        timers = self

        def timed(*a: Any, **k: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                timers.t[name] += time.perf_counter() - t0
                timers.n[name] += 1

        setattr(owner, attr, timed)


def _install(timers: Timers) -> None:
    import ckptfs.integrations.langgraph.values as values
    from ckptfs.integrations.langgraph import appends, channels
    from ckptfs.integrations.langgraph.saver import CkptfsSaver
    from ckptfs.store.entries import EntryWriter
    from ckptfs.store.repository import Repository
    from ckptfs.storage.local import LocalStorage

    timers.wrap(CkptfsSaver, "put", "put")
    timers.wrap(CkptfsSaver, "put_writes", "put_writes (incl. waiting for the next put)")
    if hasattr(CkptfsSaver, "_put_writes"):
        timers.wrap(CkptfsSaver, "_put_writes", "put_writes: under the locks")
    timers.wrap(values.Packer, "pack", "put*: Packer.pack (values, incl. serde)")
    timers.wrap(channels, "pack_list", "put: appends.pack_list (channels)")
    timers.wrap(EntryWriter, "encode_state", "put*: EntryWriter.encode_state")
    timers.wrap(Repository, "commit", "put*: Repository.commit")
    timers.wrap(LocalStorage, "commit", "commit: LocalStorage.commit (I/O incl. fsync)")
    timers.wrap(os, "fsync", "commit: os.fsync")
    real_init = values.Packer.__init__

    def init(self: Any, serde: Any, codecs: Any) -> None:
        real_init(self, serde, codecs)
        inner = serde.dumps_typed

        def dumps_typed(v: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return inner(v)
            finally:
                timers.t["pack: serde.dumps_typed (LangGraph)"] += time.perf_counter() - t0
                timers.n["pack: serde.dumps_typed (LangGraph)"] += 1
        self.serde = type("Timed", (), {"dumps_typed": staticmethod(dumps_typed),
                                        "loads_typed": serde.loads_typed})()

    values.Packer.__init__ = init  # type: ignore[method-assign]
    real_lock = CkptfsSaver._thread_lock

    class Timed:
        """A thread lock whose waits are timed (``put`` waits for ``put_writes``' commit)."""

        def __init__(self, lock: Any) -> None:
            self.lock = lock

        def __enter__(self) -> None:
            t0 = time.perf_counter()
            self.lock.acquire()
            timers.t["put*: waiting for the thread lock"] += time.perf_counter() - t0
            timers.n["put*: waiting for the thread lock"] += 1

        def __exit__(self, *exc: Any) -> None:
            self.lock.release()

    CkptfsSaver._thread_lock = lambda self, tid: Timed(real_lock(self, tid))  # type: ignore


def _profile_saver(prof: cProfile.Profile) -> None:
    """Profile every saver call (in LangGraph's worker threads: cProfile sees one thread
    at a time, so the calls are serialised by a lock of our own while profiled)."""
    import threading

    from ckptfs.integrations.langgraph.saver import CkptfsSaver

    gate = threading.Lock()
    # put_writes itself may wait for the next put (fold.py): its locked part is profiled
    names = ("put", "_put_writes") if hasattr(CkptfsSaver, "_put_writes") else (
        "put", "put_writes")
    for name in names:
        fn = getattr(CkptfsSaver, name)

        def profiled(*a: Any, _fn: Any = fn, **k: Any) -> Any:
            with gate:
                prof.enable()
                try:
                    return _fn(*a, **k)
                finally:
                    prof.disable()
        setattr(CkptfsSaver, name, profiled)


@contextmanager
def _reads_counted() -> Iterator[dict[str, int]]:
    """Count the local storage's reads and listings (by method) while inside."""
    from ckptfs.storage.local import LocalStorage

    got: dict[str, int] = defaultdict(int)
    saved = {}
    for name in ("read", "read_range", "read_range_into", "open_ranges", "read_many", "list",
                 "listing", "list_after", "scan", "exists", "size"):
        fn = getattr(LocalStorage, name, None)
        if fn is None:
            continue
        saved[name] = fn

        def counted(self: Any, *a: Any, _fn: Any = fn, _n: str = name, **k: Any) -> Any:
            got[_n] += 1
            return _fn(self, *a, **k)
        setattr(LocalStorage, name, counted)
    try:
        yield got
    finally:
        for name, fn in saved.items():
            setattr(LocalStorage, name, fn)


def child(mode: str, where: str, n: int, durability: str, saver: str) -> None:
    """Run in a fresh process: ``steps`` (timers or cProfile over the graph run) or ``load``
    (timers or cProfile over a fresh get_state); prints a repr of the results."""
    from bench import langgraph_w1 as w1

    w1.DURABILITY[0] = durability
    timers = Timers()
    if mode.endswith("timers"):
        _install(timers)
    prof = cProfile.Profile() if mode.endswith("cprofile") else None
    if prof is not None and mode.startswith("steps"):
        _profile_saver(prof)  # the saver's own calls; the graph's loop is left out
        main_prof, prof = prof, None
    reads: dict[str, int] = {}
    if mode.startswith("steps"):
        stamps: list[float] = []
        s = w1.make_saver(saver, Path(where))
        app = w1.build(n, stamps).compile(checkpointer=s)
        config: Any = {"configurable": {"thread_id": "w1"}, "recursion_limit": n + 10}
        if prof:
            prof.enable()
        t0 = time.perf_counter()
        app.invoke({"messages": [], "n": 0}, config, durability=durability)
        wall = time.perf_counter() - t0
        if prof:
            prof.disable()
        s.close()  # type: ignore[attr-defined]
        count = n + 1
    else:
        t0 = time.perf_counter()
        with _reads_counted() as reads:
            if prof:
                prof.enable()
            fresh = w1.make_saver(saver, Path(where))
            values = w1.build(n, []).compile(checkpointer=fresh).get_state(
                {"configurable": {"thread_id": "w1"}}).values
            if prof:
                prof.disable()
        wall = time.perf_counter() - t0
        assert len(values["messages"]) == n
        count = 1
        reads = dict(reads)
    result: dict[str, Any] = {"wall": wall, "count": count, "reads": reads,
                              "timers": {k: (timers.t[k], timers.n[k]) for k in timers.t}}
    if mode == "steps-cprofile":
        prof = main_prof
    if prof:
        phases, total, top = by_phase(prof)
        result.update(phases=phases, total=total,
                      top={p: v[:4] for p, v in top.items()})
    print(repr(result))


def _run(mode: str, where: Path, n: int, durability: str, saver: str) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-m", "bench.lg_profile", "--child", mode, str(where),
                          "--n", str(n), "--durability", durability, "--saver", saver],
                         capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parent.parent)
    return eval(out.stdout.strip().splitlines()[-1])  # noqa: S307 - our own repr of floats


def report(n: int, durability: str, saver: str, title: str) -> str:
    scratch = Path(tempfile.mkdtemp(prefix="lg-prof-"))
    load = [os.getloadavg()[0]]
    res: dict[str, dict[str, Any]] = {}
    for what in ("steps", "load"):  # timers first, then a cProfile run, each in a fresh store
        where = scratch / f"{what}-timers"
        if what == "load":
            where = scratch / "steps-timers"
        res[f"{what}-timers"] = _run(f"{what}-timers", where, n, durability, saver)
        where = scratch / ("steps-cprofile" if what == "steps" else "steps-timers")
        res[f"{what}-cprofile"] = _run(f"{what}-cprofile", where, n, durability, saver)
    load.append(os.getloadavg()[0])
    lines = [f"# {title}", "",
             f"W1 through LangGraph, CkptfsSaver ({saver}) on a local dir, N = {n}, "
             f"`durability=\"{durability}\"`, one fresh process per measurement. "
             f"Command: `python -m bench.lg_profile --n {n} --durability {durability}`.", "",
             machine_md({"load average (1 min) at start / end": f"{load[0]:.2f} / {load[1]:.2f}"}),
             ""]
    for what, per, unit in (("steps", n + 1, "per superstep"), ("load", 1, "per get_state")):
        t = res[f"{what}-timers"]
        lines += [f"## {'One step' if what == 'steps' else 'Fresh get_state'}: phase timers "
                  "(no profiler, wall time)", "",
                  f"Wall time: {t['wall'] * 1e3:.1f} ms in all, "
                  f"{t['wall'] / per * 1e3:.3f} ms {unit}."
                  + (f" Storage reads: {t['reads']}." if what == 'load' else ""), "",
                  f"| timer (inclusive) | calls | ms in all | ms {unit} |", "|---|---|---|---|"]
        for k, (secs, calls) in sorted(t["timers"].items(), key=lambda kv: -kv[1][0]):
            lines.append(f"| {k} | {calls} | {secs * 1e3:.1f} | {secs / per * 1e3:.3f} |")
        c = res[f"{what}-cprofile"]
        lines += ["", f"## {'One step' if what == 'steps' else 'Fresh get_state'}: cProfile, "
                  "own time by phase", "",
                  f"Profiled wall {c['wall'] * 1e3:.1f} ms (the profiler slows Python code "
                  f"more than C: compare shares, not times); own time summed "
                  f"{c['total'] * 1e3:.1f} ms"
                  + (" (the saver's put and put_writes only, in LangGraph's worker threads; "
                     "LangGraph's own loop is not profiled)." if what == "steps" else ".")
                  + (f" Storage reads: {c['reads']}." if what == 'load' else ""), "",
                  f"| phase | ms {unit} (profiled) | share | top functions (own ms in all) |",
                  "|---|---|---|---|"]
        for p, secs in sorted(c["phases"].items(), key=lambda kv: -kv[1]):
            tops = "; ".join(f"{name} {tt * 1e3:.0f}" for tt, name in c["top"].get(p, [])[:3])
            lines.append(f"| {p} | {secs / per * 1e3:.3f} | {secs / c['total'] * 100:.1f} % | "
                         f"{tops} |")
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--durability", default="sync", choices=("sync", "async"))
    ap.add_argument("--saver", default="Ckptfs")
    ap.add_argument("--child", nargs=2, metavar=("MODE", "PATH"))
    ap.add_argument("--title", default="CkptfsSaver profile")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    if args.child:
        child(args.child[0], args.child[1], args.n, args.durability, args.saver)
        return
    text = report(args.n, args.durability, args.saver, args.title)
    if args.out:
        Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
