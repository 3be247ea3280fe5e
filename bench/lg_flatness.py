"""What a CkptfsSaver step costs early and late in a run (issue 36: last 100 steps over the
first 100): W1 through LangGraph (``bench/langgraph_w1.py``), the saver's phases timed
(``lg_profile.Timers``) and summed over steps [a, a + 100) and [b, b + 100), per step.

    python -m bench.lg_flatness [--n 1000] [--durability sync] [--appends identity]

Result: ``bench/results/langgraph_flatness-1000.md``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import langgraph_w1 as w1  # noqa: E402
from bench.lg_profile import Timers, _install  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--durability", default="sync", choices=("sync", "async"))
    ap.add_argument("--appends", default="True", choices=("True", "identity"))
    args = ap.parse_args()
    from ckptfs.format.record_bytes import LocatorRows
    from ckptfs.integrations.langgraph import appends
    from ckptfs.integrations.langgraph.saver import CkptfsSaver

    timers = Timers()
    _install(timers)
    timers.wrap(appends, "unchanged", "pack_list: appends.unchanged (prefix check)")
    timers.wrap(LocatorRows, "table", "commit: LocatorRows.table (record locators)")
    n = args.n
    marks = {50: "a0", 150: "a1", n - 150: "b0", n - 50: "b1"}
    snaps: dict[str, tuple[dict[str, float], float]] = {}
    class Stamps(list[float]):
        """The node's time stamps (``w1.build``); at the marks, a copy of the timers too."""

        def append(self, t: float) -> None:
            mark = marks.get(len(self))
            if mark is not None:
                snaps[mark] = (dict(timers.t), t)
            super().append(t)

    graph = w1.build(n, Stamps())
    where = Path(tempfile.mkdtemp(prefix="lg-flat-")) / "s"
    saver = CkptfsSaver(str(where), **({"appends": "identity"} if args.appends == "identity"
                                        else {}))
    app = graph.compile(checkpointer=saver)
    cfg: Any = {"configurable": {"thread_id": "w1"}, "recursion_limit": n + 10}
    app.invoke({"messages": [], "n": 0}, cfg, durability=args.durability)  # type: ignore[arg-type]
    saver.close()
    print(f"N = {n}, durability {args.durability}, appends={args.appends}, "
          f"load {os.getloadavg()[0]:.2f}; ms per step")
    print(f"| phase | steps 50-150 | steps {n - 150}-{n - 50} | late/early |")
    print("|---|---|---|---|")
    (ea, ta0), (eb, ta1) = snaps["a0"], snaps["a1"]
    (la, tb0), (lb, tb1) = snaps["b0"], snaps["b1"]
    rows = [("wall (step to step)", (ta1 - ta0) * 10, (tb1 - tb0) * 10)]
    for k in sorted(timers.t):
        e = (eb.get(k, 0.0) - ea.get(k, 0.0)) * 10
        late = (lb.get(k, 0.0) - la.get(k, 0.0)) * 10
        rows.append((k, e, late))
    for k, e, late in rows:
        print(f"| {k} | {e:.3f} | {late:.3f} | {late / e if e else float('nan'):.2f} |")


if __name__ == "__main__":
    main()
