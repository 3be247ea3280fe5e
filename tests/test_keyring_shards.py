"""Key shards (issue 33, spec/encryption.md 4.3): a rotation writes the rewrapped scope keys
into a few shards; erasing a scope a shard holds leaves no copy of its wrapped key in any object
of the keyring (a byte scan), at every crash point; a scope created during a rotation is never
lost; a keyring of the old layout (per-scope objects only) reads and rotates; a malformed shard
is refused with a KeyringError and changes nothing."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path
from typing import Any

import pytest

import ckptfs
from ckptfs.errors import KeyringError
from ckptfs.format import cbor
from ckptfs.ops.erase_scope import erase_subject, subject_scope_id, verify_erased
from ckptfs.storage import keyring_rotate, keyring_shards
from ckptfs.storage.keyring import Keyring, ScopeErased
from ckptfs.storage.open import open_storage

SUBJECTS = 60


class Crash(Exception):
    pass


def _store(tmp_path: Path) -> tuple[str, str]:
    url, ring = str(tmp_path / "s"), str(tmp_path / "ring")
    st = ckptfs.open_store(url, keyring=ring)
    st.start_run("a", subject="user-1").checkpoint({"x": 1})
    st.start_run("b").checkpoint({"y": 2})
    kr: Keyring = st.storage.keyring  # type: ignore[attr-defined]
    for i in range(SUBJECTS):
        kr.new_scope("subject", f"s-{i}")
    return url, ring


def _files(ring: str) -> dict[str, bytes]:
    return {str(p.relative_to(ring)): p.read_bytes() for p in Path(ring).rglob("*")
            if p.is_file()}


def _all_sids(ring: str) -> list[bytes]:
    kr = Keyring(open_storage(ring))
    out = {bytes.fromhex(n) for n in kr.storage.listing(kr._scopes).files}
    if kr._shards:
        for n in kr.storage.listing(kr._shards).files:
            got = keyring_shards.read(kr.storage, kr._shards, n, kr.url)
            out |= {bytes.fromhex(h) for h in got or {}}
    return sorted(out)


def _secrets_of(ring: str, sid: bytes) -> list[bytes]:
    """Every form of scope ``sid``'s key in the keyring now: the wrapped bytes wherever they
    are (a shard, its own object) and the key itself."""
    kr = Keyring(open_storage(ring))
    out = [kr.scope(sid).key]
    for rel, data in _files(ring).items():
        top = rel.split("/")[0]
        if keyring_shards.is_shard_dir(top):
            entry = keyring_shards.decode(data, ring, rel.rsplit("/", 1)[-1]).get(sid.hex())
            if entry is not None:
                out.append(entry["key"])
        elif top.startswith("scopes") and rel.endswith(sid.hex()):
            out.append(cbor.decode(data, what="scope key")["key"])
    assert len(out) >= 2
    return out


def _no_copy(ring: str, secrets: list[bytes]) -> None:
    leaks = [rel for rel, data in _files(ring).items() for s in secrets if s in data]
    assert leaks == []


def test_rotation_writes_shards_then_erase_leaves_no_copy(tmp_path: Path) -> None:
    url, ring = _store(tmp_path)
    sids = _all_sids(ring)
    sid = subject_scope_id(ckptfs.open_store(url, keyring=ring).storage, "user-1")
    before = _secrets_of(ring, sid)  # its own object's wrapped key
    new = Keyring(open_storage(ring)).rotate()
    assert not list((Path(ring) / new._scopes).glob("*"))
    shard_files = list((Path(ring) / str(new._shards)).iterdir())
    assert 1 < len(shard_files) <= 16 and not list((Path(ring) / "scopes").glob("*"))
    import pycddl

    cddl = (Path(__file__).parent.parent / "spec" / "ckptfs.cddl").read_text()
    for p in shard_files:
        pycddl.Schema(f"root = enc-key-shard\n{cddl}").validate_cbor(p.read_bytes())
    pycddl.Schema(f"root = enc-keyring\n{cddl}").validate_cbor(
        (Path(ring) / "keyring.cbor").read_bytes())
    after = _secrets_of(ring, sid)  # in its shard now
    report = erase_subject(ckptfs.open_store(url, keyring=ring).storage, "user-1")
    assert report.scope == sid.hex()
    _no_copy(ring, before + after)
    fresh = Keyring(open_storage(ring))
    with pytest.raises(ScopeErased):
        fresh.scope(sid)
    for other in sids:  # the exploded shard's other scopes still open
        if other != sid:
            assert len(fresh.scope(other).key) == 32
    assert verify_erased(ckptfs.open_store(url, keyring=ring).storage, "user-1").ok
    assert ckptfs.open_store(url, keyring=ring).read("b") == {"y": 2}
    again = fresh.rotate()  # the next rotation reads the shards and per-scope objects left
    with pytest.raises(ScopeErased):
        again.scope(sid)
    _no_copy(ring, before + after)
    for other in sids:
        if other != sid:
            assert len(Keyring(open_storage(ring)).scope(other).key) == 32


@pytest.mark.parametrize("point", ["survivors", "shard-delete", "cleanup"])
def test_erase_crash_points_in_a_shard(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                       point: str) -> None:
    """A crash in any step of exploding a shard leaves the scope erased and every other scope
    openable; ``verify --erased`` says the key is still held until a rerun completes, which
    leaves no copy."""
    url, ring = _store(tmp_path)
    sids = _all_sids(ring)
    Keyring(open_storage(ring)).rotate()
    sid = subject_scope_id(ckptfs.open_store(url, keyring=ring).storage, "user-1")
    secrets = _secrets_of(ring, sid)
    view: Any = ckptfs.open_store(url, keyring=ring).storage
    st = view.keyring.storage
    real_wm, real_del, real_dm = st.write_many, st.delete, st.delete_many

    def write_many(items: Any) -> None:
        if point == "survivors":
            items = list(items)
            real_wm(items[: len(items) // 2])
            raise Crash(point)
        real_wm(items)

    def delete(path: str) -> None:
        if point == "shard-delete":
            raise Crash(point)
        real_del(path)

    def delete_many(paths: Any) -> None:
        if point == "cleanup":
            raise Crash(point)
        real_dm(paths)

    monkeypatch.setattr(st, "write_many", write_many)
    monkeypatch.setattr(st, "delete", delete)
    monkeypatch.setattr(st, "delete_many", delete_many)
    with pytest.raises(Crash):
        erase_subject(view, "user-1")
    monkeypatch.undo()
    fresh = Keyring(open_storage(ring))
    with pytest.raises(ScopeErased):
        fresh.scope(sid)
    for other in sids:
        if other != sid:
            assert len(fresh.scope(other).key) == 32
    verdict = verify_erased(ckptfs.open_store(url, keyring=ring).storage, "user-1")
    if point != "cleanup":  # the shard still holds the key: verify says so
        assert not verdict.ok and any("still holds" in p for p in verdict.problems)
    erase_subject(ckptfs.open_store(url, keyring=ring).storage, "user-1")  # the rerun
    _no_copy(ring, secrets)
    assert verify_erased(ckptfs.open_store(url, keyring=ring).storage, "user-1").ok
    for other in sids:
        if other != sid:
            assert len(Keyring(open_storage(ring)).scope(other).key) == 32


@pytest.mark.parametrize("when", ["before-switch", "after-carry"])
def test_scope_created_during_rotation_is_kept(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch,
                                               when: str) -> None:
    """A writer (its own keyring object, opened before) creates a scope in the old generation
    while a rotation runs: before the switch (the rotation carries it) or after the rotation's
    listing that carries (the writer sees the switch and carries it). Either way it opens in
    the new generation, by its name."""
    url, ring = _store(tmp_path)
    writer = Keyring(open_storage(ring))
    kr = Keyring(open_storage(ring))
    st: Any = kr.storage
    made: list[bytes] = []
    real_wm, real_dm = st.write_many, st.delete_many
    calls = {"wm": 0, "dm": 0}

    def write_many(items: Any) -> None:
        calls["wm"] += 1
        if when == "before-switch" and calls["wm"] == 1:
            made.append(writer.new_scope("subject", "late").id)
        real_wm(items)

    def delete_many(paths: Any) -> None:
        calls["dm"] += 1
        if when == "after-carry" and calls["dm"] == 1:
            made.append(writer.new_scope("subject", "late").id)
        real_dm(paths)

    monkeypatch.setattr(st, "write_many", write_many)
    monkeypatch.setattr(st, "delete_many", delete_many)
    new = kr.rotate()
    monkeypatch.undo()
    assert made
    fresh = Keyring(open_storage(ring))
    assert fresh.find("subject", "late") == made[0]
    assert fresh.scope(made[0]).key == writer.scope(made[0]).key
    assert new.gen == 1 and (writer.gen == 1 or when == "before-switch")
    fresh.rotate()  # and it survives the next rotation
    assert Keyring(open_storage(ring)).scope(made[0]).key == writer.scope(made[0]).key
    assert ckptfs.open_store(url, keyring=ring).read("a") == {"x": 1}


def test_scopes_created_by_a_thread_during_rotations(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A writer thread creates scopes all through two rotations: every one opens after."""
    url, ring = _store(tmp_path)
    monkeypatch.setattr(keyring_rotate, "BATCH", 3)
    monkeypatch.setattr(keyring_rotate, "WORKERS", 2)
    writer = Keyring(open_storage(ring))
    made: list[tuple[bytes, bytes]] = []
    stop = threading.Event()

    def work() -> None:
        while not stop.is_set():
            s = writer.new_scope("run")
            made.append((s.id, s.key))

    t = threading.Thread(target=work)
    t.start()
    try:
        for _ in range(2):
            Keyring(open_storage(ring)).rotate()
    finally:
        stop.set()
        t.join()
    assert len(made) > 5
    fresh = Keyring(open_storage(ring))
    assert fresh.gen == 2
    for sid, key in made:
        assert fresh.scope(sid).key == key


