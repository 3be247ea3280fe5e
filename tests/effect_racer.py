"""An agent process for the racing-effect tests: resumes run "r" and performs effect "k".

Usage: python effect_racer.py URL WORLD GO MODE WID [--wait] [--timeout S] [--retries N].
WORLD is the outside world: an append-only file with one line per call that landed (the
effect function's only trace). After GO exists the process resumes the run and calls
``run.effect("charge", fn, key="k", reconcile=...)``; on ConflictError (another process
committed first) it resumes again, up to N times. MODE ``hold``: the call first touches
WORLD.in-call and waits for WORLD.release before it lands (a slow call); ``plain``: the call
lands 300 ms after it started (in flight meanwhile, as a network call is). Prints one JSON line: ``{"wid", "outcome" (result |
in-progress | conflict | superseded | error), "result", "calls", "attempts", "message"}``.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

import ckptfs
from ckptfs.errors import ConflictError, EffectInProgress, EffectSuperseded
from ckptfs.runtime.effects import NOT_DONE


def landed(world: Path) -> list[str]:
    """The calls that reached the outside world, in order (one writer id per line)."""
    return world.read_text().split() if world.exists() else []


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("world", type=Path)
    p.add_argument("go", type=Path)
    p.add_argument("mode", choices=["hold", "plain"])
    p.add_argument("wid")
    p.add_argument("--wait", action="store_true")
    p.add_argument("--timeout", type=float)
    p.add_argument("--retries", type=int, default=0)
    a = p.parse_args()
    calls = 0

    def charge() -> dict[str, Any]:
        nonlocal calls
        calls += 1
        if a.mode == "hold":
            Path(f"{a.world}.in-call").touch()
            stop = time.monotonic() + 60
            while not Path(f"{a.world}.release").exists() and time.monotonic() < stop:
                time.sleep(0.005)
        else:
            time.sleep(0.3)  # a call in flight: it lands at its end, like a network call
        fd = os.open(a.world, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{a.wid}\n".encode())
        finally:
            os.close(fd)
        return {"by": a.wid}

    def reconcile(eff: Any) -> Any:
        seen = landed(a.world)
        return {"by": seen[0]} if seen else NOT_DONE

    stop = time.monotonic() + 60
    while not a.go.exists() and time.monotonic() < stop:
        time.sleep(0.002)
    store = ckptfs.open_store(a.url)
    kw: dict[str, Any] = {"wait": True} if a.wait else {}
    if a.timeout is not None:
        kw["timeout"] = a.timeout
    out: dict[str, Any] = {"wid": a.wid}
    for attempt in range(1, a.retries + 2):
        out["attempts"] = attempt
        try:
            run = store.resume("r")
            out.update(outcome="result", result=run.effect("charge", charge, key="k",
                                                           reconcile=reconcile, **kw))
        except ConflictError as e:
            out.update(outcome="conflict", message=str(e))
            continue
        except EffectInProgress as e:
            out.update(outcome="in-progress", message=str(e), owner=e.owner,
                       deadline=e.deadline)
        except EffectSuperseded as e:
            out.update(outcome="superseded", message=str(e), result=e.result)
        except Exception as e:  # reported, and the test fails on it
            out.update(outcome="error", message=f"{type(e).__name__}: {e}")
        break
    out["calls"] = calls
    print(json.dumps(out, sort_keys=True), flush=True)


if __name__ == "__main__":
    main()
