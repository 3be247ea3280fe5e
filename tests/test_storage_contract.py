"""The storage contract (ckptfs/storage/base.py), run against every backend of ``store_url``.

Add a backend by adding a param to the ``store_url`` fixture in conftest.py; every test here
then runs on it too. Backend-specific tests at the end use ``backend_kind``.
"""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from ckptfs.errors import InvalidName, StorageError
from ckptfs.storage import Storage, open_storage
from ckptfs.storage.local import LocalStorage
from ckptfs.storage.objects import FsspecStorage

BAD_PATHS = ["", "/abs", "../x", "a/../../b", "a/./b", ".", "..", "a//b", "a/", "a\x00b",
             "a\\b", "/", "chunks/../../etc"]


class TestStorageContract:
    def test_read_missing_raises_file_not_found(self, storage: Storage) -> None:
        with pytest.raises(FileNotFoundError):
            storage.read("chunks/aa/missing")
        assert storage.size("chunks/aa/missing") is None and not storage.exists("chunks/aa/x")

    def test_write_then_read(self, storage: Storage) -> None:
        storage.write("chunks/ab/one", b"payload")
        assert storage.read("chunks/ab/one") == b"payload"
        assert storage.size("chunks/ab/one") == 7 and storage.exists("chunks/ab/one")
        storage.write("chunks/ab/one", b"payload")  # same bytes again: fine
        assert storage.read("chunks/ab/one") == b"payload"
        storage.write("empty", b"")
        assert storage.read("empty") == b"" and storage.size("empty") == 0

    def test_write_many_and_read_many(self, storage: Storage) -> None:
        items = [(f"chunks/{i:02x}/obj{i}", bytes([i]) * (i + 1)) for i in range(20)]
        storage.write_many(items)
        storage.write_many([])
        storage.write_many(items[:3])  # already present: no error, unchanged
        paths = [p for p, _ in items]
        assert storage.read_many(paths) == [d for _, d in items]
        got = storage.read_many([paths[0], "chunks/00/nope", paths[5], "nowhere/x"])
        assert got == [items[0][1], None, items[5][1], None]
        assert storage.read_many([]) == [] and storage.read_many(["nope"]) == [None]

    def test_create_is_create_only(self, storage: Storage) -> None:
        storage.create("runs/r/00000000000000000001", b"first")
        with pytest.raises(FileExistsError):
            storage.create("runs/r/00000000000000000001", b"second")
        assert storage.read("runs/r/00000000000000000001") == b"first"

    def test_concurrent_creates_have_exactly_one_winner(self, storage: Storage) -> None:
        wins: list[int] = []
        losses: list[int] = []
        barrier = threading.Barrier(6)

        def attempt(i: int) -> None:
            barrier.wait()
            try:
                storage.create("runs/r/00000000000000000002", f"writer {i}".encode())
                wins.append(i)
            except FileExistsError:
                losses.append(i)

        threads = [threading.Thread(target=attempt, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(wins) == 1 and len(losses) == 5
        assert storage.read("runs/r/00000000000000000002") == f"writer {wins[0]}".encode()

    def test_replace_overwrites(self, storage: Storage) -> None:
        storage.replace("runs/r/lease", b"one")
        storage.replace("runs/r/lease", b"two, longer")
        assert storage.read("runs/r/lease") == b"two, longer"

    def test_list_gives_immediate_children_sorted(self, storage: Storage) -> None:
        storage.write_many([("runs/b/00000000000000000001", b"1"), ("runs/a/x", b"2"),
                            ("runs/a/y/z", b"3"), ("runs/top", b"4")])
        assert storage.list("runs") == ["a", "b", "top"]
        assert storage.list("runs/a") == ["x", "y"]
        assert storage.list("runs/none") == [] and storage.list("nothing/here") == []
        assert "runs" in storage.list("")
        assert storage.size("runs/a") is None  # a folder is not an object
        assert storage.mtime("runs/a") is None and storage.mtime("runs/top/below") is None

    def test_scan_gives_every_object_below_with_size_and_mtime(self, storage: Storage) -> None:
        storage.write_many([("chunks/aa/one", b"1"), ("chunks/ab/two", b"22"),
                            ("chunks/ab/deep/three", b"333"), ("runs/x", b"4"),
                            ("chunksx/y", b"5")])
        got = storage.scan("chunks")
        assert {p: s.size for p, s in got.items()} == {
            "chunks/aa/one": 1, "chunks/ab/two": 2, "chunks/ab/deep/three": 3}
        for p, st in got.items():
            mt = storage.mtime(p)
            assert st.mtime is not None and mt is not None and abs(st.mtime - mt) < 1.5, p
        assert storage.scan("chunks/ab") == {p: s for p, s in got.items() if "/ab/" in p}
        assert storage.scan("nothing/here") == {} and storage.scan("runs/x") == {}
        assert set(got) | {"runs/x", "chunksx/y"} <= set(storage.scan(""))
        # the default (list + size + mtime per object) agrees with the backend's own
        default = Storage.scan(storage, "chunks")
        assert {p: s.size for p, s in default.items()} == {p: s.size for p, s in got.items()}

    def test_delete(self, storage: Storage) -> None:
        storage.write("chunks/cd/obj", b"x")
        storage.delete("chunks/cd/obj")
        assert not storage.exists("chunks/cd/obj")
        with pytest.raises(FileNotFoundError):
            storage.read("chunks/cd/obj")
        storage.delete("chunks/cd/obj")  # absent is fine
        storage.create("chunks/cd/obj", b"again")  # and the name is free again
        assert storage.read("chunks/cd/obj") == b"again"

    @pytest.mark.parametrize("path", BAD_PATHS)
    def test_paths_that_could_escape_are_refused(self, storage: Storage, path: str) -> None:
        calls = [lambda: storage.read(path), lambda: storage.write(path, b"x"),
                 lambda: storage.create(path, b"x"), lambda: storage.replace(path, b"x"),
                 lambda: storage.delete(path), lambda: storage.size(path),
                 lambda: storage.write_many([("ok/path", b"x"), (path, b"x")]),
                 lambda: storage.read_many(["ok/path", path])]
        if path:
            calls.append(lambda: storage.list(path))
        for call in calls:
            with pytest.raises(InvalidName):
                call()
        assert not storage.exists("ok/path")  # a refused batch wrote nothing


# -- local POSIX only --------------------------------------------------------------------------
@pytest.fixture
def local(tmp_path: Path) -> LocalStorage:
    return LocalStorage(str(tmp_path / "store"))


def test_local_never_follows_a_symlink(local: LocalStorage, tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_bytes(b"outside the store")
    local.write("chunks/aa/real", b"x")
    os.symlink(secret, Path(local.root) / "chunks" / "aa" / "link")
    with pytest.raises(StorageError, match="link"):
        local.read("chunks/aa/link")
    assert local.read_many(["chunks/aa/real"]) == [b"x"]


def test_local_refuses_a_symlinked_folder(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    (outside / "bb").mkdir(parents=True)
    (outside / "bb" / "x").write_bytes(b"outside the store")
    root = tmp_path / "store"
    (root / "chunks").mkdir(parents=True)
    os.symlink(outside / "bb", root / "chunks" / "bb")
    local = LocalStorage(str(root))
    for call in (lambda: local.read("chunks/bb/x"), lambda: local.write("chunks/bb/new", b"y"),
                 lambda: local.list("chunks/bb"), lambda: local.size("chunks/bb/x"),
                 lambda: local.delete("chunks/bb/x")):
        with pytest.raises(StorageError, match="symbolic link"):
            call()
    assert sorted(p.name for p in (outside / "bb").iterdir()) == ["x"]  # nothing leaked out


def test_local_leaves_no_temp_files(local: LocalStorage) -> None:
    local.write_many([(f"chunks/ab/{i}", b"d" * i) for i in range(10)])
    local.create("runs/r/00000000000000000001", b"rec")
    with pytest.raises(FileExistsError):
        local.create("runs/r/00000000000000000001", b"rec2")
    local.replace("runs/r/hint", b"h")
    assert os.listdir(Path(local.root) / "tmp") == []


@pytest.mark.parametrize("fail", ["write", "link", "replace"])
def test_local_failed_writes_leave_nothing(local: LocalStorage, monkeypatch: pytest.MonkeyPatch,
                                           fail: str) -> None:
    local.write("warm/up", b"creates tmp/")

    def boom(*a: object, **k: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, fail, boom)
    with pytest.raises(StorageError, match="No space"):
        if fail == "replace":
            local.replace("runs/r/hint", b"x")
        else:
            local.create("runs/r/00000000000000000001", b"x")
    monkeypatch.undo()
    assert os.listdir(Path(local.root) / "tmp") == []
    assert not local.exists("runs/r/00000000000000000001") and not local.exists("runs/r/hint")


def test_local_temp_files_live_inside_the_store(local: LocalStorage,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    created: list[str] = []
    real_open = os.open

    def spy(path: str, flags: int, *a: object, **k: object) -> int:
        tmpfile = getattr(os, "O_TMPFILE", 0)
        if flags & os.O_CREAT or (tmpfile and flags & tmpfile == tmpfile):
            created.append(path)
        return real_open(path, flags, *a, **k)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", spy)
    local.write_many([("chunks/ab/x", b"x"), ("chunks/cd/y", b"y")])
    local.create("runs/r/00000000000000000001", b"x")
    tmp = os.path.join(local.root, "tmp")
    assert created and all(p == tmp or p.startswith(tmp + os.sep) for p in created)
    assert local.capabilities.create_only and local.capabilities.create_only_how == "link(2)"


def test_local_writes_after_fork_link_the_childs_own_files(local: LocalStorage) -> None:
    """Temp files are linked through /proc/self/fd; a forked child must not reuse the parent's
    descriptor of that folder (it would name the parent's files)."""
    local.write("chunks/aa/parent", b"parent bytes")
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        code = 0
        try:
            local.write("chunks/aa/child", b"child bytes")
        except BaseException:
            code = 1
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert local.read("chunks/aa/child") == b"child bytes"
    assert local.read("chunks/aa/parent") == b"parent bytes"


# -- added by the reliability work: probe, object stores (moto S3), caches, concurrency -------
def test_create_only_is_proven_and_never_empty(storage: Storage) -> None:
    """The first write probes the backend; moto S3, memory and local disk all pass."""
    storage.create("runs/r/00000000000000000001", b"first")
    assert storage.capabilities.create_only, storage.capabilities
    with pytest.raises(ValueError):
        storage.create("runs/r/00000000000000000002", b"")  # never exclusive on s3fs
    assert storage.size("runs/r/00000000000000000002") is None


def test_objects_written_by_another_client_are_seen(backend: tuple[str, dict[str, Any]]) -> None:
    """A listing cached by one client must not hide what another client created since."""
    url, opts = backend
    a = open_storage(url, **opts)
    b = open_storage(url, **({**opts, "skip_instance_cache": True} if opts else opts))
    a.write("snapshots/aa/one", b"1")
    assert a.list("snapshots/aa") == ["one"]
    b.write("snapshots/aa/two", b"22")
    assert a.size("snapshots/aa/two") == 2
    assert a.list("snapshots/aa") == ["one", "two"]


def test_local_url_spellings_get_the_posix_backend(tmp_path: Any) -> None:
    """'local://' is local disk too: it must get link(2) commits, not fsspec's torn 'xb'."""
    for url in (str(tmp_path / "a"), f"file://{tmp_path}/b", f"local://{tmp_path}/c"):
        s = open_storage(url)
        assert isinstance(s, LocalStorage), url
        s.create("runs/r/1", b"x")
        assert s.read("runs/r/1") == b"x"


def test_s3_batches_are_concurrent(s3_options: dict[str, Any]) -> None:
    """write_many and read_many keep many requests in flight on an async filesystem."""
    from tests.conftest import new_s3_url

    storage = open_storage(new_s3_url(), **s3_options)
    assert isinstance(storage, FsspecStorage)
    fs = storage.fs
    state = {"now": 0, "max": 0}

    def counting(fn: Any) -> Any:
        async def wrapped(*args: Any, **kwargs: Any) -> Any:
            state["now"] += 1
            state["max"] = max(state["max"], state["now"])
            try:
                await asyncio.sleep(0)
                return await fn(*args, **kwargs)
            finally:
                state["now"] -= 1
        return wrapped

    orig_pipe, orig_cat = fs._pipe_file, fs._cat_file
    fs._pipe_file, fs._cat_file = counting(orig_pipe), counting(orig_cat)
    try:
        items = [(f"chunks/00/{i:04d}", bytes([i % 256]) * 100) for i in range(64)]
        storage.write_many(items)
        assert state["max"] >= 8, state
        state["max"] = 0
        got = storage.read_many([p for p, _ in items])
        assert state["max"] >= 8, state
        assert got == [d for _, d in items]
    finally:
        fs._pipe_file, fs._cat_file = orig_pipe, orig_cat


# -- the object-store commit path (issue 13): create reads back, the probe never downgrades ----
def test_create_of_bytes_already_present_returns_on_object_stores(
        backend: tuple[str, dict[str, Any]]) -> None:
    """A create that finds exactly its own bytes (its earlier attempt landed, the answer was
    lost) returns normally on fsspec backends; other bytes stay a FileExistsError; local disk's
    link(2) answers definitively and needs no read-back."""
    url, opts = backend
    s = open_storage(url, **opts)
    s.create("runs/r/00000000000000000001", b"mine")
    if isinstance(s, LocalStorage):
        with pytest.raises(FileExistsError):
            s.create("runs/r/00000000000000000001", b"mine")
    else:
        s.create("runs/r/00000000000000000001", b"mine")
    with pytest.raises(FileExistsError):
        s.create("runs/r/00000000000000000001", b"theirs")
    assert s.read("runs/r/00000000000000000001") == b"mine"


def test_single_writer_is_an_explicit_storage_option(s3_options: dict[str, Any],
                                                     tmp_path: Path) -> None:
    """single_writer=True is taken by open_storage (not passed to fsspec); a backend that does
    pass the probe still uses its exclusive creates."""
    from tests.conftest import new_s3_url

    s = open_storage(new_s3_url(), **s3_options, single_writer=True)
    s.create("runs/r/00000000000000000001", b"x")
    assert s.capabilities.create_only
    local = open_storage(str(tmp_path / "st"), single_writer=True)
    assert isinstance(local, LocalStorage)


def test_local_read_allocates_what_the_file_holds_not_its_limit(local: LocalStorage) -> None:
    """A run record may be up to 128 MiB, but reading a 2 KiB one allocates about 2 KiB: the
    read asks for the size fstat gave (plus a byte that shows growth), not the limit (it asked
    for the limit before, which allocated 128 MiB for every record read)."""
    import tracemalloc

    from ckptfs.format.names import record_path

    path = record_path("r", 1)
    local.create(path, b"x" * 2048)
    tracemalloc.start()
    try:
        assert local.read(path) == b"x" * 2048
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 256 * 1024


def test_local_read_of_a_file_that_grows_reads_it_whole_up_to_the_limit(
        local: LocalStorage, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file longer than its fstat said (it grew in between) is read to its end, and one
    past the limit is still refused."""
    from ckptfs.errors import CorruptObject
    from ckptfs.format.names import record_path
    from ckptfs.storage import local as local_mod

    path = record_path("r", 1)
    local.create(path, b"y" * 5000)
    real = os.fstat
    monkeypatch.setattr(local_mod.os, "fstat", lambda fd: os.stat_result(
        (*real(fd)[:6], 100, *real(fd)[7:])))  # st_size 100: "it grew after the fstat"
    assert local.read(path) == b"y" * 5000
    monkeypatch.setattr(local_mod, "stored_size_limit", lambda p: 4096)
    with pytest.raises(CorruptObject, match="larger than"):
        local.read(path)


@pytest.mark.parametrize("how", ["read", "read_range", "open_ranges"])
def test_local_read_stats_an_object_once(
        local: LocalStorage, monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    """Each read of a local object costs one lstat, one open and one fstat (a restore opens a
    dozen small objects; a read took two or three fstats and a Python file object before,
    about twice the time of the system calls it needs)."""
    from ckptfs.format.names import record_path

    path = record_path("r", 1)
    local.create(path, b"w" * 3000)
    local.read(path)  # the folders' link checks: once per folder, not per read
    calls: dict[str, int] = {"fstat": 0, "lstat": 0, "open": 0}
    for name in calls:
        real = getattr(os, name)

        def counted(*a: object, _real: object = real, _name: str = name, **k: object) -> object:
            calls[_name] += 1
            return _real(*a, **k)  # type: ignore[operator]
        monkeypatch.setattr(os, name, counted)
    if how == "read":
        assert local.read(path) == b"w" * 3000
    elif how == "read_range":
        assert local.read_range(path, 10, 20) == b"w" * 10
    else:
        ranges = local.open_ranges(path)
        assert ranges.read(5, 10) == b"w" * 10
        ranges.close()
    monkeypatch.undo()
    assert calls == {"fstat": 1, "lstat": 1, "open": 1}


def test_local_read_range_past_the_end_allocates_what_the_file_holds(
        local: LocalStorage) -> None:
    """A header length that lies (up to 80 MiB on a small file) asks for a range far past the
    end: the read returns what is there and allocates no more."""
    import tracemalloc

    from ckptfs.format.names import record_path

    path = record_path("r", 1)
    local.create(path, b"z" * 3000)
    tracemalloc.start()
    try:
        assert local.read_range(path, 100, 80 * 1024 * 1024) == b"z" * 2900
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 256 * 1024


def test_local_open_ranges_past_the_end_allocate_what_the_file_holds(
        local: LocalStorage) -> None:
    """``open_ranges().read`` is asked for a body's claimed length (up to 16 MiB from a pack
    header that lies): on a small file it returns what is there and allocates no more."""
    import tracemalloc

    from ckptfs.format.names import pack_path
    from ckptfs.format.digest import Digest

    path = pack_path(Digest.of(b"p"))
    local.create(path, b"q" * 3000)
    reader = local.open_ranges(path)
    try:
        tracemalloc.start()
        try:
            assert reader.read(100, 16 * 1024 * 1024) == b"q" * 2900
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    finally:
        reader.close()
    assert peak < 256 * 1024