def test_old_layout_keyring_reads_and_rotates(tmp_path: Path) -> None:
    """The published vector stores' keyrings are of the layout before shards (per-scope
    objects in ``scopes/``, no ``shards`` in ``keyring.cbor``): they read, rotate into shards,
    and read again."""
    src = Path(__file__).resolve().parent.parent / "spec" / "vectors" / "encrypted-stores"
    shutil.copytree(src / "valid", tmp_path / "v")
    url, ring = str(tmp_path / "v" / "store"), str(tmp_path / "v" / "keyring")
    assert "shards" not in cbor.decode((Path(ring) / "keyring.cbor").read_bytes(), what="k")
    want = {"chat-1": {"msg": "hello", "n": 1}, "chat-2": {"msg": "other", "n": 2}}
    st = ckptfs.open_store(url, keyring=ring)
    assert {r: st.read(r) for r in want} == want
    new = Keyring(open_storage(ring)).rotate()
    assert new._shards and not list((Path(ring) / "scopes").glob("*"))
    st = ckptfs.open_store(url, keyring=ring)
    assert {r: st.read(r) for r in want} == want
    Keyring(open_storage(ring)).rotate()
    st = ckptfs.open_store(url, keyring=ring)
    assert {r: st.read(r) for r in want} == want


HOSTILE = {
    "not CBOR": b"\xff\x00garbage",
    "a list": cbor.encode([1, 2]),
    "no scopes": cbor.encode({"other": {}}),
    "scopes not a map": cbor.encode({"scopes": [1]}),
    "extra key": cbor.encode({"scopes": {}, "x": 1}),
    "short scope id": cbor.encode({"scopes": {"ab": {"kind": "run", "key": b"k"}}}),
    "bad kind": "bad kind",
    "key not bytes": "key not bytes",
    "extra entry key": "extra entry key",
    "another prefix": "prefix",
}


