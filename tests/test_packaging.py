"""Packaging facts a user relies on: ``python -m ckptfs``, the license, the extras, .gitignore."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_python_dash_m_ckptfs_is_the_cli() -> None:
    p = subprocess.run([sys.executable, "-m", "ckptfs", "--help"], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    for command in ("init", "verify", "gc", "erase", "copy"):
        assert command in p.stdout


def test_license_file_matches_the_metadata() -> None:
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    text = (ROOT / "LICENSE").read_text()
    assert meta["license"]["text"] == "Apache-2.0"
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "License :: OSI Approved :: Apache Software License" in meta["classifiers"]


def test_extras_pull_in_what_they_name() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]

    def names(extra: str) -> set[str]:
        return {re.split(r"[<>=\[ ;]", r, maxsplit=1)[0] for r in extras[extra]}

    assert {"langgraph", "langgraph-checkpoint"} <= names("langgraph")
    assert "s3fs" in names("s3")
    assert "gcsfs" in names("gcs")
    assert "adlfs" in names("azure")


def test_the_demo_store_folder_is_ignored_by_git() -> None:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    p = subprocess.run([sys.executable, "-m", "ckptfs", "demo", "--help"], capture_output=True,
                       text=True, timeout=60)
    m = re.search(r"default \./(\S+?)\)", p.stdout)
    assert m, p.stdout
    ignored = subprocess.run(["git", "check-ignore", "-q", f"{m.group(1)}/"], cwd=ROOT)
    assert ignored.returncode == 0, f"{m.group(1)}/ is not in .gitignore"
