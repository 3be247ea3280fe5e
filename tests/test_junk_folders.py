"""A file where the format puts a folder (``runs/x.swp``, ``tombstones/x.swp``: an editor's
swap file named like a run) and a folder where it puts a file (``tombstones/y.cbor/``,
``runs/r/<seq>/``) are names that are not the store's: every reader and maintenance ignores
them and leaves them in place (spec/format.md 3.1). Found by tests/test_ops_stateful.py
("junk-run-folder"): verify, ls, copy and export stopped with StorageError "is a file where a
folder belongs". ``Storage.listing`` tells files from folders from the one listing each backend
makes already."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import ckptfs
from ckptfs.errors import StorageError
from ckptfs.ops.copy import copy_runs
from ckptfs.ops.erase import erase
from ckptfs.ops.export import export_archive
from ckptfs.ops.gc import gc
from ckptfs.ops.retention import forget_snapshots
from ckptfs.ops.verify import verify
from ckptfs.storage import Listing, Storage, open_storage


JUNK = b"junk bytes"


def test_junk_under_tombstones_does_not_stop_copy(tmp_path: Path) -> None:
    """``tombstones/x.swp`` (an editor's swap file) is listed as a run's folder of tombstones:
    copy and export fail on every run ("is a file where a folder belongs"). ``.DS_Store`` and
    ``name~`` there are already ignored."""
    name = "x.swp"
    src = ckptfs.open_store(str(tmp_path / "src"))
    src.start_run("r").checkpoint({"note": "hello"})
    erase(src.repo, "r", reason="make tombstones/ exist")
    src.start_run("s").checkpoint({"note": "kept"})
    (tmp_path / "src" / "tombstones" / name).write_bytes(b"junk bytes")
    dst = ckptfs.open_store(str(tmp_path / "dst"))
    report = copy_runs(src.repo, dst.repo)   # StorageError: "below a file" today
    assert report.ok and dst.read("s") == {"note": "kept"}


def test_junk_named_like_a_run_is_not_a_run(tmp_path: Path) -> None:
    """``runs/x.swp`` is listed as a run, and verify (and listing its snapshots) raises
    StorageError "is a file where a folder belongs" instead of ignoring a name that is not an
    object (format.md 3.1)."""
    store = ckptfs.open_store(str(tmp_path / "s"))
    store.start_run("r").checkpoint({"note": "hello"})
    (tmp_path / "s" / "runs" / "x.swp").write_bytes(b"junk bytes")
    assert store.runs() == ["r"]
    assert verify(store.repo, read_data=True).ok


#: junk the store did not make, each where the other kind belongs
PLACED = {
    "runs/x.swp": "a file named like a run",
    "tombstones/x.swp": "a file named like a run's folder of snapshot tombstones",
    "tombstones/y.cbor/junk": "a folder named like a whole-run tombstone",
    "tombstones/sn/00000000000000000007.cbor/junk": "a folder named like a snapshot tombstone",
    "leases/00000000000000000009/junk": "a folder named like a lease",
    "tmp/old-temp/junk": "a folder in tmp/",
}


def _build(url: str, opts: dict[str, Any]) -> ckptfs.Store:
    store = ckptfs.open_store(url, **opts)
    for run_id in ("keep", "old", "gone", "sn"):
        run = store.start_run(run_id)
        for i in range(3):
            run.checkpoint({"run": run_id, "i": i, "blob": ckptfs.Blob(b"%d" % i * 5000)})
    forget_snapshots(store.repo, {"old": {1}})  # runs/old/retired/
    erase(store.repo, "gone", reason="test")  # tombstones/gone.cbor
    erase(store.repo, "sn", seq=1, reason="test")  # tombstones/sn/
    return store


def _every_operation(store: ckptfs.Store, tmp_path: Path) -> None:
    """ls, log, verify --read-data, copy, export, forget, erase, gc: each succeeds."""
    repo = store.repo
    assert store.runs() == ["gone", "keep", "old", "sn"]  # an erased run is still known
    assert [s.seq for s in store.snapshots("keep")] == [1, 2, 3]
    assert store.read("keep")["i"] == 2
    assert verify(repo, read_data=True).ok
    dst = ckptfs.open_store(str(tmp_path / "dst"))
    assert copy_runs(repo, dst.repo).ok
    assert {"keep", "old", "sn"} <= set(dst.runs()) and dst.read("sn@2")["i"] == 1
    export_archive(repo, str(tmp_path / "out.zip"))
    forget_snapshots(repo, {"keep": {1}})
    erase(repo, "old", reason="test")
    erase(repo, "keep", seq=2, reason="test")
    gc(repo, grace_ms=0)
    assert [s.seq for s in store.snapshots("keep")] == [3]
    assert verify(repo, read_data=True).ok


@pytest.mark.parametrize("path", sorted(PLACED))
def test_junk_of_the_other_kind_is_ignored_and_kept(
        backend: tuple[str, dict[str, Any]], tmp_path: Path, path: str) -> None:
    url, opts = backend
    store = _build(url, opts)
    store.repo.storage.write(path, JUNK)
    _every_operation(store, tmp_path)
    assert store.repo.storage.read(path) == JUNK, f"{PLACED[path]} was changed or deleted"


def test_listing_tells_files_from_folders(backend: tuple[str, dict[str, Any]]) -> None:
    """Every backend's own ``listing`` agrees with the base class's default (``list`` and a
    ``size`` per name) and with ``list``; a name that is a file and a folder on an object store
    is in both."""
    url, opts = backend
    st = open_storage(url, **opts)
    try:
        for p in ("d/a", "d/b/c", "d/e/f/g", "d/h.swp"):
            st.write(p, JUNK)
        want = Listing(("a", "h.swp"), ("b", "e"))
        assert st.listing("d") == want
        assert Storage.listing(st, "d") == want  # the default: list, then size per name
        assert st.list("d") == want.names
        assert st.listing("nothing") == Listing((), ())
        if url.startswith("s3://"):  # S3: a key and a prefix of the same name
            st.write("d/a/x", JUNK)
            assert st.listing("d") == Listing(("a", "h.swp"), ("a", "b", "e"))
    finally:
        st.close()


#: a folder named like a record or a retired marker: on local disk a real folder that occupies
#: the record's name, damage refused with ``storage`` naming it (format.md 9.2; vector
#: store-invalid/record-is-folder), since ignoring it would roll the run back to an older head;
#: on an object store only keys below a name the store never wrote, ignored and kept (3.1)
NAMED_LIKE_A_RECORD = {
    "runs/keep/00000000000000000099/junk": "a folder named like the head record",
    "runs/old/retired/00000000000000000009/junk": "a folder named like a retired marker",
}


@pytest.mark.parametrize("path", sorted(NAMED_LIKE_A_RECORD))
def test_folder_named_like_a_record(
        backend: tuple[str, dict[str, Any]], tmp_path: Path, path: str) -> None:
    """Found by merging branch junkruns over the v2 vectors: ignoring such a folder on local
    disk made ``read`` return the run's older head, where the vector expects an error."""
    url, opts = backend
    store = _build(url, opts)
    store.repo.storage.write(path, JUNK)
    if store.repo.storage.folders_are_real:
        folder = path.rsplit("/", 1)[0]
        with pytest.raises(StorageError, match=f"{folder}: is a folder where a .* belongs"):
            store.read(path.split("/")[1])
    else:
        _every_operation(store, tmp_path)
    assert store.repo.storage.read(path) == JUNK
