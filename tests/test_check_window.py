"""The check window (spec/v2.md section 5.4): a writer reuses its last quiet look at the
maintenance lease, and the retired ranges it listed after that look, for commits made less than
the window after the look; every maintenance operation waits the window after taking its lease
before it decides or changes anything. Real local disk; the window is a store setting."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import ckptfs
from ckptfs.errors import Busy, ConflictError, CorruptObject, ErasedError, NotFound
from ckptfs.format.lifecycle import Lease
from ckptfs.ops.erase import erase
from ckptfs.ops.gc import gc
from ckptfs.ops.lease import MaintenanceLease
from ckptfs.ops.retention import forget_snapshots
from ckptfs.runtime.store import Store
from ckptfs.store.sweeps import Seen, check_window_ms


WINDOW = 1500  # ms: long beside a local commit, short for the maintenance waits below


def _store(tmp_path: Path, window: int = WINDOW) -> Store:
    store = ckptfs.open_store(str(tmp_path / "s"), durable=False)
    store.init(settings={"check_window_ms": window})
    return store


def test_quiet_commits_reuse_the_look_and_the_retired_listing(tmp_path: Path) -> None:
    store = _store(tmp_path, 60_000)
    run = store.start_run("r")
    guard = store.repo.objects.sweeps
    for i in range(20):
        run.checkpoint({"i": i})
    assert guard.window_ms == 60_000
    # one look before the first write, none after: every commit reused it
    assert guard.looks == 0 and guard.reused == 20
    # the retired ranges were listed once (the first commit), then reused
    assert store.repo.retired_reused == 19


def test_window_zero_checks_every_commit(tmp_path: Path) -> None:
    store = _store(tmp_path, 0)
    run = store.start_run("r")
    for i in range(5):
        run.checkpoint({"i": i})
    assert store.repo.objects.sweeps.looks == 5 and store.repo.objects.sweeps.reused == 0
    assert store.repo.retired_reused == 0


def test_window_setting_defaults_and_bounds() -> None:
    assert check_window_ms(2, {}) == 500 and check_window_ms(1, {}) == 0
    assert check_window_ms(1, {"check_window_ms": 250}) == 250
    for bad in (-1, 60_001, "5", 1.5, True):
        with pytest.raises(CorruptObject):
            check_window_ms(2, {"check_window_ms": bad})


def test_a_damaged_lease_is_not_quiet() -> None:
    assert Seen(0, None, True).quiet
    assert not Seen(3, None, True).quiet  # final for the handshake, but its holder may renew it
    released = Lease("o", 1, 1, released=True)
    assert Seen(3, released, True).quiet and not Seen(3, released, False).quiet


def test_maintenance_waits_the_window_after_taking_the_lease(tmp_path: Path) -> None:
    store = _store(tmp_path, 300)
    store.start_run("r").checkpoint({"i": 0})
    t = time.monotonic()
    with MaintenanceLease(store.storage, deletes=False):
        waited = time.monotonic() - t
    assert waited >= 0.3


def test_an_expired_lease_cannot_be_renewed_by_check(tmp_path: Path) -> None:
    """Regression: check() renewed a lease that had expired by its holder's clock, so a forget
    that stalled past its TTL came back and went on retiring snapshots while writers took its
    lease for final (and, within the window, reuse their listings)."""
    store = _store(tmp_path, 0)
    store.init()
    lease = MaintenanceLease(store.storage, ttl_ms=50, deletes=False).acquire()
    time.sleep(0.1)
    with pytest.raises(Busy):
        lease.check()
    lease.release()


def _erase_beside_a_writer(tmp_path: Path) -> tuple[Store, ckptfs.Run, BaseException | None]:
    """A writer commits 3 snapshots (its looks are quiet), a whole-run erase runs, and the
    writer commits again at once: its look is younger than the window when the erase starts."""
    store = _store(tmp_path)
    run = store.start_run("r")
    for i in range(3):
        run.checkpoint({"i": i})
    other = ckptfs.open_store(str(tmp_path / "s"), durable=False)
    erase(other.repo, "r", reason="test")
    try:
        run.checkpoint({"i": 3})
    except ConflictError as e:
        return store, run, e
    return store, run, None


def test_erase_right_after_a_quiet_look_never_loses_a_commit(tmp_path: Path) -> None:
    """The erase waits the window after taking its lease, so when it returns the writer's
    window has passed: the writer's next commit lists again, sees the fence and is refused.
    A commit that returned normally must be readable."""
    store, run, err = _erase_beside_a_writer(tmp_path)
    fresh = ckptfs.open_store(str(tmp_path / "s"), durable=False)
    if err is None:  # only if the commit landed before the erase looked (not here: it ran first)
        assert fresh.read("r")["i"] == 3
    else:
        with pytest.raises((ErasedError, NotFound)):
            fresh.read("r")
        assert fresh.repo.record_seqs("r") == []  # withdrawn: nothing of it left behind
    assert err is not None


def test_without_the_wait_the_window_would_lose_a_commit(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The hazard the wait closes (so that the test above can fail): a maintenance operation
    that acts at once after taking its lease erases the run while the writer's look is still
    young; the writer reuses it, its commit returns normally, and the snapshot is not there."""
    monkeypatch.setattr(MaintenanceLease, "_settle", lambda self, window: None)
    store, run, err = _erase_beside_a_writer(tmp_path)
    assert err is None  # the commit "succeeded" ...
    fresh = ckptfs.open_store(str(tmp_path / "s"), durable=False)
    with pytest.raises((ErasedError, NotFound)):
        fresh.read("r")  # ... into a fenced run: lost, and its record left behind
    assert fresh.repo.record_seqs("r") == [4]


