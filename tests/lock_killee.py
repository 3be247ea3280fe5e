"""A writer that dies (SIGKILL to itself) inside a filelock-mode create, lock held.

Usage: python lock_killee.py URL RUN WHEN, WHEN "before-rename" (the temp file is written and
fsynced, the lock held, the record not in place) or "after-rename" (the record in place, its
folder not yet fsynced, the lock still held), or "hold" (take the lock of runs/RUN, print
"held", wait for a line on stdin, release it and exit). Run with CKPTFS_LOCAL_MODE=portable.
Commits "first" to RUN, prints "committed 1", then dies in the commit of "second".
"""

from __future__ import annotations

import os
import signal
import sys

import ckptfs
from ckptfs.errors import NotFound
from ckptfs.storage.local_lock import folder_lock


def main() -> None:
    url, run_id, when = sys.argv[1], sys.argv[2], sys.argv[3]
    store = ckptfs.open_store(url)
    if when == "hold":
        store.init()
        st = store.storage
        lock_dir = os.path.join(st.root, "tmp", "locks")  # type: ignore[attr-defined]
        os.makedirs(lock_dir, exist_ok=True)
        with folder_lock(lock_dir, f"runs/{run_id}"):
            print("held", flush=True)
            sys.stdin.readline()
        return
    try:
        run = store.resume(run_id)
    except NotFound:
        run = store.start_run(run_id)
    run.checkpoint({"n": "first"})
    print("committed 1", flush=True)
    real = os.rename

    def dying_rename(src: str, dst: str) -> None:
        if when == "after-rename":
            real(src, dst)
        os.kill(os.getpid(), signal.SIGKILL)

    os.rename = dying_rename  # type: ignore[assignment]
    run.checkpoint({"n": "second"})
    print("survived", flush=True)  # never: the rename kills the process


if __name__ == "__main__":
    main()
