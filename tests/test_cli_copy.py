"""copy between stores (incremental, verified, resumable after SIGKILL), plain cp -r / rsync -a
copies, and verify catching damage; the CLI runs as a subprocess."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

import ckptfs
from ckptfs.format.names import chunk_path, snapshot_path
from ckptfs.ops.copy import copy_runs
from tests.clihelp import cli, cli_json, make_demo
from tests.test_cli_inspect import COPY_KEYS, VERIFY_KEYS, VERIFY_KEYS_35

#: format v1 layout on purpose: counts loose chunk files; copy into v2: tests/test_v2_layout.py
pytestmark = pytest.mark.layout(1)


def _files(root: str | Path, sub: str) -> set[str]:
    return {os.path.relpath(os.path.join(d, f), root)
            for d, _, fs in os.walk(Path(root) / sub) for f in fs}


def _same_runs(a: str, b: str) -> None:
    sa, sb = ckptfs.open_store(a), ckptfs.open_store(b)
    assert sa.runs() == sb.runs()
    for r in sa.runs():
        assert [s.id for s in sa.snapshots(r)] == [s.id for s in sb.snapshots(r)]
        assert sa.read(r) == sb.read(r)


def test_copy_is_incremental_and_idempotent(tmp_path: Path) -> None:
    src, dst = str(tmp_path / "src"), str(tmp_path / "dst")
    make_demo(src)
    first = cli_json("copy", src, dst, "--run", "agent")
    assert set(first) == COPY_KEYS
    assert first["config_created"] and first["snapshots_copied"] == 6 and first["ok"]
    assert ckptfs.open_store(dst).runs() == ["agent"]
    assert first["chunks_copied"] == len(_files(dst, "chunks"))
    second = cli_json("copy", src, dst)  # now both runs: only debug's record is new
    assert second["snapshots_copied"] == 1 and second["snapshots_present"] == 6
    assert second["chunks_copied"] == 0  # debug@1 shares every chunk with agent@2
    again = cli_json("copy", src, dst)
    assert again["snapshots_copied"] == again["chunks_copied"] == again["bytes_copied"] == 0
    policy = ckptfs.RefPolicy.allow(str(tmp_path))
    run = ckptfs.open_store(src).resume("agent", ref_policy=policy)
    before = _files(dst, "chunks")
    run.checkpoint({**run.state, "note": "x" * 5000}, "step")
    third = cli_json("copy", src, dst)
    assert third["snapshots_copied"] == 1
    assert third["chunks_copied"] == len(_files(dst, "chunks") - before) > 0
    assert cli("verify", dst, "--read-data").returncode == 0
    _same_runs(src, dst)
    assert _files(src, "runs") == _files(dst, "runs")


def test_copy_between_memory_and_local_in_process(tmp_path: Path) -> None:
    mem = f"memory://copy-{uuid.uuid4().hex}"
    src = str(tmp_path / "src")
    make_demo(src)
    rep = copy_runs(ckptfs.open_store(src).repo, ckptfs.open_store(mem).repo)
    assert rep.ok and rep.snapshots_copied == 7
    _same_runs(src, mem)
    back = str(tmp_path / "back")
    rep = copy_runs(ckptfs.open_store(mem).repo, ckptfs.open_store(back).repo, runs=["debug"])
    assert rep.snapshots_copied == 1 and ckptfs.open_store(back).runs() == ["debug"]
    assert ckptfs.open_store(back).read("debug") == ckptfs.open_store(src).read("debug")


def test_copy_local_to_s3_to_local(tmp_path: Path, s3_options: dict[str, object]) -> None:
    """Issue 8: copy through a real S3 API (moto on loopback, s3fs) and back, incrementally."""
    from ckptfs.ops.verify import verify
    from tests.conftest import new_s3_url

    src = str(tmp_path / "src")
    make_demo(src)
    s3 = ckptfs.open_store(new_s3_url(), **s3_options)  # type: ignore[arg-type]
    rep = copy_runs(ckptfs.open_store(src).repo, s3.repo)
    assert rep.ok and rep.snapshots_copied == 7 and rep.chunks_copied > 0
    assert copy_runs(ckptfs.open_store(src).repo, s3.repo).snapshots_copied == 0  # idempotent
    assert verify(s3.repo, read_data=True).ok
    back = str(tmp_path / "back")
    rep = copy_runs(s3.repo, ckptfs.open_store(back).repo)
    assert rep.ok and rep.snapshots_copied == 7
    _same_runs(src, back)
    assert verify(ckptfs.open_store(back).repo, read_data=True).ok


# A real `ckptfs copy` process whose run-record creates are slowed down, so the test can kill
# it for sure between two snapshots; everything else is the real code path.
_SLOW_COPY = """
import sys, time
from ckptfs.storage.local import LocalStorage
create = LocalStorage.create
def slow(self, path, data):
    if path.startswith("runs/"):
        time.sleep(0.25)
    return create(self, path, data)