def _hostile(good: bytes, name: str, how: str | bytes) -> bytes:
    if isinstance(how, bytes):
        return how
    entries = keyring_shards.decode(good, "test", name)
    h, e = next(iter(sorted(entries.items())))
    e = dict(e)
    if how == "bad kind":
        e["kind"] = "admin"
    elif how == "key not bytes":
        e["key"] = "text"
    elif how == "extra entry key":
        e["note"] = "x"
    elif how == "prefix":
        other = "0" if h[0] != "0" else "1"
        entries = {other + h[1:]: e}
        return keyring_shards.encode(entries)
    entries[h] = e
    return keyring_shards.encode(entries)


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_shard_is_refused_and_changes_nothing(tmp_path: Path, case: str) -> None:
    url, ring = _store(tmp_path)
    new = Keyring(open_storage(ring)).rotate()
    folder = Path(ring) / str(new._shards)
    path = sorted(folder.iterdir())[0]
    victim = bytes.fromhex(sorted(keyring_shards.decode(path.read_bytes(), "t", path.name))[0])
    path.write_bytes(_hostile(path.read_bytes(), path.name, HOSTILE[case]))
    before = _files(ring)
    kr = Keyring(open_storage(ring))
    with pytest.raises(KeyringError, match="key shard .* is damaged"):
        kr.scope(victim)
    with pytest.raises(KeyringError, match="key shard .* is damaged"):
        Keyring(open_storage(ring)).rotate()
    assert _files(ring) == before
    with pytest.raises(KeyringError, match="key shard .* is damaged"):
        Keyring(open_storage(ring)).erase(victim)
    assert _files(ring) == before


