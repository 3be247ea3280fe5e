"""copy between stores (incremental, verified, resumable after SIGKILL), plain cp -r / rsync -a
copies, and verify catching damage; the CLI runs as a subprocess."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

import ckptfs
from ckptfs.ops.copy import copy_runs
from tests.clihelp import cli, cli_json, make_demo



def _files(root: str | Path, sub: str) -> set[str]:
    return {os.path.relpath(os.path.join(d, f), root)
            for d, _, fs in os.walk(Path(root) / sub) for f in fs}


def _same_runs(a: str, b: str) -> None:
    sa, sb = ckptfs.open_store(a), ckptfs.open_store(b)
    assert sa.runs() == sb.runs()
    for r in sa.runs():
        assert [s.id for s in sa.snapshots(r)] == [s.id for s in sb.snapshots(r)]
        assert sa.read(r) == sb.read(r)


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


