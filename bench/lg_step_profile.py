"""Issue 14: where a LangGraph W1 superstep through ``CkptfsSaver`` spends its CPU.

``python bench/lg_step_profile.py [--n 1000] [--durability sync] [--profile] [--out DIR]``
runs bench/langgraph_w1.py's graph (one ~1 KB AIMessage per superstep) on a fresh store and
prints the process CPU time per superstep (``time.process_time``, which does not drift with
the machine's load the way wall time does), the saver's own CPU per superstep (``put`` and
``put_writes``, measured around each call in the thread that runs it), and with
``--profile`` a cProfile of the second half of the run (cumulative times per superstep of the
saver's phases; the full tables go to ``--out``). Run it with each tree first on PYTHONPATH to
compare two trees (numbers that do not drift: CPU per superstep, calls per superstep).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.langgraph_w1 import build  # noqa: E402
from ckptfs.integrations.langgraph import CkptfsSaver  # noqa: E402

#: saver phases reported from the profile: function name -> file it is in
PHASES = {"put": "saver.py", "put_writes": "saver.py", "_channel_entries": "saver.py",
          "_encode": "saver.py", "_commit": "saver.py", "pack": "values.py",
          "pack_list": "appends.py", "commit": "repository.py", "chain_labels": "layout.py",
          "_parent": "saver.py", "_writes_of": "saver.py", "_rows": "saver.py",
          "encode_state": "entries.py", "get_tuple": "saver.py", "_tuple": "saver.py",
          "flush": "fold.py", "_flush": "fold.py", "fsync": "", "invoke": "main.py"}


class Timed(CkptfsSaver):
    """CkptfsSaver that adds up the thread CPU time of its write calls and, once ``profiling``
    is set, profiles them (LangGraph calls them from its executor threads: one profiler per
    thread, merged at the end)."""

    cpu: dict[str, float]
    profiling = False
    profiles: dict[int, cProfile.Profile]

    def _call(self, name: str, fn: Any, *a: Any, **k: Any) -> Any:
        prof = None
        if self.profiling:
            prof = self.profiles.setdefault(threading.get_ident(), cProfile.Profile(time.thread_time))
            prof.enable()
        t0 = time.thread_time()
        try:
            return fn(*a, **k)
        finally:
            self.cpu[name] = self.cpu.get(name, 0.0) + time.thread_time() - t0
            if prof is not None:
                prof.disable()

    def put(self, *a: Any, **k: Any) -> Any:
        return self._call("put", super().put, *a, **k)

    def put_writes(self, *a: Any, **k: Any) -> None:
        self._call("put_writes", super().put_writes, *a, **k)

    def close(self) -> None:
        self._call("close", super().close)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--durability", choices=("sync", "async"), default="sync")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--out", default="/tmp/lg_step_profile")
    ap.add_argument("--label", default=os.environ.get("PYTHONPATH", "?").split(":")[0])
    ap.add_argument("--saver-kw", default="{}", help="JSON keyword arguments for CkptfsSaver")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="lgprof-"))
    try:
        saver = Timed(str(root / "s"), **json.loads(args.saver_kw))
        saver.cpu = {}
        saver.profiles = {}
        cpus: list[float] = []
        half = args.n // 2

        def step_hook() -> None:
            cpus.append(time.process_time())
            if args.profile and len(cpus) == half:
                saver.profiling = True
                saver.cpu = {}

        class Stamps(list):  # type: ignore[type-arg]
            def append(self, x: float) -> None:
                super().append(x)
                step_hook()

        stamps2: list[float] = Stamps()
        graph = build(args.n, stamps2)
        app = graph.compile(checkpointer=saver)
        config: Any = {"configurable": {"thread_id": "w1"}, "recursion_limit": args.n + 10}
        c0, t0 = time.process_time(), time.perf_counter()
        app.invoke({"messages": [], "n": 0}, config, durability=args.durability)
        c1, t1 = time.process_time(), time.perf_counter()
        saver.close()
        steps = len(stamps2)
        late = (c1 - cpus[half]) / (steps - half) if steps > half else float("nan")
        out = {"label": args.label, "n": args.n, "durability": args.durability,
               "cpu_ms_per_step": (c1 - c0) / steps * 1e3,
               "cpu_ms_per_step_2nd_half": late * 1e3,
               "wall_ms_per_step": (t1 - t0) / steps * 1e3,
               }
        k = steps - half if args.profile else steps
        out.update({f"saver_{name}_cpu_ms": v / k * 1e3 for name, v in saver.cpu.items()})
        if args.profile:
            os.makedirs(args.out, exist_ok=True)
            st = pstats.Stats(*saver.profiles.values())
            out["prof_calls_per_step"] = round(st.total_calls / k)  # type: ignore[attr-defined]
            out["prof_total_ms_per_step"] = st.total_tt / k * 1e3  # type: ignore[attr-defined]
            phases: dict[str, float] = {}
            for (file, _line, fn), v in st.stats.items():  # type: ignore[attr-defined]
                want = PHASES.get(fn)
                if want is not None and file.endswith(want):
                    phases[f"{fn} ({os.path.basename(file) or 'builtin'})"] = (
                        phases.get(fn, 0.0) + v[3] / k * 1e3)
                elif "posix.fsync" in fn or "posix.fdatasync" in fn:
                    phases["fsync"] = phases.get("fsync", 0.0) + v[3] / k * 1e3
            out["phases_cum_ms"] = {p: round(v, 3) for p, v in
                                    sorted(phases.items(), key=lambda kv: -kv[1])}
            tag = args.label.strip("/").replace("/", "_")
            for sort in ("cumulative", "tottime"):
                s = io.StringIO()
                pstats.Stats(*saver.profiles.values(), stream=s).sort_stats(sort).print_stats(80)
                Path(args.out, f"{tag}-{args.durability}-{sort}.txt").write_text(s.getvalue())
            st.dump_stats(str(Path(args.out, f"{tag}-{args.durability}.pstats")))
        print(json.dumps(out, indent=1))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
