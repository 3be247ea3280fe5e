"""What a new user trips on (issue 35 item 12): bad input to the direct API gets a ckptfs error
that names what to fix, and a wrong path is never silently turned into a store."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import ckptfs
from ckptfs.errors import InvalidArgument, NotAStore
from tests.clihelp import cli


def _listing(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_checkpoint_of_a_list_says_it_takes_a_mapping(tmp_path: Path) -> None:
    run = ckptfs.open_store(str(tmp_path / "s")).start_run("r")
    with pytest.raises(InvalidArgument, match=r"mapping of entry names .* not a list"):
        run.checkpoint([1, 2])  # type: ignore[arg-type]
    assert run.checkpoint({"xs": [1, 2]}).seq == 1  # the run is usable after it


def test_a_missing_blob_file_names_the_entry_and_the_path(tmp_path: Path) -> None:
    run = ckptfs.open_store(str(tmp_path / "s")).start_run("r")
    with pytest.raises(InvalidArgument) as e:
        run.checkpoint({"doc": ckptfs.Blob("nope.pdf")})
    assert "state['doc']" in str(e.value) and "'nope.pdf'" in str(e.value)
    assert isinstance(e.value.__cause__, FileNotFoundError)
    assert ckptfs.open_store(str(tmp_path / "s")).runs() == []  # nothing committed


def test_a_file_is_not_a_store(tmp_path: Path) -> None:
    f = tmp_path / "afile"
    f.write_text("hello")
    with pytest.raises(NotAStore, match="is a file, not a folder"):
        ckptfs.open_store(str(f)).runs()
    p = cli("ls", str(f), check=3)
    assert "is a file, not a folder" in p.stderr and "Restore" not in p.stderr
    assert f.read_text() == "hello"


def test_a_folder_of_other_files_is_not_made_a_store_by_a_checkpoint(tmp_path: Path) -> None:
    folder = tmp_path / "documents"
    folder.mkdir()
    (folder / "report.txt").write_text("mine")
    before = _listing(folder)
    with pytest.raises(NotAStore, match=r"'report.txt'.*ckptfs init"):
        ckptfs.open_store(str(folder)).start_run("r").checkpoint({"x": 1})
    assert _listing(folder) == before  # nothing written there
    # on purpose, it can be: init, then checkpoints
    cli("init", str(folder))
    ckptfs.open_store(str(folder)).start_run("r").checkpoint({"x": 1})
    assert ckptfs.open_store(str(folder)).read("r") == {"x": 1}
    assert (folder / "report.txt").read_text() == "mine"


def test_hidden_names_and_an_empty_folder_do_not_count(tmp_path: Path) -> None:
    for i, junk in enumerate([[], [".DS_Store"], ["lost+found"]]):
        folder = tmp_path / f"f{i}"
        folder.mkdir()
        for name in junk:
            (folder / name).write_text("") if "." in name else (folder / name).mkdir()
        ckptfs.open_store(str(folder)).start_run("r").checkpoint({"x": i})
        assert ckptfs.open_store(str(folder)).read("r") == {"x": i}


def test_a_memory_prefix_holding_other_objects_is_refused_too() -> None:
    import fsspec

    fs = fsspec.filesystem("memory")
    url = f"memory://new-user-{os.getpid()}"
    fs.pipe(f"{url}/notes/today.txt", b"mine")
    with pytest.raises(NotAStore, match="'notes'"):
        ckptfs.open_store(url).start_run("r").checkpoint({"x": 1})
    assert fs.cat(f"{url}/notes/today.txt") == b"mine"
    fs.rm(url, recursive=True)
