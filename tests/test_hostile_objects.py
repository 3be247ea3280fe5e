"""Regression tests for the storage-level defects of issue 13 ("Hostile stores"): a FIFO, a link,
a sparse huge file or a file in place of a folder makes a reader fail at once with a
ckptfs.errors error; nothing outside the store is read, touched or written; large batches stay
under the descriptor limit. The whole corpus is tests/test_hostile_stores.py."""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import ckptfs
from ckptfs.errors import CkptfsError, CorruptObject, CorruptSnapshot, FormatError, StorageError
from ckptfs.format.limits import MAX_VALUE_SIZE
from ckptfs.ops.gc import gc
from ckptfs.ops.verify import verify
from ckptfs.runtime.store import Store
from ckptfs.storage.local import STAGE_SLICE, LocalStorage
from tests import hostile_corpus as hc



class Hang(BaseException):
    pass


@contextlib.contextmanager
def deadline(seconds: float = 10.0) -> Iterator[None]:
    """Fail (instead of blocking the suite forever) when the block does not return in time."""
    def fire(signum: int, frame: Any) -> None:
        raise Hang(f"blocked for {seconds} s")

    old = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


@contextlib.contextmanager
def memory_cap(extra: int = 1 << 30) -> Iterator[None]:
    """Cap this process's address space at its current size plus ``extra`` for the block, so
    that reading a 6 GiB file whole fails fast with MemoryError instead of swapping."""
    with open("/proc/self/status") as f:
        vm = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (vm + extra, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, str]]:
    root = str(tmp_path_factory.mktemp("base") / "store")
    return root, hc.build_base(root)


def _visited(root: str, facts: dict[str, str], kind: str) -> str:
    """An object of ``kind`` that the kind's reader below is sure to open: names of manifests
    and chunks are digests (they vary between runs), and released lease generations stay in
    the store while only the highest one is read."""
    from ckptfs.format.names import chunk_path
    from ckptfs.ops.chunks import snapshot_chunks

    found = hc.objects(root, facts)[kind]
    if kind == "lease":
        return found[-1]
    if kind in ("manifest", "chunk"):
        store = ckptfs.open_store(root)
        head = store.repo.resolve(facts["head_id"])
        if kind == "manifest":
            return f"snapshots/{head.digest.hex[:2]}/{head.digest.hex}"
        return chunk_path(next(c.digest for _, c in snapshot_chunks(store.repo, head)))
    return found[0]


def hostile(base: tuple[str, dict[str, str]], tmp_path: Any, kind: str,
            mutation: str) -> tuple[str, str, str]:
    """A copy of the base store with the first object of ``kind`` replaced by ``mutation``;
    (store, outside decoy folder, the replaced path)."""
    root, facts = base
    target = _visited(root, facts, kind)
    store, outside = str(tmp_path / "store"), str(tmp_path / "outside")
    hc.make(root, hc.Case(kind, target, mutation), store, outside)
    return store, outside, target


#: for each kind of object, a reader entry point that must read it
READERS: dict[str, Callable[[str], Any]] = {
    "config": lambda url: ckptfs.open_store(url).repo.config,
    "record": lambda url: [list(ckptfs.open_store(url).snapshots(r)) for r in ("r1", "r2", "r3")],
    "manifest": lambda url: [list(ckptfs.open_store(url).snapshots(r)) for r in ("r1", "r2", "r3")],
    "chunk": lambda url: [ckptfs.open_store(url).read(r) for r in ("r1", "r2", "r3")]
                         + [ckptfs.open_store(url).read("r1@2")["file"].read()],
    "retired": lambda url: ckptfs.open_store(url).head("r3"),
    "expiry": lambda url: ckptfs.open_store(url).read("r3"),
    # a dry run takes no lease (it writes nothing), so the collector proper reads it
    "lease": lambda url: gc(ckptfs.open_store(url).repo),
}