LocalStorage.create = slow
from ckptfs.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_copy_killed_midway_leaves_a_valid_store_and_resumes(tmp_path: Path) -> None:
    src, dst = str(tmp_path / "src"), str(tmp_path / "dst")
    store = ckptfs.open_store(src)
    run = store.start_run("long")
    for i in range(12):
        run.checkpoint({"i": i, "blob": ckptfs.Blob(os.urandom(20000))}, "step")
    proc = subprocess.Popen([sys.executable, "-c", _SLOW_COPY, "copy", src, dst],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    records = Path(dst) / "runs" / "long"
    deadline = time.monotonic() + 60
    while (not records.is_dir() or len(os.listdir(records)) < 3) and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    seqs = ckptfs.open_store(dst).repo.seqs("long")
    assert 3 <= len(seqs) < 12 and seqs == list(range(1, len(seqs) + 1))  # a prefix
    rep = cli_json("verify", dst, "--read-data")
    assert set(rep) == VERIFY_KEYS | VERIFY_KEYS_35 and rep["ok"] and rep["snapshots"] == len(seqs)
    resumed = cli_json("copy", src, dst)
    assert resumed["snapshots_present"] == len(seqs)
    assert resumed["snapshots_copied"] == 12 - len(seqs)
    assert resumed["chunks_copied"] < len(_files(src, "chunks"))
    assert cli("verify", dst, "--read-data").returncode == 0
    _same_runs(src, dst)


def test_copy_refuses_to_merge_diverged_histories(tmp_path: Path) -> None:
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    for url, value in ((a, 1), (b, 2)):
        r = ckptfs.open_store(url).start_run("r")
        r.checkpoint({"v": 0})
        r.checkpoint({"v": value})
    p = cli("copy", a, b, check=1)
    assert "conflict: run 'r' seq 1 differs between" in p.stdout
    assert ckptfs.open_store(b).read("r") == {"v": 2}  # unchanged


def test_copy_into_a_store_with_other_chunker_params(tmp_path: Path) -> None:
    src, dst = str(tmp_path / "src"), str(tmp_path / "dst")
    make_demo(src)
    small = ckptfs.ChunkerParams(min_size=256, avg_size=1024, max_size=4096)
    ckptfs.open_store(dst, chunker=small).init()
    assert cli_json("copy", src, dst)["snapshots_copied"] == 7
    _same_runs(src, dst)
    d = ckptfs.open_store(dst)
    assert d.repo.config.chunker == small  # the destination keeps its own parameters
    run = d.resume("agent", ref_policy=ckptfs.RefPolicy.allow(str(tmp_path)))
    run.checkpoint({**run.state, "more": "y" * 20000}, "step")
    assert cli("verify", dst, "--read-data").returncode == 0


@pytest.mark.parametrize("tool", ["cp", "rsync"])
def test_plain_directory_copies_are_valid_stores(tmp_path: Path, tool: str) -> None:
    if shutil.which(tool) is None:
        pytest.skip(f"{tool} is not installed (.ci/run installs it)")
    src, dst = str(tmp_path / "src"), str(tmp_path / "dst")
    make_demo(src)
    cmd = ["cp", "-r", src, dst] if tool == "cp" else ["rsync", "-a", src + "/", dst + "/"]
    subprocess.run(cmd, check=True)
    assert cli_json("verify", dst, "--read-data")["ok"]
    _same_runs(src, dst)
    run = ckptfs.open_store(dst, ref_policy=ckptfs.RefPolicy.allow(str(tmp_path))).resume("agent")
    run.checkpoint({**run.state, "after": tool}, "step")
    assert ckptfs.open_store(dst).read("agent")["after"] == tool


def test_verify_names_damaged_runs_and_snapshots(tmp_path: Path) -> None:
    url = str(tmp_path / "s")
    make_demo(url)
    store = ckptfs.open_store(url)
    at3, at6 = store.get("agent@3"), store.get("agent@6")
    report_chunk = at3.manifest.entries["report"].chunks[0]  # type: ignore[union-attr]
    flipped = Path(url) / chunk_path(report_chunk.digest)
    data = bytearray(flipped.read_bytes())
    data[len(data) // 2] ^= 0x01
    flipped.write_bytes(bytes(data))
    assert cli_json("verify", url)["ok"]  # a same-size flip needs --read-data
    rep = cli("verify", url, "--read-data", "--json", check=1)
    import json

    problems = json.loads(rep.stdout)["problems"]
    assert [(p["run"], p["seq"], p["snapshot"], p["category"]) for p in problems] == \
        [("agent", 3, at3.id, "corrupt")]
    msgs = at6.manifest.entries["messages"].chunks  # type: ignore[union-attr]
    (Path(url) / chunk_path(msgs[-1].digest)).unlink()
    manifest = Path(url) / snapshot_path(store.get("debug").digest)
    manifest.write_bytes(manifest.read_bytes()[: manifest.stat().st_size // 2])
    out = cli("verify", url, "--read-data", check=1).stdout
    assert f"agent@6" in out and "missing" in out
    assert "debug@1" in out
    assert f"agent@3" in out and "corrupt" in out
    assert "3 problem(s)" in out


def test_progress_bar_only_on_a_terminal() -> None:
    """In process: nothing on a stream that is no TTY; tqdm's bar when forced (the terminal
    cases run as subprocesses under a pseudo-terminal in tests/test_cli_operator.py)."""
    import io

    from ckptfs.cli.progress import Progress

    buf = io.StringIO()
    with Progress("copy", stream=buf) as bar:  # StringIO is no TTY
        bar(1, 2, "x")
    assert buf.getvalue() == ""
    with Progress("copy", stream=buf, mode="bar") as bar:
        bar(1, 2, "half")
        bar(2, 2, "done")
    assert "copy snapshots:" in buf.getvalue() and "2/2" in buf.getvalue()
    assert buf.getvalue().endswith("\n") and "done" in buf.getvalue()


def test_copy_stops_at_a_damaged_source_chunk_after_committing_what_is_whole(
        tmp_path: Path) -> None:
    """Snapshots go up in groups; a chunk missing from the source stops the copy with the
    snapshots before it committed and nothing of the damaged one (no record, no manifest)."""
    from ckptfs.errors import CorruptSnapshot

    src, dst = str(tmp_path / "src"), str(tmp_path / "dst")
    s = ckptfs.open_store(src)
    run = s.start_run("r")
    for i in range(3):
        run.checkpoint({"data": ckptfs.Blob(os.urandom(100_000)), "i": i})
    third = s.get("r@3")
    mine = {c.digest for c in third.manifest.entries["data"].chunks}  # type: ignore[union-attr]
    os.unlink(Path(src) / chunk_path(sorted(mine)[0]))
    with pytest.raises(CorruptSnapshot, match="seq 3"):
        copy_runs(s.repo, ckptfs.open_store(dst).repo)
    d = ckptfs.open_store(dst)
    assert [x.seq for x in d.snapshots("r")] == [1, 2]
    assert not (Path(dst) / snapshot_path(third.digest)).exists()
    assert cli("verify", dst, "--read-data").returncode == 0
