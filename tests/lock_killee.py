"""A writer that dies (SIGKILL to itself) inside a filelock-mode create, lock held.

Usage: python lock_killee.py URL RUN WHEN, WHEN "before-rename" (the temp file is written and
fsynced, the lock held, the record not in place) or "after-rename" (the record in place, its
folder not yet fsynced, the lock still held), or "hold" (take the lock of runs/RUN, print
"held", wait for a line on stdin, release it and exit). Run with CKPTFS_LOCAL_MODE=portable;
the create under the lock is a rename (through tests/nolinks.py: no hard links) or a link(2)
(a filesystem with hard links), and the process dies just before or just after it.
Commits "first" to RUN, prints "committed 1", then dies in the commit of "second".
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Callable, Iterator
from typing import Any

import ckptfs
from ckptfs.errors import NotFound
from ckptfs.storage import local_temps
from ckptfs.storage.local_lock import folder_lock


def dying_creates(after: bool, die: Callable[[], None]
                  ) -> Callable[..., contextlib.AbstractContextManager[None]]:
    """A stand-in for ``local_temps.folder_lock``: the real lock, held; then the create's
    rename or link (only creates lock) calls ``die`` just before or just after it happened."""

    def dying(real: Callable[..., Any]) -> Callable[..., Any]:
        def call(src: Any, dst: Any, *a: Any, **k: Any) -> None:
            if after:
                real(src, dst, *a, **k)
            die()

        return call

    @contextlib.contextmanager
    def dying_lock(*a: Any, **k: Any) -> Iterator[None]:
        with folder_lock(*a, **k):
            for name in ("rename", "link"):
                if hasattr(os, name):
                    setattr(os, name, dying(getattr(os, name)))
            yield

    return dying_lock


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
    local_temps.folder_lock = dying_creates(  # type: ignore[assignment]
        when == "after-rename", lambda: os.kill(os.getpid(), signal.SIGKILL))
    run.checkpoint({"n": "second"})
    print("survived", flush=True)  # never: the create kills the process


if __name__ == "__main__":
    main()
