"""A writer process for the racing-writer tests: commits to a run and reports every outcome.

Usage: python racer.py URL WRITER ATTEMPTS GO_FILE [shared]. Each attempt commits once to the
run "shared" (which every writer races for) and, unless ``shared`` is given, once to the
writer's own run "own-WRITER" (whose chunks every writer shares). Prints one JSON line per
commit attempt: {"run", "i", "tried", "ok": true, "seq", "id"} or {"run", "i", "tried", "ok":
false, "why": "conflict" | "resume-conflict" | "unknown" | "storage"}: "tried" is the seq the
attempt went for (absent when the resume failed), "unknown" when the commit's outcome could not
be established (OutcomeUnknown), "storage" for any other backend failure (the commit did not
happen).
"""

from __future__ import annotations

import json
import os
import sys
import time

import ckptfs
from ckptfs.errors import ConflictError, NotFound, OutcomeUnknown, StorageError

#: the same bytes in every writer, so that racing commits share (and race on) chunks
COMMON = bytes(range(256)) * 64 + b"".join(i.to_bytes(4, "little") for i in range(4096))


def state_for(writer: int, i: int) -> dict[str, object]:
    return {"writer": writer, "i": i, "common": ckptfs.Blob(COMMON),
            "log": [f"writer {writer} step {j}" for j in range(i + 1)]}


def main() -> None:
    url, writer, attempts, go = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    store = ckptfs.open_store(url)
    deadline = time.time() + 60
    while not os.path.exists(go) and time.time() < deadline:
        time.sleep(0.005)
    runs = ("shared",) if sys.argv[5:] == ["shared"] else ("shared", f"own-{writer}")
    for i in range(attempts):
        for run_id in runs:
            print(json.dumps({"run": run_id, "i": i, **attempt(store, run_id, writer, i)}),
                  flush=True)
    # the last line on stderr: how many creates a read-back proved landed (object stores)
    print(json.dumps({"landed_on_read_back": getattr(store.storage, "landed_on_read_back", 0)}),
          file=sys.stderr, flush=True)


def attempt(store: ckptfs.Store, run_id: str, writer: int, i: int) -> dict[str, object]:
    """Resume (or start) ``run_id`` and commit one checkpoint; the outcome."""
    try:
        try:
            run = store.resume(run_id)
        except NotFound:
            run = store.start_run(run_id)
    except ConflictError:
        return {"ok": False, "why": "resume-conflict"}
    except StorageError as e:
        return {"ok": False, "why": "storage", "error": str(e)[:500]}
    tried = run.seq + 1
    try:
        snap = run.checkpoint(state_for(writer, i))
    except ConflictError:
        return {"tried": tried, "ok": False, "why": "conflict"}
    except OutcomeUnknown as e:
        return {"tried": tried, "ok": False, "why": "unknown", "error": str(e)[:500]}
    except StorageError as e:
        return {"tried": tried, "ok": False, "why": "storage", "error": str(e)[:500]}
    return {"tried": tried, "ok": True, "seq": snap.seq, "id": snap.id}


if __name__ == "__main__":
    main()
