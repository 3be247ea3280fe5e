"""A writer process for the concurrent GC test: checkpoints a run, reusing recurring content."""

from __future__ import annotations

import sys

import ckptfs

POOL = [f"recurring block {k} " * 300 for k in range(4)]


def main(root: str, run_id: str, steps: int) -> None:
    store = ckptfs.open_store(root, durable=False)
    run = store.start_run(run_id)
    msgs: list[str] = []
    for i in range(steps):
        msgs.append(f"{run_id} step {i} " * 20)
        run.checkpoint({"messages": list(msgs), "pool": POOL[i % len(POOL)], "i": i})
    print(len(msgs))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
