"""copy into a v2 destination moves source packs as packs (issue 15): a pack the destination
holds none of the chunks of is written byte for byte under the same name (its name, the
BLAKE3 of the file, verifies it); a pack the destination holds some of is repacked (only
what it lacks is sent); a pack whose bytes do not match its name is never copied as a pack.
An interrupted copy leaves a valid prefix and resumes with the same ids. Several batches
(small ``pack_target``) exercise the pipeline: packs of a batch go up while the records of
the batch before are created."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

import ckptfs
from ckptfs.errors import CorruptSnapshot
from ckptfs.format import containers as ct
from ckptfs.format.digest import Digest
from ckptfs.ops.copy import copy_runs
from ckptfs.ops.verify import verify
from ckptfs.storage import open_storage
from ckptfs.store.repository import Repository
from tests.retention_helpers import CrashingStorage, InjectedCrash, crashes_at


KiB = 1024
MiB = 1 << 20


def _packs(root: str) -> dict[str, bytes]:
    st = open_storage(root)
    return {p: st.read(p) for p in st.scan("packs")}


def _want(root: str, run: str = "r") -> dict[int, Any]:
    s = ckptfs.open_store(root)
    return {x.seq: (x.id, s.read(x)["own"].read()) for x in s.snapshots(run)}


def _check_prefix(url: str, want: dict[int, Any], where: str, run: str = "r") -> list[int]:
    if not os.path.exists(os.path.join(url, "ckptfs.cbor")):
        return []  # interrupted before the copy created the destination's config
    store = ckptfs.open_store(url)
    rep = verify(store.repo, read_data=True)
    assert rep.ok, (where, rep.problems)
    seqs = store.repo.seqs(run) if run in store.repo.run_ids() else []
    assert seqs == list(range(1, len(seqs) + 1)), (where, seqs)
    for seq in seqs:
        snap = store.get(f"{run}@{seq}")
        assert snap.id == want[seq][0], where
        assert store.read(snap)["own"].read() == want[seq][1], where
    return seqs


@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A v2 source whose commits write packs (small record_bulk_max and pack_target)."""
    root = str(tmp_path_factory.mktemp("packed") / "s")
    s = ckptfs.open_store(root)
    s.init(settings={"record_bulk_max": 4096, "pack_target": 256 * KiB})
    run = s.start_run("r")
    for i in range(6):
        run.checkpoint({"i": i, "own": ckptfs.Blob(os.urandom(300 * KiB))})
    return root


def test_source_packs_are_moved_as_packs(tmp_path: Path, packed: str) -> None:
    src_packs = _packs(packed)
    assert len(src_packs) >= 6
    dst = str(tmp_path / "d")
    rep = copy_runs(ckptfs.open_store(packed).repo, ckptfs.open_store(dst).repo)
    assert rep.ok and rep.snapshots_copied == 6
    got = _packs(dst)
    assert got == src_packs  # the same files under the same names, nothing repacked
    for path, data in got.items():
        assert path.endswith(Digest.of(data).hex)
    assert _check_prefix(dst, _want(packed), "done") == [1, 2, 3, 4, 5, 6]


def test_every_crash_point_of_a_copy_that_moves_packs(tmp_path: Path, packed: str) -> None:
    want = _want(packed)
    points = 0
    for k in range(100):
        dst = str(tmp_path / f"d{k}")  # the copy creates its config: the source's pack_target
        if not crashes_at(k, open_storage(dst),
                          lambda st: copy_runs(ckptfs.open_store(packed).repo, Repository(st))):
            break
        points += 1
        where = f"crash at mutation {k + 1}"
        _check_prefix(dst, want, where)  # a valid prefix: 0 broken snapshots
        leases = os.path.join(dst, "leases", "maintenance")
        for name in os.listdir(leases) if os.path.isdir(leases) else []:
            os.unlink(os.path.join(leases, name))
        rep = copy_runs(ckptfs.open_store(packed).repo, ckptfs.open_store(dst).repo)
        assert rep.ok, (where, rep.conflicts)
        assert _check_prefix(dst, want, where) == [1, 2, 3, 4, 5, 6], where  # same ids
        again = copy_runs(ckptfs.open_store(packed).repo, ckptfs.open_store(dst).repo)
        assert again.snapshots_copied == 0 and again.chunks_copied == 0, where
        shutil.rmtree(dst)
    print(f"copy moving packs: {points} crash points")
    assert points >= 8  # the config, the lease, packs, one record each