@pytest.mark.parametrize("field", [{"shards": "../up"}, {"shards": "scopes"},
                                   {"shard_prefix": 9}, {"shards": 3}])
def test_hostile_shard_fields_in_keyring_file(tmp_path: Path, field: dict[str, Any]) -> None:
    _, ring = _store(tmp_path)
    Keyring(open_storage(ring)).rotate()
    p = Path(ring) / "keyring.cbor"
    meta = cbor.decode(p.read_bytes(), what="k")
    meta.update(field)
    p.write_bytes(cbor.encode(meta))
    with pytest.raises(KeyringError, match="damaged"):
        Keyring(open_storage(ring))


def test_scope_created_before_a_crash_after_the_switch_is_carried_by_the_rerun(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A writer creates a scope before the switch (it sees the old generation, so it counts on
    the rotation's carry step), and the rotation crashes after its switch, before that step:
    ``keyring.cbor`` still names the previous generation, and the rerun carries the scope."""
    url, ring = _store(tmp_path)
    writer = Keyring(open_storage(ring))
    kr = Keyring(open_storage(ring))
    st: Any = kr.storage
    made: list[bytes] = []
    real_wm = st.write_many
    calls = {"wm": 0}

    def write_many(items: Any) -> None:
        calls["wm"] += 1
        if calls["wm"] == 1:  # the shards, before the switch
            made.append(writer.new_scope("subject", "late").id)
        if calls["wm"] == 2:  # the carry, after it
            raise Crash("carry")
        real_wm(items)

    monkeypatch.setattr(st, "write_many", write_many)
    with pytest.raises(Crash):
        kr.rotate()
    monkeypatch.undo()
    assert writer.gen == 0 and Keyring(open_storage(ring)).gen == 1
    again = Keyring(open_storage(ring)).rotate()  # the rerun
    assert again.gen == 2
    fresh = Keyring(open_storage(ring))
    assert fresh.find("subject", "late") == made[0]
    assert fresh.scope(made[0]).key == writer.scope(made[0]).key
    assert "previous" not in cbor.decode((Path(ring) / "keyring.cbor").read_bytes(), what="k")
    assert not list((Path(ring) / "scopes").glob("*"))  # the first generation: gone
    assert [p.name for p in Path(ring).glob("master*")] == [Path(again._master_path).name]
    assert ckptfs.open_store(url, keyring=ring).read("a") == {"x": 1}