def test_a_huge_lease_counts_as_damaged_not_as_memory(base: Any, tmp_path: Any) -> None:
    """A damaged lease blocks nobody (spec/retention.md): a sparse 6 GiB one included."""
    store, _, _ = hostile(base, tmp_path, "lease", "sparse-6GiB")
    with memory_cap():
        gc(ckptfs.open_store(store).repo, dry_run=True)


@pytest.mark.parametrize("what", ["messages", "ledger"])
def test_a_chunk_list_naming_6_gib_is_refused_before_assembly(base: Any, tmp_path: Any,
                                                              what: str) -> None:
    """Before: one 16 MiB chunk listed 384 times was assembled into 6 GiB (MemoryError)."""
    store, outside = str(tmp_path / "store"), str(tmp_path / "outside")
    mutation = "repeat-chunk-value" if what == "messages" else "repeat-chunk-ledger"
    hc.make(base[0], hc.Case("semantic", "runs/r1", mutation), store, outside)
    st = ckptfs.open_store(store)
    with memory_cap(), pytest.raises(CorruptSnapshot, match="more than a value or ledger"):
        st.read("r1") if what == "messages" else st.ledger("r1")
    with memory_cap():
        report = verify(st.repo, read_data=True)
    assert what != "ledger" or any("more than a value or ledger" in p.message
                                   for p in report.problems), report.problems


def test_the_writer_refuses_a_value_over_the_limit_and_suggests_a_blob(tmp_path: Any) -> None:
    """Before: any size was written, and readers then had to assemble it in memory."""
    run = ckptfs.open_store(str(tmp_path / "s")).start_run("r")
    with pytest.raises(FormatError, match="ckptfs.Blob"):
        run.checkpoint({"big": bytes(MAX_VALUE_SIZE + 1)})
    run.checkpoint({"big": ckptfs.Blob(bytes(MAX_VALUE_SIZE + 1))})  # as a blob it is fine


def test_a_symlinked_tmp_folder_keeps_temp_files_out_of_other_folders(base: Any,
                                                                      tmp_path: Any) -> None:
    """Before: O_TMPFILE on tmp/ -> outside created the new objects' inodes outside."""
    store, outside = str(tmp_path / "store"), str(tmp_path / "outside")
    hc.make(base[0], hc.Case("folder", "tmp", "symlink-out"), store, outside)
    before = hc.snapshot_tree(outside)
    with pytest.raises(StorageError, match="symbolic link"):
        ckptfs.open_store(store).resume("r1").checkpoint(hc.FUTURE)
    assert hc.snapshot_tree(outside) == before


def _age(path: str) -> int:
    os.utime(path, (1_000_000_000, 1_000_000_000), follow_symlinks=False)
    return os.lstat(path).st_mtime_ns


@pytest.mark.parametrize("folder,call", [
    ("runs", lambda st: st.runs()),
    ("runs/r1", lambda st: st.head("r1")),
    ("tmp", lambda st: st.resume("r1").checkpoint(hc.FUTURE)),
])
def test_a_file_in_place_of_a_folder_is_a_storage_error(base: Any, tmp_path: Any, folder: str,
                                                        call: Callable[[Store], Any]) -> None:
    """Before: NotADirectoryError escaped, or the folder's content silently looked absent."""
    store, outside = str(tmp_path / "store"), str(tmp_path / "outside")
    hc.make(base[0], hc.Case("folder", folder, "file"), store, outside)
    with pytest.raises(StorageError, match="file where a folder|lies below a file"):
        call(ckptfs.open_store(store))