def test_a_pack_the_destination_holds_part_of_is_repacked(tmp_path: Path) -> None:
    """S0 (bodies in records) -> S1 (one pack spanning the snapshots); the destination got
    r@1..2 from S0 before; copying S1 then sends only what r@3..4 lack, in new packs."""
    s0 = str(tmp_path / "s0")
    store = ckptfs.open_store(s0)
    run = store.start_run("r")
    for i in range(2):
        run.checkpoint({"i": i, "own": ckptfs.Blob(os.urandom(MiB + 200_000))})
    dst = str(tmp_path / "d")
    assert copy_runs(store.repo, ckptfs.open_store(dst).repo).snapshots_copied == 2
    for i in range(2, 4):
        run.checkpoint({"i": i, "own": ckptfs.Blob(os.urandom(MiB + 200_000))})
    s1 = str(tmp_path / "s1")
    assert copy_runs(store.repo, ckptfs.open_store(s1).repo).snapshots_copied == 4
    s1_packs = _packs(s1)
    assert len(s1_packs) == 1  # every snapshot's bodies in one pack
    before = set(_packs(dst))
    rep = copy_runs(ckptfs.open_store(s1).repo, ckptfs.open_store(dst).repo)
    assert rep.ok and rep.snapshots_copied == 2 and rep.snapshots_present == 2
    new = set(_packs(dst)) - before
    assert new and not new & set(s1_packs)  # repacked, not moved
    sent = sum(len(open_storage(dst).read(p)) for p in new)
    assert sent < 0.6 * len(next(iter(s1_packs.values())))  # only r@3..4's bodies
    assert _check_prefix(dst, _want(s0), "repacked") == [1, 2, 3, 4]


def _damage(root: str, which: str) -> str:
    """Flip one byte of the first pack (in its header digest, or inside its first body);
    returns the pack's path."""
    st = open_storage(root)
    path = sorted(st.scan("packs"))[0]
    data = bytearray(st.read(path))
    c = ct.decode(bytes(data), what=path)
    if which == "header":
        at = ct.header_length(bytes(data), what=path) - 1  # last byte of the header digest
    else:
        b = c.header.bodies[0]
        at = c.location(ct.PackRef(Digest.parse(path.rsplit("/", 1)[1])), b).start + 10
    data[at] ^= 0xFF
    with open(os.path.join(root, path), "r+b") as f:
        f.write(bytes(data))
    return path


def test_a_pack_whose_header_does_not_match_its_name_is_not_copied_as_a_pack(
        tmp_path: Path, packed: str) -> None:
    """Its bodies are intact (each verified by its own digest): they are repacked; no object
    of the pack's name appears in the destination."""
    src = str(tmp_path / "s")
    shutil.copytree(packed, src)
    bad = _damage(src, "header")
    dst = str(tmp_path / "d")
    rep = copy_runs(ckptfs.open_store(src).repo, ckptfs.open_store(dst).repo)
    assert rep.ok and rep.snapshots_copied == 6
    got = _packs(dst)
    assert bad not in got
    assert all(p.endswith(Digest.of(d).hex) for p, d in got.items())
    assert _check_prefix(dst, _want(packed), "refused") == [1, 2, 3, 4, 5, 6]


def test_a_pack_with_a_damaged_body_is_refused_and_stops_the_copy_there(
        tmp_path: Path, packed: str) -> None:
    src = str(tmp_path / "s")
    shutil.copytree(packed, src)
    bad = _damage(src, "body")
    dst = str(tmp_path / "d")
    with pytest.raises(CorruptSnapshot):
        copy_runs(ckptfs.open_store(src).repo, ckptfs.open_store(dst).repo)
    assert bad not in _packs(dst)
    s = ckptfs.open_store(src)
    affected = []
    for x in s.snapshots("r"):
        try:
            s.read(x)["own"].read()
        except CorruptSnapshot:
            affected.append(x.seq)
    assert affected
    done = _check_prefix(dst, _want(packed), "damaged")  # valid, 0 broken snapshots
    assert done == list(range(1, affected[0]))  # every snapshot before the damage was copied


def test_packs_moved_into_s3_and_an_interrupted_copy_there_resumes(
        tmp_path: Path, packed: str, s3_options: dict[str, Any]) -> None:
    """On the S3 API (moto): a copy interrupted after its first packs and records leaves a
    valid prefix; run again it finishes with the same ids, the source's packs under their
    own names, and nothing broken."""
    from tests.conftest import new_s3_url

    want = _want(packed)
    url = new_s3_url()  # the copy creates its config: the source's small pack_target
    crashing = CrashingStorage(open_storage(url, **s3_options), crash_at=10)
    with pytest.raises(InjectedCrash):
        copy_runs(ckptfs.open_store(packed).repo, Repository(crashing), workers=1)
    crashing.crash_at = None
    dst = ckptfs.open_store(url, **s3_options)
    assert verify(dst.repo, read_data=True).ok
    done = dst.repo.seqs("r") if "r" in dst.repo.run_ids() else []
    assert done == list(range(1, len(done) + 1)) and 0 < len(done) < 6
    rep = copy_runs(ckptfs.open_store(packed).repo, ckptfs.open_store(url, **s3_options).repo)
    assert rep.ok and rep.snapshots_copied == 6 - len(done)
    dst = ckptfs.open_store(url, **s3_options)
    assert verify(dst.repo, read_data=True).ok
    assert {x.seq: x.id for x in dst.snapshots("r")} == {s: w[0] for s, w in want.items()}
    st = open_storage(url, **s3_options)
    src_packs = _packs(packed)
    assert {p: st.read(p) for p in src_packs} == src_packs
