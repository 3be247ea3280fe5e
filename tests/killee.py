"""A run that checkpoints as fast as it can until killed (SIGKILL test).

Usage: python killee.py URL. Resumes run "killed" (or starts it) and prints "committed SEQ"
after each commit returns. The state at each seq is a pure function of the seq.
"""

from __future__ import annotations

import sys

import ckptfs
from ckptfs.errors import NotFound


def state_for(seq: int) -> dict[str, object]:
    return {"seq": seq, "history": [f"step {i} " * 20 for i in range(seq)],
            "blob": ckptfs.Blob(bytes([seq % 256]) * (5000 + seq))}


def main() -> None:
    store = ckptfs.open_store(sys.argv[1])
    try:
        run = store.resume("killed")
    except NotFound:
        run = store.start_run("killed")
    while True:
        snap = run.checkpoint(state_for(run.seq + 1))
        print(f"committed {snap.seq}", flush=True)


if __name__ == "__main__":
    main()
