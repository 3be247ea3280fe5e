"""``ckptfs keys rotate`` (issue 33), run as a subprocess: rotates the master key of a keyring
(key file -> key file, -> passphrase from an environment variable), reports progress, and
refuses bad input with a usage or keyring error, changing nothing."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import ckptfs


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("CKPTFS_")}
    return subprocess.run([sys.executable, "-m", "ckptfs", *args], capture_output=True,
                          text=True, env={**full, **(env or {})}, timeout=300)


def tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _store(tmp_path: Path) -> tuple[str, str]:
    url, ring = str(tmp_path / "store"), str(tmp_path / "ring")
    got = cli("init", url, "--encrypt", "--keyring", ring)
    assert got.returncode == 0, got.stderr
    st = ckptfs.open_store(url, keyring=ring)
    st.start_run("a", subject="user-1").checkpoint({"x": 1})
    st.start_run("b").checkpoint({"y": 2})
    return url, ring


def test_rotate_with_progress_and_json(tmp_path: Path) -> None:
    url, ring = _store(tmp_path)
    before = tree(Path(url))
    scopes = len(list((Path(ring) / "scopes").iterdir()))
    got = cli("keys", "rotate", ring, "--progress", "json", "--json")
    assert got.returncode == 0, got.stderr
    out = json.loads(got.stdout)
    assert out["generation"] == 1 and out["scopes_rewrapped"] == scopes == 3  # store, user-1, b
    lines = [json.loads(x) for x in got.stderr.splitlines() if x.startswith("{")]
    assert lines and lines[-1]["progress"] == "rotate" and lines[-1]["done"] is True
    assert lines[-1]["snapshots"] == scopes and lines[-1]["objects_read"] >= scopes
    assert tree(Path(url)) == before  # the store is not rewritten
    assert not (Path(ring) / "master.key").exists()
    ls = cli("ls", url, "--keyring", ring)
    assert ls.returncode == 0 and "a" in ls.stdout, ls.stderr
    assert ckptfs.open_store(url, keyring=ring).read("b") == {"y": 2}


def test_rotate_to_a_passphrase_from_the_environment(tmp_path: Path) -> None:
    url, ring = _store(tmp_path)
    got = cli("keys", "rotate", "--new-passphrase-env", "NEWPW",
              env={"CKPTFS_KEYRING": ring, "NEWPW": "a long new passphrase"})
    assert got.returncode == 0, got.stderr
    assert "generation 0 -> 1" in got.stdout and "passphrase" in got.stdout
    assert "a long new passphrase" not in got.stdout + got.stderr
    no = cli("ls", url, "--keyring", ring)
    assert no.returncode == 3 and "passphrase" in no.stderr
    yes = cli("ls", url, "--keyring", ring,
              env={"CKPTFS_KEYRING_PASSPHRASE": "a long new passphrase"})
    assert yes.returncode == 0, yes.stderr
    again = cli("keys", "rotate", ring, "--json",
                env={"CKPTFS_KEYRING_PASSPHRASE": "a long new passphrase"})
    assert again.returncode == 0 and json.loads(again.stdout)["generation"] == 2, again.stderr
    assert ckptfs.open_store(url, keyring=ring).read("a") == {"x": 1}


def test_bad_input_changes_nothing(tmp_path: Path) -> None:
    url, ring = _store(tmp_path)
    before_ring, before = tree(Path(ring)), tree(Path(url))
    got = cli("keys", "rotate")
    assert got.returncode == 2 and "name the keyring" in got.stderr
    got = cli("keys", "rotate", ring, "--new-passphrase-env", "UNSET_VAR_FOR_TEST")
    assert got.returncode == 2 and "holds no passphrase" in got.stderr
    got = cli("keys", "rotate", str(tmp_path / "not-a-ring"))
    assert got.returncode == 3 and "keyring" in got.stderr
    got = cli("keys")
    assert got.returncode == 2
    (Path(ring) / "master.key").write_bytes(b"CKMK" + bytes(10))  # truncated key file
    got = cli("keys", "rotate", ring)
    assert got.returncode == 3 and "truncated" in got.stderr
    assert tree(Path(url)) == before
    changed = {k for k in before_ring if tree(Path(ring)).get(k) != before_ring[k]}
    assert changed == {"master.key"}  # only what the test itself damaged
