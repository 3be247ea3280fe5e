"""Issue 30 defect 6: how often a LangGraph tool's side effect runs again after a crash.

A graph prep -> tool -> after; the tool appends a line to a file (its side effect), ``after``
stands for a model call (100 ms). A child process runs the graph and is SIGKILLed; a fresh
process then resumes the thread (``invoke(None)``) and we count the lines: two mean the side
effect ran again; "empty" means the thread had no checkpoint at all (``EmptyInputError``);
"refused": killed inside ``saver.effect``, whose ledger then refuses to run it again
(``EffectInProgress``: the application decides, with ``reconcile=``).

Two ways to kill, one machinery:

- ``--random`` (the issue's experiment): the parent kills the child 0-50 ms (uniform) after
  the side effect, ``--trials`` (20) times for each case: CkptfsSaver, SqliteSaver, and the
  side effect through ``saver.effect`` (CkptfsSaver's effect ledger); on an existing store
  (a new process per trial), after a warm-up run in the same process, and on a fresh store
  per trial. Timing, so the counts vary from run to run; prints a Markdown table.
- ``--points`` (what tests/test_langgraph_crash_window.py runs): the child kills itself at a
  defined point of the saver calls (``POINTS``); prints JSON counts.

Children are forked from this process, which imports LangGraph once: a trial costs a fork,
not an interpreter start (imports are warm, the saver and the store are not).

    python bench/langgraph_crash_window.py --random [--trials 20] [--durability async]
    python bench/langgraph_crash_window.py --points writes,next-put --durability sync --dir D
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import random
import signal
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypedDict

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

#: kill points, in the order a run passes them (the tool runs on the checkpoint of
#: ``metadata["step"]`` 1: input -1, prep 0, tool 1)
POINTS = {
    "effect": "the tool's side effect is done (the node has not returned): a race with the "
              "saver's background commits under async durability",
    "writes": "the saver's put_writes of the tool's writes returned",
    "checkpoint+writes": "put_writes of the tool's writes and put of its checkpoint returned",
    "next-put": "put of the next checkpoint was called, put_writes of the tool returned",
    "first-put": "the first put (the input checkpoint) returned",
}
TOOL_STEP = 1
KINDS = ("ckptfs", "sqlite", "effect")


class State(TypedDict, total=False):
    n: int
    tool: str


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


class KillAt:
    """Wraps a saver's ``put`` and ``put_writes`` (as LangGraph calls them, from its executor
    threads) and SIGKILLs the process at ``point`` (None: never)."""

    def __init__(self, point: str | None) -> None:
        self.point = point
        self.writes_done = False
        self.checkpoint_done = False

    def effect(self) -> None:
        if self.point == "effect":
            _die()

    def _check(self) -> None:
        if self.point == "writes" and self.writes_done:
            _die()
        if self.point == "checkpoint+writes" and self.writes_done and self.checkpoint_done:
            _die()

    def wrap(self, saver: Any) -> Any:
        put, put_writes = saver.put, saver.put_writes

        @functools.wraps(put_writes)
        def pw(config: Any, writes: Any, task_id: str, task_path: str = "") -> None:
            put_writes(config, writes, task_id, task_path)
            if any(c == "tool" for c, _ in writes):
                self.writes_done = True
                self._check()

        @functools.wraps(put)
        def p(config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
            step = metadata.get("step")
            if self.point == "next-put" and step == TOOL_STEP + 1:
                while not self.writes_done:  # submitted before this put: wait for its return
                    os.sched_yield()
                _die()
            out = put(config, checkpoint, metadata, new_versions)
            if self.point == "first-put":
                _die()
            if step == TOOL_STEP:
                self.checkpoint_done = True
                self._check()
            return out

        if self.point is not None:
            saver.put, saver.put_writes = p, pw
        return saver


def make_saver(kind: str, store: Path) -> Any:
    if kind in ("ckptfs", "effect"):
        from ckptfs.integrations.langgraph import CkptfsSaver
        return CkptfsSaver(str(store))
    from langgraph.checkpoint.sqlite import SqliteSaver
    return SqliteSaver(sqlite3.connect(str(store) + ".db", check_same_thread=False))


def graph(effect_file: Path, on_effect: Callable[[], None], saver: Any = None,
          after_s: float = 0.0) -> Any:
    """prep -> tool -> after. With ``saver`` the side effect goes through ``saver.effect``."""
    from langchain_core.runnables import RunnableConfig
    from langgraph.graph import END, START, StateGraph

    def append() -> str:
        with open(effect_file, "a") as f:
            f.write("effect\n")
        on_effect()
        return "done"

    def prep(state: State) -> State:
        return {"n": 1}

    def tool(state: State, config: RunnableConfig) -> State:
        if saver is not None:
            saver.effect(config, "append", append, key="append")
        else:
            append()
        return {"tool": "done"}

    def after(state: State) -> State:
        time.sleep(after_s)
        return {"n": 2}

    g = StateGraph(State).add_sequence([prep, tool, after])  # nodes named after the functions
    g.add_edge(START, "prep")
    g.add_edge("after", END)
    return g


def _fork(fn: Callable[[], None]) -> int:
    """Run ``fn`` in a forked child; its pid."""
    pid = os.fork()
    if pid == 0:  # the child
        code = 0
        try:
            fn()
        except BaseException:  # noqa: BLE001 - reported through the exit code
            import traceback
            traceback.print_exc()
            code = 1
        os._exit(code)
    return pid


def _wait(pid: int) -> int:
    return os.waitpid(pid, 0)[1]


def _outcome(kind: str, store: Path, effect_file: Path, config: Any, durability: str,
             work: Path) -> str:
    """Resume the thread in a fresh (forked) process: "rerun", "once" or "empty"."""
    outcome = work / f"{effect_file.name}.outcome"

    def resume() -> None:
        from langgraph.errors import EmptyInputError

        from ckptfs.errors import EffectInDoubt, EffectInProgress
        saver = make_saver(kind, store)
        g = graph(effect_file, lambda: None, saver if kind == "effect" else None)
        try:
            g.compile(checkpointer=saver).invoke(None, config, durability=durability)
            outcome.write_text("ran")
        except EmptyInputError:
            outcome.write_text("empty")
        except (EffectInProgress, EffectInDoubt):  # killed inside the effect: the ledger
            outcome.write_text("refused")  # refuses to repeat it (in doubt once its owner is
            # known dead on this host, until then in progress under the lease)
        if kind != "sqlite":
            saver.close()

    if _wait(_fork(resume)) != 0:
        raise RuntimeError(f"{kind}: the resume failed")
    if outcome.read_text() in ("empty", "refused"):
        return outcome.read_text()
    lines = effect_file.read_text().count("effect") if effect_file.exists() else 0
    return "rerun" if lines > 1 else "once"


def point_trial(kind: str, point: str, durability: str, store: Path, work: Path,
                thread: str) -> str:
    """One run that kills itself at ``point``, and its resume."""
    effect_file = work / f"{kind}-{thread}.effect"
    config = {"configurable": {"thread_id": thread}}

    def run() -> None:
        killer = KillAt(point)
        saver = killer.wrap(make_saver(kind, store))
        graph(effect_file, killer.effect, saver if kind == "effect" else None).compile(
            checkpointer=saver).invoke({"n": 0}, config, durability=durability)

    status = _wait(_fork(run))
    if not (os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL):
        raise RuntimeError(f"{kind} {point}: the run was not killed at its point "
                           f"(wait status {status})")
    return _outcome(kind, store, effect_file, config, durability, work)


def _run_once(kind: str, store: Path, effect_file: Path, thread: str, durability: str) -> None:
    """Run the graph to its end on ``thread`` (in a forked child: this process must stay
    without threads, which LangGraph and the savers start, for its forks to be safe)."""
    saver = make_saver(kind, store)
    graph(effect_file, lambda: None, saver if kind == "effect" else None).compile(
        checkpointer=saver).invoke({"n": 0}, {"configurable": {"thread_id": thread}},
                                   durability=durability)


def random_trial(kind: str, durability: str, store: Path, work: Path, thread: str,
                 warm: bool, rng: random.Random) -> str:
    """One run killed 0-50 ms after the side effect (by this process), and its resume."""
    effect_file = work / f"{kind}-{thread}.effect"
    config = {"configurable": {"thread_id": thread}}
    r, w = os.pipe()

    def run() -> None:
        os.close(r)
        saver = make_saver(kind, store)
        if warm:  # another thread of the same store, first, in this process
            graph(work / f"{thread}.warm", lambda: None,
                  saver if kind == "effect" else None).compile(checkpointer=saver).invoke(
                {"n": 0}, {"configurable": {"thread_id": f"{thread}-warm"}},
                durability=durability)
        graph(effect_file, lambda: os.write(w, b"x"), saver if kind == "effect" else None,
              after_s=0.1).compile(checkpointer=saver).invoke({"n": 0}, config,
                                                             durability=durability)
        time.sleep(10)  # not reached in time: the parent kills it

    pid = _fork(run)
    os.close(w)
    got = os.read(r, 1)
    os.close(r)
    if got:
        time.sleep(rng.uniform(0, 0.05))
    os.kill(pid, signal.SIGKILL)
    _wait(pid)
    return _outcome(kind, store, effect_file, config, durability, work)


def drive_points(points: list[str], durability: str, trials: int, work: Path, fresh: bool,
                 kinds: tuple[str, ...] = ("ckptfs", "sqlite")
                 ) -> dict[str, dict[str, dict[str, int]]]:
    """kind -> point -> outcome -> count."""
    counts: dict[str, dict[str, dict[str, int]]] = {}
    for kind in kinds:
        for point in points:
            got = counts.setdefault(kind, {}).setdefault(point, {})
            for t in range(trials):
                thread = f"{point}-{t}"
                store = work / (f"{kind}-fresh-{thread}" if fresh else f"{kind}-store")
                out = point_trial(kind, point, durability, store, work, thread)
                got[out] = got.get(out, 0) + 1
    return counts


def drive_random(durability: str, trials: int, work: Path, seed: int) -> str:
    """The issue's experiment: a Markdown table of counts."""
    rng = random.Random(seed)
    rows = []
    for case in ("existing store", "warm process", "fresh store"):
        for kind in KINDS:
            got: dict[str, int] = {}
            for t in range(trials):
                thread = f"{case.split()[0]}-{t}"
                store = work / (f"{kind}-fresh-{t}" if case == "fresh store"
                                else f"{kind}-store")
                if case != "fresh store" and t == 0:  # the store exists before the trials
                    _wait(_fork(functools.partial(
                        _run_once, kind, store, work / f"{kind}-{case[:5]}.init",
                        f"{case[:5]}-init", durability)))
                out = random_trial(kind, durability, store, work, thread,
                                   case == "warm process", rng)
                got[out] = got.get(out, 0) + 1
            rows.append(f"| {case} | {kind} | {got.get('rerun', 0)} | {got.get('empty', 0)} | "
                        f"{got.get('refused', 0)} | {got.get('once', 0)} |")
    return "\n".join([
        f"Killed 0-50 ms (uniform) after the tool's side effect, {trials} trials per row, "
        f"durability {durability!r}, seed {seed}:", "",
        "| case | saver | re-ran | no checkpoint | refused (effect in progress or in doubt) | once |",
        "|---|---|---|---|---|---|", *rows])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default=None, help="scratch directory (default: a temp dir)")
    ap.add_argument("--durability", default="async", choices=("sync", "async"))
    ap.add_argument("--trials", type=int, default=None)
    ap.add_argument("--points", default=None, help="comma-separated kill points: " +
                    ", ".join(POINTS))
    ap.add_argument("--fresh", action="store_true", help="--points: a fresh store per trial")
    ap.add_argument("--random", action="store_true", help="the issue's random-timing runs")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    # imported once here: every forked trial starts warm in imports (not in the store)
    import langchain_core.runnables  # noqa: F401
    import langgraph.checkpoint.sqlite  # noqa: F401
    import langgraph.graph  # noqa: F401

    import ckptfs.integrations.langgraph  # noqa: F401
    work = Path(args.dir or tempfile.mkdtemp(prefix="lg-crash-"))
    work.mkdir(parents=True, exist_ok=True)
    if args.random:
        print(drive_random(args.durability, args.trials or 20, work, args.seed))
        return
    points = (args.points or "writes,checkpoint+writes,next-put").split(",")
    unknown = [p for p in points if p not in POINTS]
    if unknown:
        ap.error(f"unknown kill points {unknown}: choose from {', '.join(POINTS)}")
    print(json.dumps(drive_points(points, args.durability, args.trials or 2, work,
                                  args.fresh)))


if __name__ == "__main__":
    main()
