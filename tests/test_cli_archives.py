"""Stores read straight from exported .zip/.tar files and from a plain static HTTP server."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import ckptfs
from tests.clihelp import cli, cli_json, make_demo
from tests.test_cli_inspect import EXPORT_KEYS


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    root = tmp_path_factory.mktemp("arch")
    return root, make_demo(str(root / "store"))


@pytest.mark.parametrize("kind", ["zip", "tar"])
def test_export_gives_a_file_that_is_a_store(demo: tuple[Path, dict[str, Any]], kind: str) -> None:
    root, states = demo
    url, archive = str(root / "store"), str(root / f"one.{kind}")
    rep = cli_json("export", url, archive, "--run", "agent")
    assert set(rep) == EXPORT_KEYS
    assert rep["runs"] == 1 and rep["snapshots"] == 6 and rep["kind"] == kind
    for ref in (archive, f"{kind}://::{archive}"):
        assert [r["run"] for r in cli_json("ls", ref)["runs"]] == ["agent"]
        assert json.loads(cli("cat", ref, "agent@2", "plan").stdout) == states["agent@2"]["plan"]
        assert cli_json("verify", ref, "--read-data")["ok"]
    assert cli("cat", archive, "agent@1", "report", text=False).stdout == \
        states["agent@1"]["report"].read()
    p = cli("fork", archive, "agent@2", "x", check=3)  # read-only
    assert "read-only" in p.stderr and "ckptfs copy" in p.stderr
    back = str(root / f"back-{kind}")
    assert cli_json("copy", archive, back)["snapshots_copied"] == 6
    assert ckptfs.open_store(back).read("agent") == ckptfs.open_store(url).read("agent")


def test_zip_members_are_stored_not_deflated(demo: tuple[Path, dict[str, Any]]) -> None:
    root, _ = demo
    archive = root / "all.zip"
    cli("export", str(root / "store"), str(archive))
    with zipfile.ZipFile(archive) as z:
        names = z.namelist()
        assert all(i.compress_type == zipfile.ZIP_STORED for i in z.infolist())
    assert "ckptfs.cbor" in names and not any(n.startswith("tmp/") for n in names)
    assert any(n.startswith("runs/debug/") for n in names)


def test_a_tar_made_by_hand_with_a_leading_directory_opens(demo: tuple[Path, dict[str, Any]],
                                                          tmp_path: Path) -> None:
    root, _ = demo
    archive = tmp_path / "hand.tar"
    subprocess.run(["tar", "-C", str(root / "store"), "-cf", str(archive), "."], check=True)
    assert {r["run"] for r in cli_json("ls", str(archive))["runs"]} == {"agent", "debug"}


def test_export_refuses_other_suffixes(demo: tuple[Path, dict[str, Any]]) -> None:
    root, _ = demo
    p = cli("export", str(root / "store"), str(root / "x.7z"), check=2)
    assert ".zip or .tar" in p.stderr


@pytest.fixture
def http_root(demo: tuple[Path, dict[str, Any]]) -> Iterator[str]:
    """``python -m http.server`` on 127.0.0.1 serving the demo's folder; stopped afterwards."""
    root, _ = demo
    proc = subprocess.Popen([sys.executable, "-u", "-m", "http.server", "0", "--bind",
                             "127.0.0.1", "--directory", str(root)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None
        m = re.search(r"port (\d+)", proc.stdout.readline())
        assert m, "http.server did not report its port"
        yield f"http://127.0.0.1:{m.group(1)}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_read_a_store_from_a_static_http_server(http_root: str,
                                                demo: tuple[Path, dict[str, Any]]) -> None:
    _, states = demo
    url = f"{http_root}/store"
    rows = {r["run"]: r for r in cli_json("ls", url)["runs"]}
    assert set(rows) == {"agent", "debug"} and rows["agent"]["head_seq"] == 6
    log = cli_json("log", url, "agent")
    assert log["snapshots"][1]["forks"][0]["run"] == "debug"
    assert json.loads(cli("cat", url, "agent@6", "messages").stdout) == \
        states["agent@6"]["messages"]
    assert cli_json("verify", url, "--read-data")["ok"]
    assert cli_json("diff", url, "agent@1", "agent@2")["changed"]
    p = cli("fork", url, "agent@2", "x", check=3)
    assert "read-only" in p.stderr
    p = cli("ls", f"{http_root}/nothing-here", check=3)
    assert "no ckptfs store here" in p.stderr
