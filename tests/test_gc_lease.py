"""The maintenance lease when its holder is gone (issue 13, defect 10): a killed gc, forget or
erase must not block reruns for the TTL, a lease that claims to last forever blocks nobody, and
``--break-lease`` takes over a lease with a warning."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import ckptfs
from ckptfs.errors import Busy
from ckptfs.format.lifecycle import MAX_LEASE_TTL_MS, Lease
from ckptfs.format.models import MAX_U64
from ckptfs.format.names import seq_name
from ckptfs.ops.gc import gc
from ckptfs.ops.lease import DEFAULT_TTL_MS, LEASE_DIR, MaintenanceLease
from ckptfs.ops.retention import Policy, forget
from ckptfs.store.sweeps import holder_gone, host_id

REPO = Path(__file__).resolve().parent.parent
HOLD = """
import sys, time
import ckptfs
from ckptfs.ops.lease import MaintenanceLease
MaintenanceLease(ckptfs.open_store(sys.argv[1]).storage).acquire()
print("held", flush=True)
time.sleep(120)
"""


def _now() -> int:
    return int(time.time() * 1000)


def _plant(store: ckptfs.Store, lease: Lease, gen: int = 1) -> None:
    store.storage.create(f"{LEASE_DIR}/{seq_name(gen)}", lease.to_bytes())


def _store(tmp_path: Path) -> ckptfs.Store:
    store = ckptfs.open_store(str(tmp_path / "s"))
    store.start_run("r").checkpoint({"x": 1})
    return store


def test_a_lease_that_claims_to_last_forever_blocks_nobody(tmp_path: Path) -> None:
    store = _store(tmp_path)
    _plant(store, Lease("someone far away", _now(), MAX_U64))
    assert gc(store.repo).problems == []
    forget(store.repo, Policy(keep_last=1))


def test_a_lease_within_the_bound_from_another_host_still_blocks(tmp_path: Path) -> None:
    store = _store(tmp_path)
    _plant(store, Lease("other", _now(), _now() + MAX_LEASE_TTL_MS - 1000, host="elsewhere",
                        pid=1))
    with pytest.raises(Busy, match="--break-lease"):
        gc(store.repo)


def test_a_killed_holder_on_this_host_blocks_nobody(tmp_path: Path) -> None:
    store = _store(tmp_path)
    p = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path / "s")], cwd=REPO,
                         stdout=subprocess.PIPE, text=True,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert p.stdout is not None and p.stdout.readline() == "held\n"
    with pytest.raises(Busy):  # alive: it holds the lease
        gc(store.repo)
    p.send_signal(signal.SIGKILL)
    p.wait()
    assert gc(store.repo).problems == []  # at once, not after the TTL


def test_holder_gone_needs_proof() -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    now = _now()
    assert holder_gone(Lease("x", now, now + 1000, host=host_id(), pid=dead.pid))
    assert not holder_gone(Lease("x", now, now + 1000, host=host_id(), pid=os.getpid()))
    assert not holder_gone(Lease("x", now, now + 1000, host="another-host", pid=dead.pid))
    assert not holder_gone(Lease("x", now, now + 1000))  # no host, no pid: no proof


def test_break_lease_takes_over_and_the_holder_stops(tmp_path: Path) -> None:
    store = _store(tmp_path)
    held = MaintenanceLease(store.storage, ttl_ms=60_000).acquire()
    with pytest.raises(Busy):
        gc(store.repo)
    report = gc(store.repo, break_lease=True)
    assert report.broken_lease is not None and held.owner in report.broken_lease
    with pytest.raises(Busy, match="taken over"):
        held.check()


def test_cli_break_lease_warns(tmp_path: Path) -> None:
    store = _store(tmp_path)
    MaintenanceLease(store.storage, ttl_ms=60_000).acquire()  # this process: alive, holds it
    url = str(tmp_path / "s")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for cmd in (["gc", url], ["forget", url, "--keep-last", "1"],
                ["erase", url, "r", "--reason", "test"]):
        busy = subprocess.run([sys.executable, "-m", "ckptfs", *cmd], cwd=REPO, env=env,
                              capture_output=True, text=True)
        assert busy.returncode != 0 and "--break-lease" in busy.stderr, busy.stderr
        MaintenanceLease(store.storage, ttl_ms=60_000, break_lease=True).acquire()
        done = subprocess.run([sys.executable, "-m", "ckptfs", *cmd, "--break-lease"],
                              cwd=REPO, env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        assert "warning: broke the maintenance lease" in done.stderr
        MaintenanceLease(store.storage, ttl_ms=60_000, break_lease=True).acquire()


def test_default_ttl_is_short_and_check_renews(tmp_path: Path) -> None:
    store = _store(tmp_path)
    assert DEFAULT_TTL_MS <= 2 * 60 * 1000
    lease = MaintenanceLease(store.storage).acquire()
    gen = lease.generation or 0
    path = f"{LEASE_DIR}/{seq_name(gen)}"
    first = Lease.from_bytes(store.storage.read(path), what="lease")
    time.sleep(0.01)
    lease.check()
    again = Lease.from_bytes(store.storage.read(path), what="lease")
    assert again.expires > first.expires and again.host == host_id() and again.pid == os.getpid()
    lease.release()
    released = Lease.from_bytes(store.storage.read(path), what="lease")
    assert released.released and not released.blocks(_now())
    nxt = MaintenanceLease(store.storage).acquire()  # generations only grow
    assert nxt.generation == gen + 1 and not store.storage.exists(path)
    nxt.release()


def test_a_holder_that_stalled_past_its_expiry_stops_before_deleting(tmp_path: Path) -> None:
    store = _store(tmp_path)
    lease = MaintenanceLease(store.storage, ttl_ms=50).acquire()
    time.sleep(0.1)
    with pytest.raises(Busy, match="expired"):
        lease.keep()
