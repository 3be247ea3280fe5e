"""Issue 30 defect 9: one retained record that cannot be read (a byte flipped, truncated, or a
read that fails: here a FIFO in its place, which the local backend refuses as it would an EIO)
is a problem gc reports, by name, in text and JSON, with exit 1; it still forgets expired
snapshots and drops old temp files, and deletes no container (its mark is incomplete, so
nothing the unread record might need may go). RELIABILITY.md "A mark that could not read
everything deletes nothing". Before: an unreadable record raised out of gc (exit 3), and the
runs after it were neither collected nor their temp files dropped."""

from __future__ import annotations

import datetime
import json
import os
from pathlib import Path

import pytest

import ckptfs
from ckptfs.ops.retention import forget_snapshots
from tests.clihelp import cli
from tests.retention_helpers import age_tree



def _store(root: str) -> None:
    store = ckptfs.open_store(root)
    store.init({"record_bulk_max": 64 * 1024})
    for run_id in ("a", "m"):  # "a" lists before the expired run, "m" after it
        run = store.start_run(run_id)
        for i in range(4):
            run.checkpoint({"msgs": [f"{run_id}{j} " * 30 for j in range(i * 10 + 1)],
                            "blob": ckptfs.Blob(b"%s-%d-" % (run_id.encode(), i) * 30_000)})
    forget_snapshots(store.repo, {"m": {1, 2}})  # strays gc would delete, packs it might repack
    c = store.start_run("c")
    c.checkpoint({"t": "short-lived " * 400}, expires_at=datetime.timedelta(seconds=-1))
    c.checkpoint({"t": "short-lived 2 " * 400}, expires_at=datetime.timedelta(seconds=-1))
    Path(root, "tmp").mkdir(exist_ok=True)
    Path(root, "tmp", "crashed-writer.part").write_bytes(b"x" * 4096)
    age_tree(root, 7200)


def _damage(path: Path, how: str) -> None:
    st = path.stat()
    data = bytearray(path.read_bytes())
    path.unlink()
    if how == "fifo":
        os.mkfifo(path)
    else:
        if how == "flip":
            data[20] ^= 0x01
        path.write_bytes(bytes(data[: len(data) // 2] if how == "truncate" else data))
    os.utime(path, (st.st_atime, st.st_mtime))


def _containers(root: str) -> set[str]:
    return {str(p.relative_to(root)) for top in ("packs", "runs") for p in
            Path(root, top).rglob("*") if not p.is_dir() and "retired" not in p.parts
            and p.name != "head"}


@pytest.mark.parametrize("seq", [2, 4], ids=["middle", "head"])
@pytest.mark.parametrize("how", ["flip", "truncate", "fifo"])
@pytest.mark.parametrize("json_out", [False, True], ids=["text", "json"])
def test_gc_reports_an_unreadable_record_and_goes_on(tmp_path: Path, how: str, seq: int,
                                                     json_out: bool) -> None:
    root = str(tmp_path / "s")
    _store(root)
    bad = f"runs/a/{seq:020d}"
    _damage(Path(root, bad), how)
    before = _containers(root)
    p = cli("gc", root, *(["--json"] if json_out else []), check=1)  # 1: problems found
    assert "Traceback" not in p.stderr
    if json_out:
        r = json.loads(p.stdout)
        assert any(x.startswith(f"a@{seq}: ") and bad in x for x in r["problems"]), r
        assert r["expired"] == ["c@1", "c@2"] and r["tmp_deleted"] == 1, r
    else:
        assert f"problem  a@{seq}: " in p.stdout and bad in p.stdout, p.stdout
        assert p.stdout.count("(the file may be truncated or edited)") <= 1, p.stdout
        assert "2 expired snapshots" in p.stdout and "1 temp file" in p.stdout, p.stdout
    assert not Path(root, "tmp", "crashed-writer.part").exists()
    assert _containers(root) == before  # nothing deleted: the mark is incomplete
    # the expired run is forgotten: no snapshot of c is listed any more
    rows = {r["run"]: r for r in json.loads(cli("ls", root, "--json").stdout)["runs"]}
    assert rows["c"]["snapshots"] == 0 and rows["m"]["snapshots"] == 2, rows
