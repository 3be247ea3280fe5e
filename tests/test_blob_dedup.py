"""Issue 30 defect 7: a streamed blob whose chunks the commit may rely on is located, not
written again (spec/v2.md 5.2: chunks its parent, the run's previous snapshot, names; chunks
this writer wrote less than REUSE_WINDOW ago). Measured in what lands in the store: bytes
(sum of file sizes: the store is create-only, so its growth is the bytes written) and files.

What may legitimately be written again (spec/retention.md 4.1, spec/v2.md 5.2, unchanged):
a chunk that neither the run's previous snapshot names nor this writer wrote recently, which
covers a fork's first commit and another run in another process. Those cases are asserted
here too, so that a change of the rule is a deliberate one."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import ckptfs
from ckptfs.errors import ConflictError
from ckptfs.ops.lease import MaintenanceLease
from ckptfs.ops.verify import verify

MiB = 1 << 20
#: the blob: big enough that writing it again is unmistakable next to a record's header
SIZE = 32 * MiB
#: a commit that writes none of the blob's bytes adds one record: its manifest and locators
#: (about 20 bytes per chunk: 512 chunks of 64 KiB on average here)
HEADER_MAX = 64 * 1024
#: a 1-byte edit in the middle changes the chunk(s) around it (max chunk 256 KiB; FastCDC
#: realigns within a chunk or two)
EDIT_MAX = HEADER_MAX + 4 * 256 * 1024
#: files such a commit adds: its record, and a pack per blob window holding a changed chunk
#: (the changed chunks may straddle two windows)
EDIT_FILES = 3


def _usage(root: Path) -> tuple[int, int]:
    """(bytes, files) of everything under ``root``."""
    n = size = 0
    for d, _, files in os.walk(root):
        for f in files:
            size += os.path.getsize(os.path.join(d, f))
            n += 1
    return size, n


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("src") / "blob.bin"
    path.write_bytes(os.urandom(SIZE))
    return path


def _edited(source: Path, tmp_path: Path) -> Path:
    """``source`` with one byte changed in the middle."""
    data = bytearray(source.read_bytes())
    data[len(data) // 2] ^= 0xFF
    out = tmp_path / "edited.bin"
    out.write_bytes(bytes(data))
    return out


def _first(root: Path, source: Path, run_id: str = "r") -> ckptfs.Store:
    store = ckptfs.open_store(str(root))
    store.start_run(run_id).checkpoint({"b": ckptfs.Blob(source), "n": 1})
    return store


def _grew(root: Path, before: tuple[int, int]) -> tuple[int, int]:
    after = _usage(root)
    return after[0] - before[0], after[1] - before[1]


@pytest.mark.parametrize("form", ["path", "file object"])
def test_the_same_blob_again_in_the_same_run_writes_only_a_record(
        tmp_path: Path, source: Path, form: str) -> None:
    root = tmp_path / "s"
    store = ckptfs.open_store(str(root))
    run = store.start_run("r")
    run.checkpoint({"b": ckptfs.Blob(source)})
    before = _usage(root)
    with open(source, "rb") as f:
        run.checkpoint({"b": ckptfs.Blob(source if form == "path" else f), "n": 2})
    grew, files = _grew(root, before)
    assert files == 1 and grew < HEADER_MAX, (grew, files)
    assert store.read("r")["b"].read() == source.read_bytes()


@pytest.mark.parametrize("form", ["path", "file object"])
def test_the_same_blob_after_a_restart_writes_only_a_record(
        tmp_path: Path, source: Path, form: str) -> None:
    """A resumed run's parent (the head it resumed) names the blob's chunks: its record
    locates them, so the commit locates them too (failed before: every byte written again,
    the store doubled)."""
    root = tmp_path / "s"
    _first(root, source)
    before = _usage(root)
    run = ckptfs.open_store(str(root)).resume("r")  # a fresh store object: nothing remembered
    with open(source, "rb") as f:
        snap = run.checkpoint({"b": ckptfs.Blob(source if form == "path" else f), "n": 2})
    grew, files = _grew(root, before)
    assert files == 1 and grew < HEADER_MAX, (grew, files)
    fresh = ckptfs.open_store(str(root))
    assert fresh.read(snap.id)["b"].read() == source.read_bytes()
    assert verify(fresh.repo, read_data=True).ok


def test_the_same_small_blob_of_bytes_after_a_restart_writes_only_a_record(
        tmp_path: Path) -> None:
    """``Blob(bytes)`` (cut in memory, over the inline limit) follows the same rule."""
    root = tmp_path / "s"
    data = os.urandom(3 * MiB)
    ckptfs.open_store(str(root)).start_run("r").checkpoint({"b": ckptfs.Blob(data)})
    before = _usage(root)
    ckptfs.open_store(str(root)).resume("r").checkpoint({"b": ckptfs.Blob(data), "n": 2})
    grew, files = _grew(root, before)
    assert files == 1 and grew < HEADER_MAX, (grew, files)
    assert ckptfs.open_store(str(root)).read("r")["b"].read() == data


def test_the_same_blob_after_the_reuse_window_writes_only_a_record(
        tmp_path: Path, source: Path) -> None:
    """Past REUSE_WINDOW this writer no longer relies on what it wrote, but the parent still
    names the chunks (failed before: written again after 10 minutes in one process)."""
    root = tmp_path / "s"
    store = ckptfs.open_store(str(root))
    run = store.start_run("r")
    run.checkpoint({"b": ckptfs.Blob(source)})
    store.repo.objects.known.window = 0.0  # every chunk it wrote is now older than the window
    before = _usage(root)
    run.checkpoint({"b": ckptfs.Blob(source), "n": 2})
    grew, files = _grew(root, before)
    assert files == 1 and grew < HEADER_MAX, (grew, files)
    assert store.read("r")["b"].read() == source.read_bytes()


def test_a_small_edit_after_a_restart_writes_only_the_changed_chunks(
        tmp_path: Path, source: Path) -> None:
    root = tmp_path / "s"
    _first(root, source)
    edited = _edited(source, tmp_path)
    before = _usage(root)
    snap = ckptfs.open_store(str(root)).resume("r").checkpoint({"b": ckptfs.Blob(edited)})
    grew, files = _grew(root, before)
    assert 0 < grew < EDIT_MAX and files <= EDIT_FILES, (grew, files)
    assert ckptfs.open_store(str(root)).read(snap.id)["b"].read() == edited.read_bytes()


def test_a_small_edit_in_the_same_process_writes_only_the_changed_chunks(
        tmp_path: Path, source: Path) -> None:
    root = tmp_path / "s"
    store = ckptfs.open_store(str(root))
    run = store.start_run("r")
    run.checkpoint({"b": ckptfs.Blob(source)})
    store.repo.objects.known.window = 0.0
    edited = _edited(source, tmp_path)
    before = _usage(root)
    with open(edited, "rb") as f:
        run.checkpoint({"b": ckptfs.Blob(f)})
    grew, files = _grew(root, before)
    assert 0 < grew < EDIT_MAX and files <= EDIT_FILES, (grew, files)
    assert store.read("r")["b"].read() == edited.read_bytes()


def test_after_a_real_process_restart(tmp_path: Path, source: Path) -> None:
    """The resume and the commit in another Python process (no cache of this one)."""
    root = tmp_path / "s"
    _first(root, source)
    before = _usage(root)
    code = ("import sys, ckptfs; s = ckptfs.open_store(sys.argv[1]); "
            "s.resume('r').checkpoint({'b': ckptfs.Blob(sys.argv[2]), 'n': 2})")
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    subprocess.run([sys.executable, "-c", code, str(root), str(source)], check=True, env=env,
                   timeout=120)
    grew, files = _grew(root, before)
    assert files == 1 and grew < HEADER_MAX, (grew, files)


def test_another_run_of_the_same_writer_within_the_window_relies_on_its_packs(
        tmp_path: Path, source: Path) -> None:
    """Chunks this writer wrote less than REUSE_WINDOW ago (spec/v2.md 5.2): a second run, or
    a fork, in the same process locates them in the packs it wrote."""
    root = tmp_path / "s"
    store = _first(root, source)
    before = _usage(root)
    store.start_run("other").checkpoint({"b": ckptfs.Blob(source)})
    store.fork("r", "f").checkpoint({"b": ckptfs.Blob(source), "n": 3})
    grew, files = _grew(root, before)
    assert files == 2 and grew < 2 * HEADER_MAX, (grew, files)


@pytest.mark.parametrize("how", ["another run", "a fork"])
def test_another_process_writes_the_blob_again_as_the_grace_rule_requires(
        tmp_path: Path, source: Path, how: str) -> None:
    """Not a snapshot of the same run's previous seq, not written by this writer: spec/v2.md
    5.2 and retention.md 4.1 make the commit write the chunks again (which refreshes them:
    a gc that judged them garbage under another run's forget must not take them). Decided to
    keep that rule: relying on another run's record would need the handshake to cover a
    parent that is not the run's head, which it does not."""
    root = tmp_path / "s"
    _first(root, source)
    before = _usage(root)
    store = ckptfs.open_store(str(root))
    run = store.start_run("other") if how == "another run" else store.fork("r", "f")
    snap = run.checkpoint({"b": ckptfs.Blob(source), "n": 3})
    grew, _ = _grew(root, before)
    assert SIZE <= grew < SIZE + HEADER_MAX + MiB, grew
    # and from then on that run relies on its own parent
    before = _usage(root)
    ckptfs.open_store(str(root)).resume(snap.run).checkpoint({"b": ckptfs.Blob(source)})
    grew, files = _grew(root, before)
    assert files == 1 and grew < HEADER_MAX, (grew, files)


def test_a_relied_on_body_a_sweep_took_withdraws_the_commit(tmp_path: Path,
                                                            source: Path) -> None:
    """The blob's chunks the commit relies on go through the post-commit check of every
    relied-on chunk (spec/v2.md 5.1 step 3): a sweep that deleted the parent's pack while the
    commit was being prepared withdraws the commit (ConflictError, no record), never a
    record with a hole."""
    root = tmp_path / "s"
    _first(root, source)
    packs = sorted(p for p in (root / "packs").rglob("*") if p.is_file())
    store = ckptfs.open_store(str(root))
    run = store.resume("r")
    objects = store.repo.objects
    prepare = objects.prepare_v2

    def sweep_first(*a: Any, **k: Any) -> Any:
        lease = MaintenanceLease(ckptfs.open_store(str(root)).storage).acquire()
        lease.set_deletes(True)
        for p in packs:
            p.unlink()  # what a hostile (or broken) collector deletes while it sweeps
        lease.release()
        return prepare(*a, **k)

    objects.prepare_v2 = sweep_first  # type: ignore[method-assign]
    with pytest.raises(ConflictError, match="withdrawn"):
        run.checkpoint({"b": ckptfs.Blob(source), "n": 2})
    assert ckptfs.open_store(str(root)).repo.record_seqs("r") == [1]


def test_a_value_edited_past_the_reuse_window_writes_only_the_changed_chunks(
        tmp_path: Path) -> None:
    """The class beyond blobs: a large value cut afresh (not a list grown at its end) after
    REUSE_WINDOW locates the chunks its parent names (failed before: every chunk written
    again, the known set having expired)."""
    root = tmp_path / "s"
    store = ckptfs.open_store(str(root))
    run = store.start_run("r")
    doc = bytearray(os.urandom(6 * MiB))
    run.checkpoint({"doc": {"body": bytes(doc)}})
    store.repo.objects.known.window = 0.0
    doc[len(doc) // 2] ^= 0xFF
    before = _usage(root)
    run.checkpoint({"doc": {"body": bytes(doc)}})
    grew, files = _grew(root, before)
    assert 0 < grew < EDIT_MAX and files <= 2, (grew, files)
    assert ckptfs.open_store(str(root)).read("r")["doc"]["body"] == bytes(doc)


def test_a_fork_writes_its_parents_blob_again_in_bounded_memory(
        tmp_path: Path, source: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fork's first commit writes the blob it takes from its parent again (the grace rule),
    a window at a time through the blob writer's packs (failed before: every chunk read into
    memory at once, then framed and packed: about three times the blob, 96 MiB for 32 MiB;
    a 10 GiB blob could not be forked). Windows of 4 MiB here: the peak is a few windows."""
    import tracemalloc

    from ckptfs.store import blobs

    monkeypatch.setattr(blobs, "WINDOW", 4 * MiB)

    root = tmp_path / "s"
    _first(root, source)
    store = ckptfs.open_store(str(root))
    fork = store.fork("r", "f")
    state = dict(fork.state)
    before = _usage(root)
    tracemalloc.start()
    try:
        snap = fork.checkpoint(state)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    grew, _ = _grew(root, before)
    assert SIZE <= grew < SIZE + HEADER_MAX + MiB, grew
    assert peak < SIZE // 2, peak
    fresh = ckptfs.open_store(str(root))
    assert fresh.read(snap.id)["b"].read() == source.read_bytes()
    assert verify(fresh.repo, read_data=True).ok


def test_after_a_restart_on_every_backend(store_url: str, store_options: dict[str, Any]
                                          ) -> None:
    """Local disk, memory and S3 (moto): the resumed commit of the same blob adds one object,
    its record (failed before: the blob's packs again)."""
    from tests.storeutil import contents

    data = os.urandom(4 * MiB)
    first = ckptfs.open_store(store_url, **store_options)
    first.start_run("r").checkpoint({"b": ckptfs.Blob(io.BytesIO(data))})
    before = contents(first.storage)
    store = ckptfs.open_store(store_url, **store_options)
    snap = store.resume("r").checkpoint({"b": ckptfs.Blob(io.BytesIO(data)), "n": 2})
    after = contents(store.storage)
    added = {p: len(b) for p, b in after.items() if p not in before}
    assert [p.split("/")[0] for p in added] == ["runs"], added
    assert sum(added.values()) < HEADER_MAX, added
    assert ckptfs.open_store(store_url, **store_options).read(snap.id)["b"].read() == data


def test_a_resumed_blob_committed_while_gc_repacks_its_parents_pack(
        store_url: str, store_options: dict[str, Any]) -> None:
    """The relied-on chunks' pack is repacked (bodies moved, forward written, pack deleted)
    by a real gc while the resumed writer commits the same blob: the commit either stands and
    reads back (through the forward) or is withdrawn; never a record with a hole."""
    from ckptfs.ops.gc import gc
    from ckptfs.ops.retention import forget_snapshots
    from tests.test_gc_races import Beside, _collector, _old_store
    from tests.test_gc_races_v2 import _first_container_delete

    a, b = os.urandom(2 * MiB), os.urandom(2 * MiB)
    store = ckptfs.open_store(store_url, **store_options)
    run = store.start_run("r")
    run.checkpoint({"b": ckptfs.Blob(a + b)})  # one pack holding a's chunks and b's
    run.checkpoint({"b": ckptfs.Blob(a)})  # relies on a's chunks in that pack
    forget_snapshots(store.repo, {"r": {1}})  # b's chunks are garbage: gc repacks the pack
    _, now = _old_store(store_url, store_options)
    writer = ckptfs.open_store(store_url, **store_options)
    resumed = writer.resume("r")
    beside: list[Beside] = []
    repo = _collector(store_url, store_options, when=_first_container_delete,
                      hook=lambda: beside.append(Beside(writer, lambda: resumed.checkpoint(
                          {"b": ckptfs.Blob(a), "n": 3}))))
    report = gc(repo, grace_ms=60_000, now=now)
    assert beside, "the collector deleted no container: the schedule did not happen"
    assert report.containers.containers_deleted >= 1, report
    fresh = ckptfs.open_store(store_url, **store_options)
    try:
        snap = beside[0].done()
    except ConflictError:
        assert fresh.repo.record_seqs("r") == [2]
    else:
        assert fresh.read(snap.id)["b"].read() == a
    assert verify(fresh.repo, read_data=True).ok


def test_a_chunk_is_relied_on_by_its_full_digest_never_by_a_locator_prefix() -> None:
    """A record's locators are keyed by 8-byte prefixes, which content can be made to collide
    (2^32 work): a chunk is skipped only when the parent's manifest names its full digest,
    so a colliding chunk is written, never located at another chunk's body (a hole)."""
    from ckptfs.format.containers import Location, PackRef
    from ckptfs.format.digest import Digest
    from ckptfs.store.chunk_sets import NO_PARENT, ParentChunks

    named, collider, unlocated = b"\x01" * 32, b"\x01" * 8 + b"\x02" * 24, b"\x03" * 32
    loc = Location(PackRef(Digest(b"\x09" * 32)), 45, 10)
    parent = ParentChunks(frozenset({named, unlocated}), ({}, {named[:8]: loc}))
    assert named in parent
    assert collider not in parent  # its prefix is located, its digest is not named
    assert unlocated not in parent  # named, but the parent's record does not locate it
    assert named in ParentChunks(frozenset({named}))  # v1: no locator needed
    assert named not in NO_PARENT
