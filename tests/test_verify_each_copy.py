"""verify --read-data checks every copy a snapshot's reader would read, not one copy per chunk.

Before: verify checked each chunk once, wherever this process had last seen it. A fork copied
into a backup carries the bodies it shares with its parent run in its own record, so the
backup holds two copies of those chunks; flipping one byte of the fork's copy left verify at
"0 problem(s)" while restoring the fork failed with ``corrupt``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import ckptfs
from ckptfs.ops.copy import copy_runs
from ckptfs.ops.verify import verify


def _flip_last_byte(path: Path) -> None:
    path.chmod(0o644)
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))


def _fork_in_backup(tmp_path: Path) -> tuple[str, Path]:
    """A backup where run 'main' and its fork each hold a copy of the blob's chunk."""
    src, dst = tmp_path / "store", tmp_path / "backup"
    store = ckptfs.open_store(str(src))
    run = store.start_run("main")
    for step in range(3):
        run.checkpoint({"step": step, "shot": ckptfs.Blob(bytes(range(256)) * 64 + bytes([step]))})
    fork = store.fork("main@2", "main-debug")
    fork.checkpoint(fork.state)
    copy_runs(store.repo, ckptfs.open_store(str(dst)).repo)
    fork_record = max((dst / "runs" / "main-debug").iterdir(), key=lambda p: p.stat().st_size)
    return str(dst), fork_record


def test_a_damaged_copy_in_a_fork_record_is_found(tmp_path: Path) -> None:
    backup, fork_record = _fork_in_backup(tmp_path)
    assert verify(ckptfs.open_store(backup).repo, read_data=True).ok
    _flip_last_byte(fork_record)
    # what a reader of the fork alone gets, in a fresh process
    p = subprocess.run([sys.executable, "-m", "ckptfs", "cat", backup, "main-debug", "shot"],
                       capture_output=True, timeout=120)
    assert p.returncode == 3 and b"corrupt" in p.stderr, p.stderr
    report = verify(ckptfs.open_store(backup).repo, read_data=True)
    assert [(x.category, x.run) for x in report.problems] == [("corrupt", "main-debug")]
    # the parent run's own copy is sound, and is still read and passes
    assert ckptfs.open_store(backup).read("main@2")["shot"].read()[-1] == 1
