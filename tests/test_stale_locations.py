"""A process's memory of where a chunk was must not outlive the container (spec/v2.md 3.5, 6).

Process A writes chunk X into a record of run ``old``; ``old`` is forgotten and another
process's gc deletes that record while nothing names X (no forward: none is needed). A third
process later writes X again as a body of run ``w``. A, still holding "X is in old/1" from its
own write, then reads ``w`` and commits on top of it. Before the fix A's reader tried only that
stale place and reported X missing, although w's own record locates it; and A's commit wrote
the stale place into its new record's locators: a snapshot no fresh reader could restore.
"""

from __future__ import annotations

import random
from pathlib import Path


import ckptfs
from ckptfs.ops.gc import gc
from ckptfs.ops.retention import Policy, forget
from ckptfs.ops.verify import verify

X = random.Random(7).randbytes(6000).hex()  # one chunk, in a record's bodies


def test_a_stale_location_neither_hides_a_chunk_nor_reaches_a_new_record(tmp_path: Path
                                                                          ) -> None:
    root = str(tmp_path / "s")
    a = ckptfs.open_store(root)  # the long-lived process
    a.start_run("old").checkpoint({"x": X})
    a.start_run("keep").checkpoint({"n": 0})
    c = ckptfs.open_store(root)  # another process: forget and gc
    forget(c.repo, Policy(keep_labels=(("none", "x"),)), runs=["old"])
    report = gc(c.repo, grace_ms=0)
    assert report.containers.containers_deleted >= 1
    assert not (tmp_path / "s" / "runs" / "old" / "00000000000000000001").exists()
    b = ckptfs.open_store(root)  # a third process writes X again, in run w
    w = b.start_run("w")
    w.checkpoint({"x": X, "i": 1})
    w.checkpoint({"x": X, "i": 2})  # locates X in w's first record
    # A reads w: X is where w's record says, whatever A remembers
    assert a.read("w")["x"] == X
    assert verify(a.repo).ok
    # A commits on top of w: its record must locate X where it is
    run = a.resume("w")
    run.checkpoint({"x": X, "i": 3})
    fresh = ckptfs.open_store(root)
    assert fresh.read("w")["x"] == X and fresh.read("w")["i"] == 3
    assert verify(fresh.repo, read_data=True).ok
