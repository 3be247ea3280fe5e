"""An empty folder is not part of a store (format.md 9.2); and Store() given a path.

A crash between making a run's folder and creating its first record leaves ``runs/<run>/``
with nothing in it. Local disk used to list that as a run: ``Store.runs()`` and ``ckptfs ls``
showed it (as "forgotten") while ``resume`` said there was no such run. On an object store
the folder never exists, so the two backends disagreed about the same crash.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import ckptfs
from ckptfs.storage.local import LocalStorage


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    store = ckptfs.open_store(str(tmp_path / "s"))
    store.start_run("a").checkpoint({"x": 1})
    return tmp_path / "s"


def test_an_empty_run_folder_is_no_run(store_dir: Path) -> None:
    (store_dir / "runs" / "ghost").mkdir()
    (store_dir / "runs" / "ghost2" / "retired").mkdir(parents=True)
    store = ckptfs.open_store(str(store_dir))
    assert store.runs() == ["a"]
    with pytest.raises(ckptfs.errors.NotFound):
        store.resume("ghost")
    # the run id is free: its first commit goes into the leftover folder
    store.start_run("ghost").checkpoint({"y": 2})
    assert store.runs() == ["a", "ghost"]
    assert store.resume("ghost").state == {"y": 2}


def test_ls_does_not_show_an_empty_run_folder(store_dir: Path) -> None:
    (store_dir / "runs" / "ghost").mkdir()
    out = subprocess.run([sys.executable, "-m", "ckptfs", "ls", "--json", str(store_dir)],
                         capture_output=True, text=True, check=True).stdout
    assert [r["run"] for r in json.loads(out)["runs"]] == ["a"]


def test_a_folder_with_a_file_deep_below_is_listed(tmp_path: Path) -> None:
    storage = LocalStorage(str(tmp_path))
    (tmp_path / "runs" / "r" / "retired" / "x").mkdir(parents=True)
    assert storage.list("runs") == []
    (tmp_path / "runs" / "r" / "retired" / "x" / "marker").write_bytes(b"m")
    assert storage.list("runs") == ["r"]
    assert storage.list("runs/r") == ["retired"]


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="needs symlinks")
def test_a_link_below_an_otherwise_empty_folder_still_lists(tmp_path: Path) -> None:
    # the reads after the listing refuse the link; hiding its folder would hide damage
    storage = LocalStorage(str(tmp_path))
    (tmp_path / "runs" / "r").mkdir(parents=True)
    os.symlink("/etc/passwd", tmp_path / "runs" / "r" / "00000000000000000001")
    assert storage.list("runs") == ["r"]


def test_store_given_a_path_says_to_use_open_store(tmp_path: Path) -> None:
    # Store("./s") used to fail later with AttributeError: 'str' object has no attribute 'read'
    with pytest.raises(ckptfs.errors.InvalidArgument, match="open_store"):
        ckptfs.Store(str(tmp_path / "s"))  # type: ignore[arg-type]
    assert not (tmp_path / "s").exists()
