"""Per-step cost of appending one message to a large state (issue 14, "per-step CPU").

    PYTHONPATH=. python -m bench.append_step [--n 200000] [--steps 20] [--profile]

Builds a run whose ``messages`` entry holds N messages (100-300 bytes each) on a local v2
store, then times durable steps that append one message, three ways:

* ``checkpoint(state)``: the full path (the whole list is encoded to learn what changed);
* ``checkpoint(state, changed=["messages"])``: the caller declares what changed;
* ``append("messages", msg)``.

Prints the median / mean ms per step of each, and with ``--profile`` the top cProfile entries
of each mode's steps.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import random
import statistics
import tempfile
import time
from typing import Any, Callable

import ckptfs


def message(rng: random.Random, i: int) -> dict[str, Any]:
    n = rng.randint(100, 300)
    return {"role": "user" if i % 2 else "assistant",
            "content": "".join(rng.choice("abcdefghij klmnop") for _ in range(n))}


def run_mode(mode: str, n: int, steps: int, profile: bool, delta: bool = False
             ) -> tuple[list[float], str]:
    rng = random.Random(7)
    with tempfile.TemporaryDirectory() as d:
        store = ckptfs.open_store(os.path.join(d, "store"))
        store.init(delta_headers=delta)
        run = store.start_run("bench")
        msgs = [message(rng, i) for i in range(n)]
        state: dict[str, Any] = {"messages": msgs, "plan": {"step": 0}}
        run.checkpoint(state)
        step: Callable[[], None]
        if mode == "checkpoint":
            def step() -> None:
                msgs.append(message(rng, len(msgs)))
                run.checkpoint(state)
        elif mode == "changed":
            def step() -> None:
                msgs.append(message(rng, len(msgs)))
                run.checkpoint(state, changed=["messages"])
        else:
            def step() -> None:
                run.append("messages", message(rng, n))
        step()  # warm: the first step after the initial commit sets the caches up
        prof = cProfile.Profile() if profile else None
        times = []
        for _ in range(steps):
            t = time.perf_counter()
            if prof:
                prof.enable()
            step()
            if prof:
                prof.disable()
            times.append((time.perf_counter() - t) * 1000)
        text = ""
        if prof:
            s = io.StringIO()
            pstats.Stats(prof, stream=s).sort_stats("cumulative").print_stats(18)
            text = s.getvalue()
        return times, text


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--modes", default="checkpoint,changed,append")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--delta-headers", action="store_true",
                    help="a store that requires delta-headers (spec/v2.md 3.1.2)")
    a = ap.parse_args()
    print(f"N = {a.n} messages, {a.steps} steps per mode, "
          f"format v{os.environ.get('CKPTFS_FORMAT_VERSION', '2')}"
          f"{', delta-headers' if a.delta_headers else ''}\n")
    print("| mode | median ms/step | mean ms/step | min | max |")
    print("|---|---|---|---|---|")
    profiles = []
    for mode in a.modes.split(","):
        try:
            t, text = run_mode(mode, a.n, a.steps, a.profile, a.delta_headers)
        except TypeError as e:  # the API is not there (the "before" tree)
            print(f"| {mode} | n/a ({e}) | | | |")
            continue
        print(f"| {mode} | {statistics.median(t):.2f} | {statistics.mean(t):.2f} "
              f"| {min(t):.2f} | {max(t):.2f} |", flush=True)
        profiles.append((mode, text))
    for mode, text in profiles:
        if text:
            print(f"\n### profile: {mode}\n```\n{text}```")


if __name__ == "__main__":
    main()
