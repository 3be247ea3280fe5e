"""The Storage contract, run against every backend: local disk, memory:// and S3 (moto)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from ckptfs.errors import InvalidName
from ckptfs.storage import Storage, open_storage
from ckptfs.storage.local import LocalStorage
from ckptfs.storage.objects import FsspecStorage


@pytest.fixture
def storage(backend: tuple[str, dict[str, Any]]) -> Storage:
    url, opts = backend
    return open_storage(url, **opts)


def test_write_read_list_size_delete(storage: Storage) -> None:
    storage.write("chunks/ab/abc", b"hello")
    storage.write("chunks/ab/abc", b"hello")  # same content again: a no-op
    storage.write_many([("chunks/ab/abd", b"x" * 10), ("chunks/cd/cde", b"y")])
    assert storage.read("chunks/ab/abc") == b"hello"
    assert storage.list("chunks") == ["ab", "cd"]
    assert storage.list("chunks/ab") == ["abc", "abd"]
    assert storage.list("nothing/here") == []
    assert storage.size("chunks/ab/abd") == 10 and storage.size("chunks/ab/zzz") is None
    assert storage.exists("chunks/cd/cde") and not storage.exists("chunks/cd/zzz")
    assert storage.read_many(["chunks/ab/abd", "chunks/zz/none", "chunks/cd/cde"]) == \
        [b"x" * 10, None, b"y"]
    with pytest.raises(FileNotFoundError):
        storage.read("chunks/zz/none")
    storage.delete("chunks/ab/abc")
    storage.delete("chunks/ab/abc")  # absent is fine
    assert storage.size("chunks/ab/abc") is None


def test_create_is_create_only_and_proven(storage: Storage) -> None:
    storage.create("runs/r/00000000000000000001", b"first")
    with pytest.raises(FileExistsError):
        storage.create("runs/r/00000000000000000001", b"second")
    assert storage.read("runs/r/00000000000000000001") == b"first"
    assert storage.capabilities.create_only, storage.capabilities
    with pytest.raises(ValueError):
        storage.create("runs/r/00000000000000000002", b"")  # never exclusive on s3fs
    assert storage.size("runs/r/00000000000000000002") is None


def test_replace_overwrites(storage: Storage) -> None:
    storage.replace("leases/x", b"1")
    storage.replace("leases/x", b"22")
    assert storage.read("leases/x") == b"22"


@pytest.mark.parametrize("bad", ["/etc/passwd", "../x", "a/../../x", "a//b", "./a", "a/.", "",
                                 "a\x00b", "a\\b"])
def test_paths_that_leave_the_root_are_refused(storage: Storage, bad: str) -> None:
    for op in (lambda: storage.read(bad), lambda: storage.write(bad, b"x"),
               lambda: storage.create(bad, b"x"), lambda: storage.delete(bad),
               lambda: storage.size(bad)):
        with pytest.raises(InvalidName):
            op()


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
