"""Lifetimes: snapshot, run and store-wide expiry, changed later by an expiry object; readers
refuse expired snapshots before gc collects them, and fail closed on a damaged expiry."""

from __future__ import annotations

import datetime
import time

import pytest

import ckptfs
from ckptfs.errors import CorruptObject, ExpiredError
from ckptfs.format.names import expiry_path
from ckptfs.ops.expire import set_expiry
from ckptfs.ops.gc import gc
from ckptfs.ops.verify import verify

PAST = datetime.timedelta(seconds=-1)


def _ms() -> int:
    return int(time.time() * 1000)


def test_expired_snapshot_is_refused_by_resume_and_read(store: ckptfs.Store) -> None:
    run = store.start_run("r")
    run.checkpoint({"x": 1}, expires_at=PAST)
    with pytest.raises(ExpiredError):
        store.resume("r")
    with pytest.raises(ExpiredError):
        store.read("r")
    assert store.read("r", allow_expired=True) == {"x": 1}


def test_run_expiry_applies_to_every_snapshot_and_survives_resume(store: ckptfs.Store) -> None:
    soon = _ms() / 1000 + 3600
    run = store.start_run("r", expires_at=soon)
    run.checkpoint({"x": 1})
    resumed = store.resume("r")
    snap = resumed.checkpoint({"x": 2})
    assert snap.expires == int(soon * 1000)  # the resumed writer still applies the run expiry
    set_expiry(store.repo, "r", _ms() - 1)  # later: the whole run expires now
    with pytest.raises(ExpiredError):
        store.read("r@1")
    with pytest.raises(ExpiredError):
        store.read("r")


def test_snapshot_override_beats_run_override_and_can_extend(store: ckptfs.Store) -> None:
    run = store.start_run("r")
    run.checkpoint({"x": 1}, expires_at=PAST)
    run.checkpoint({"x": 2})
    set_expiry(store.repo, "r", _ms() - 1)
    set_expiry(store.repo, "r@1", None)  # never, for this one snapshot
    assert store.read("r@1") == {"x": 1}
    with pytest.raises(ExpiredError):
        store.read("r@2")


def test_store_default_ttl(store_url: str) -> None:
    store = ckptfs.open_store(store_url)
    store.init(settings={"default_ttl_ms": 60_000})
    run = store.start_run("r")
    a = run.checkpoint({"x": 1})
    assert a.expires == a.created + 60_000
    b = run.checkpoint({"x": 2}, expires_at=PAST)
    assert b.expires is not None and b.expires < b.created


def test_damaged_expiry_object_fails_closed(store: ckptfs.Store) -> None:
    store.start_run("r").checkpoint({"x": 1})
    store.storage.replace(expiry_path("r"), b"\xa1\x61x\x01")
    with pytest.raises(CorruptObject):
        store.read("r")


def test_gc_collects_expired_snapshots_but_a_head_only_with_its_run(store: ckptfs.Store) -> None:
    run = store.start_run("r")
    run.checkpoint({"secret": "old"}, expires_at=PAST)
    run.checkpoint({"secret": "newer"}, expires_at=PAST)
    run.checkpoint({"secret": "head"})
    other = store.start_run("gone")
    other.checkpoint({"y": 1}, expires_at=PAST)
    report = gc(store.repo, grace_ms=0, now=_ms() + 1000)  # objects are all 'old'
    assert sorted(report.expired) == ["gone@1", "r@1", "r@2"]
    assert store.repo.seqs("r") == [3] and store.repo.seqs("gone") == []
    assert report.manifests_deleted == 3
    assert verify(store.repo, read_data=True).ok and store.read("r") == {"secret": "head"}
    set_expiry(store.repo, "r", _ms() - 1)
    gc(store.repo, grace_ms=0)
    assert store.repo.seqs("r") == []
