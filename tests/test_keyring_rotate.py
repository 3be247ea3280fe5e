"""Rotating a keyring's master key in batches (issue 33): every scope rewrapped, crash-safe at
every step (each scope opens under the old or the new master key, and a rerun completes),
and on S3 one GET per scope and one PUT per key shard plus a few listings and batched deletes
the first time, O(shards) the next (spec/encryption.md 4.3)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import ckptfs
from ckptfs.storage import keyring_rotate
from ckptfs.storage.keyring import Keyring
from ckptfs.storage.open import open_storage

SCOPES = 50


class Crash(Exception):
    pass


def _store(url: str, ring: str, **opts: Any) -> list[bytes]:
    """A store with two runs (one in a subject's scope) and ``SCOPES`` more scopes; every
    scope id of its keyring."""
    st = ckptfs.open_store(url, keyring=ring, **opts)
    st.start_run("a", subject="user-1").checkpoint({"x": 1})
    st.start_run("b").checkpoint({"y": 2})
    kr: Keyring = st.storage.keyring  # type: ignore[attr-defined]
    for i in range(SCOPES):
        kr.new_scope("subject", f"s-{i}")
    return [bytes.fromhex(n) for n in kr.storage.listing(kr._scopes).files]


def _all_open(ring: Keyring, sids: list[bytes]) -> None:
    for sid in sids:
        assert len(ring.scope(sid).key) == 32


def test_rotation_in_batches_rewraps_every_scope(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    url, ring = str(tmp_path / "s"), str(tmp_path / "ring")
    sids = _store(url, ring)
    monkeypatch.setattr(keyring_rotate, "BATCH", 7)  # 8 batches, 8 workers
    seen: list[tuple[int, int]] = []
    new = Keyring(open_storage(ring)).rotate(progress=lambda d, t: seen.append((d, t)))
    assert new.gen == 1 and seen[-1] == (len(sids), len(sids)) and len(seen) >= 8
    fresh = Keyring(open_storage(ring))
    _all_open(fresh, sids)
    assert not list((Path(ring) / "scopes").glob("*"))
    s = ckptfs.open_store(url, keyring=ring)
    assert s.read("a") == {"x": 1} and s.read("b") == {"y": 2}


@pytest.mark.parametrize("point", ["mid-read", "shard-write", "at-switch", "carry",
                                   "after-switch", "old-master-delete"])
def test_rotation_crash_points(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                               point: str) -> None:
    """A crash anywhere leaves every scope openable (by the old master key before the switch,
    the new one after it), the store readable, and a rerun completes the rotation. Twice: the
    first rotation reads per-scope objects, the second the first one's key shards."""
    url, ring = str(tmp_path / "s"), str(tmp_path / "ring")
    sids = _store(url, ring)
    monkeypatch.setattr(keyring_rotate, "BATCH", 5)
    monkeypatch.setattr(keyring_rotate, "WORKERS", 2)
    for rotation in (1, 2):
        kr = Keyring(open_storage(ring))
        st: Any = kr.storage
        calls = {"write_many": 0, "read_many": 0}
        real_wm, real_rm, real_replace, real_dm, real_del = (
            st.write_many, st.read_many, st.replace, st.delete_many, st.delete)

        def read_many(paths: Any) -> Any:
            calls["read_many"] += 1
            if point == "mid-read" and calls["read_many"] == 3 - rotation:
                raise Crash(point)
            return real_rm(paths)

        def write_many(items: Any) -> None:
            calls["write_many"] += 1
            if (point == "shard-write" and calls["write_many"] == 1) or (
                    point == "carry" and calls["write_many"] == 2):
                raise Crash(point)
            real_wm(items)

        def replace(path: str, data: bytes) -> None:
            if point == "at-switch" and path == "keyring.cbor":
                raise Crash(point)
            real_replace(path, data)

        def delete_many(paths: Any) -> None:
            if point == "after-switch":
                raise Crash(point)
            real_dm(paths)

        def delete(path: str) -> None:
            if point == "old-master-delete":
                raise Crash(point)
            real_del(path)

        monkeypatch.setattr(st, "read_many", read_many)
        monkeypatch.setattr(st, "write_many", write_many)
        monkeypatch.setattr(st, "replace", replace)
        monkeypatch.setattr(st, "delete_many", delete_many)
        monkeypatch.setattr(st, "delete", delete)
        gen = kr.gen
        with pytest.raises(Crash):
            kr.rotate()
        for name in ("read_many", "write_many", "replace", "delete_many", "delete"):
            monkeypatch.delattr(st, name)
        after = Keyring(open_storage(ring))
        switched = point in ("carry", "after-switch", "old-master-delete")
        assert after.gen == gen + (1 if switched else 0)
        _all_open(after, sids)
        s = ckptfs.open_store(url, keyring=ring)
        assert s.read("a") == {"x": 1} and s.read("b") == {"y": 2}
        again = after.rotate()  # a rerun completes (the next generation after a switch)
        assert again.gen == after.gen + 1
        _all_open(Keyring(open_storage(ring)), sids)
        assert ckptfs.open_store(url, keyring=ring).read("a") == {"x": 1}


def test_rotation_requests_on_s3(s3_options: dict[str, Any],
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.conftest import new_s3_url

    url, ring = new_s3_url(), new_s3_url()
    sids = _store(url, ring, **s3_options)
    monkeypatch.setattr(keyring_rotate, "BATCH", 10)
    kr = Keyring(open_storage(ring, **s3_options))
    ops: dict[str, int] = {}

    def hook(**kw: Any) -> None:
        op = kw.get("event_name", "?").rsplit(".", 1)[-1]
        ops[op] = ops.get(op, 0) + 1

    events = kr.storage.fs.s3.meta.events  # type: ignore[attr-defined]
    events.register("before-send.s3", hook)
    try:
        new = kr.rotate()
        first = dict(ops)
        ops.clear()
        new.rotate()
    finally:
        events.unregister("before-send.s3", hook)
    n = len(sids)
    # the first rotation: one GET per scope (its own object), one PUT per key shard (16 for
    # this many scopes) and batched deletes; the keyring and master key files besides
    assert first.get("GetObject", 0) <= n + 5 and first.get("PutObject", 0) <= 16 + 5, first
    assert first.get("DeleteObjects", 0) <= 6 and sum(first.values()) <= n + 50, first
    # the next: the shards, not the scopes
    assert ops.get("GetObject", 0) <= 16 + 5 and ops.get("PutObject", 0) <= 16 + 5, ops
    assert sum(ops.values()) <= 60, ops
    _all_open(Keyring(open_storage(ring, **s3_options)), sids)
    assert new.gen == 1