def test_a_batch_larger_than_the_descriptor_limit_is_staged_in_slices(tmp_path: Any) -> None:
    """Before: copy and export of a run of 1,500 snapshots failed every time under
    ``ulimit -n 1024`` (one O_TMPFILE descriptor per object of the batch)."""
    src = str(tmp_path / "src")
    run = Store(LocalStorage(src, durable=False)).start_run("r")
    for i in range(1500):
        run.checkpoint({"i": i})
    code = textwrap.dedent("""
        import resource, sys
        resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))
        import ckptfs
        from ckptfs.ops.copy import copy_runs
        from ckptfs.ops.export import export_archive
        src = ckptfs.open_store(sys.argv[1])
        print(copy_runs(src.repo, ckptfs.open_store(sys.argv[2]).repo).snapshots_copied)
        print(export_archive(src.repo, sys.argv[3]).copy.snapshots_copied)
    """)
    p = subprocess.run([sys.executable, "-c", code, src, str(tmp_path / "dst"),
                        str(tmp_path / "out.zip")], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert p.returncode == 0 and p.stdout.split() == ["1500", "1500"], p.stderr[-2000:]
    assert len(ckptfs.open_store(str(tmp_path / "dst")).repo.seqs("r")) == 1500


def test_write_many_of_more_than_a_slice_is_durable_and_complete(tmp_path: Any) -> None:
    st = LocalStorage(str(tmp_path / "s"))
    items = [(f"chunks/{i % 7:02x}/{i:064x}", b"\x00" + bytes([i % 256]) * 10)
             for i in range(2 * STAGE_SLICE + 3)]
    st.write_many(items)
    assert all(st.read(p) == d for p, d in items)
    assert not os.listdir(str(tmp_path / "s" / "tmp"))


def test_reads_refuse_links_and_non_files_with_ckptfs_errors(tmp_path: Any) -> None:
    st = LocalStorage(str(tmp_path / "s"))
    st.write("chunks/aa/real", b"\x00abc")
    os.symlink("real", str(tmp_path / "s" / "chunks" / "aa" / "link"))
    os.mkfifo(str(tmp_path / "s" / "chunks" / "aa" / "fifo"))
    os.mkdir(str(tmp_path / "s" / "chunks" / "aa" / "dir"))
    for name, needle in [("link", "symbolic link"), ("fifo", "FIFO"), ("dir", "folder")]:
        with deadline(), pytest.raises(CkptfsError, match=needle):
            st.read(f"chunks/aa/{name}")
    with pytest.raises(StorageError, match="symbolic link"):
        st.size("chunks/aa/link")
    with pytest.raises(StorageError, match="FIFO"):
        st.size("chunks/aa/fifo")
    assert st.size("chunks/aa/dir") is None  # a folder is not an object


def test_an_oversized_object_is_refused_on_every_backend(storage: Any) -> None:
    """Before: an object store read a huge object whole. Now every backend refuses a file
    larger than what its path may hold (object stores with a ranged GET: one request, at most
    limit + 1 bytes); objects within the limit read as before."""
    from ckptfs.format.limits import MAX_CHUNK_FILE
    from ckptfs.errors import FormatError
    from ckptfs.format.models import MAX_RECORD_SIZE, RunRecord

    storage.write("chunks/ab/big", bytes(MAX_CHUNK_FILE + 1))
    storage.write("chunks/ab/ok", bytes(MAX_CHUNK_FILE))
    storage.write("runs/r/00000000000000000001", bytes(MAX_RECORD_SIZE + 1))
    with pytest.raises(CorruptObject, match="larger than a chunk"):
        storage.read("chunks/ab/big")
    # a v2 record is a container of up to 8 MiB of bodies (spec/v2.md), so the storage bound at
    # a record path is the container's; a v1 record past 64 KiB is refused by its parser
    with pytest.raises(FormatError, match="larger than a run record"):
        RunRecord.from_bytes(storage.read("runs/r/00000000000000000001"), what="record")
    assert len(storage.read("chunks/ab/ok")) == MAX_CHUNK_FILE
    with pytest.raises(CorruptObject, match="larger than a chunk"):
        storage.read_many(["chunks/ab/ok", "chunks/ab/big"])
