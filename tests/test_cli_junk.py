"""Issue 30 defect 4 as the operator met it, through the CLI as a subprocess: a Finder
``.DS_Store`` in a pack's fan-out folder and under ``moved/`` made ``gc`` and ``erase`` exit 3
on every run, left the erase's tombstone ``erasing`` while ``ls`` said "erased at", kept the
erased content in the pack, and ``verify`` said nothing of the file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import ckptfs
from ckptfs.errors import ErasedError
from ckptfs.format.lifecycle import Tombstone
from ckptfs.format.names import tombstone_path
from ckptfs.ops.gc import gc
from ckptfs.ops.retention import forget_snapshots
from tests.clihelp import cli, cli_json
from tests.retention_helpers import age_tree, files_containing


SECRET = b"DS-STORE-ERASE-SECRET-"
JUNK = b"\x00\x00\x00\x01Bud1\x00\x00\x10\x00"


def _store(root: str) -> None:
    store = ckptfs.open_store(root)
    store.init({"record_bulk_max": 64 * 1024})
    keep = store.start_run("keep")
    for i in range(4):
        keep.checkpoint({"msgs": [f"kept {j} " * 30 for j in range(i * 10 + 1)],
                         "blob": ckptfs.Blob(b"kept-%d-" % i * 30_000)})
    victim = store.start_run("victim")
    for i in range(2):
        victim.checkpoint({"blob": ckptfs.Blob(SECRET * 20_000 + b"%d" % i)})
    forget_snapshots(store.repo, {"keep": {1, 2}})
    gc(store.repo, grace_ms=0)  # forwards under moved/
    age_tree(root, 7200)


def test_ds_store_in_packs_and_moved_stops_neither_gc_nor_erase(tmp_path: Path) -> None:
    root = str(tmp_path / "s")
    _store(root)
    fan = sorted(Path(root, "packs").iterdir())[0]
    junk = [fan / ".DS_Store", Path(root, "moved", ".DS_Store"),
            Path(root, "moved", "runs", "keep", ".DS_Store"), Path(root, "packs", "name~")]
    for p in junk:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(JUNK)
    assert files_containing(root, SECRET)
    out = cli("verify", root, "-v").stdout  # before: 0 problems and not a word of them
    assert out.count(" note  ") == 4 and "fan" not in out, out
    assert cli_json("verify", root)["foreign"] == sorted(
        os.path.relpath(p, root) for p in junk)
    cli("gc", root, "--grace", "0s")  # before: exit 3, "not a digest: '.DS_Store'"
    cli("erase", root, "victim", "--reason", "request 42")  # before: exit 3 on every run
    stone = cli_json("ls", root)["runs"]
    assert {r["run"]: r["status"] for r in stone} == {"keep": "live", "victim": "erased"}
    assert not files_containing(root, SECRET)  # before: the pack still held it
    assert all(p.read_bytes() == JUNK for p in junk)  # never deleted: not ckptfs's
    assert cli_json("verify", root, "--read-data")["ok"]


def test_ls_says_an_unfinished_erase_is_not_finished(tmp_path: Path) -> None:
    """Before: ``ls`` printed "erased at ..." for a tombstone still ``erasing``, the state a
    stopped erase leaves, and readers said "was erased"."""
    root = str(tmp_path / "s")
    _store(root)
    cli("erase", root, "victim", "--reason", "request 42")
    path = Path(root, tombstone_path("victim"))
    done = Tombstone.from_bytes(path.read_bytes(), what="tombstone")
    path.write_bytes(Tombstone(run="victim", seq=None, reason=done.reason,
                               requested=done.requested, snapshots=done.snapshots).to_bytes())
    rows = {r["run"]: r for r in cli_json("ls", root)["runs"]}
    assert rows["victim"]["status"] == "erasing"
    assert "has not finished" in rows["victim"]["status_detail"]
    line = next(x for x in cli("ls", root).stdout.splitlines() if x.startswith("victim"))
    assert "erasing" in line and "erased at" not in line, line
    with pytest.raises(ErasedError, match="has not finished; run 'ckptfs erase'"):
        ckptfs.open_store(root).read("victim")
    cli("erase", root, "victim", "--reason", "request 42")  # running it again finishes it
    assert cli_json("ls", root)["runs"][1]["status"] == "erased"