def test_forget_within_the_window_sees_the_commit(tmp_path: Path) -> None:
    """A forget taken right after the writer's quiet look decides only after the window: the
    writer's next commit, made within its window, is either seen by the forget or checks."""
    store = _store(tmp_path)
    run = store.start_run("r")
    for i in range(4):
        run.checkpoint({"i": i})
    other = ckptfs.open_store(str(tmp_path / "s"), durable=False)
    forget_snapshots(other.repo, {"r": [1, 2]})
    run.checkpoint({"i": 4})  # after the window: a real look (new generation), a new listing
    assert store.repo.objects.sweeps.looks >= 1
    fresh = ckptfs.open_store(str(tmp_path / "s"), durable=False)
    assert fresh.repo.seqs("r") == [3, 4, 5] and fresh.read("r")["i"] == 4
    gc(other.repo, grace_ms=0)
    run.checkpoint({"i": 5})
    assert ckptfs.open_store(str(tmp_path / "s"), durable=False).read("r")["i"] == 5


def test_a_bad_window_setting_stops_writers_and_maintenance_not_readers(tmp_path: Path) -> None:
    """Readers ignore settings (format.md 2); writers and collectors must agree on the window,
    so a malformed one stops them (CorruptObject) before they change anything."""
    store = _store(tmp_path, 0)
    store.start_run("r").checkpoint({"i": 0})
    import attrs

    from ckptfs.format.models import StoreConfig
    cfg_path = tmp_path / "s" / "ckptfs.cbor"
    cfg = StoreConfig.from_bytes(cfg_path.read_bytes())
    cfg_path.write_bytes(attrs.evolve(cfg, settings={**cfg.settings, "check_window_ms": -5})
                         .to_bytes())
    fresh = ckptfs.open_store(str(tmp_path / "s"), durable=False)
    assert fresh.read("r") == {"i": 0}
    with pytest.raises(CorruptObject):
        fresh.resume("r").checkpoint({"i": 1})
    with pytest.raises(CorruptObject):
        gc(fresh.repo)
    assert fresh.storage.list("leases/maintenance") == []  # refused before taking the lease
    assert ckptfs.open_store(str(tmp_path / "s"), durable=False).repo.seqs("r") == [1]
