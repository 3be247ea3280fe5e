"""The retention commands as a user runs them: subprocesses, exit codes, --json."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import ckptfs

SECRET = "CLI-SECRET-51d2"


def ckptfs_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ckptfs.cli", *args], capture_output=True,
                          text=True, timeout=120)


def test_du_forget_gc_expire_erase(tmp_path: Path) -> None:
    root = str(tmp_path / "s")
    store = ckptfs.open_store(root)
    run = store.start_run("user-1")
    msgs: list[str] = []
    for i in range(5):
        msgs.append(f"{SECRET} message {i} " * 40)
        run.checkpoint({"messages": list(msgs)}, entry_labels={"messages": {"pii": "true"}})
    store.start_run("other").checkpoint({"x": "unrelated " * 50}, boundary="final")

    du = json.loads(ckptfs_cli("du", root, "--json").stdout)
    assert du["snapshots"] == 6 and du["dedup_ratio"] > 1
    assert {(p["run"], tuple(p["entries"])) for p in du["pii"]} == {("user-1", ("messages",))}
    assert "personal data: user-1@1 entries messages" in ckptfs_cli("du", root).stdout

    dry = ckptfs_cli("forget", root, "--keep-last", "2", "--dry-run", "--json")
    plan = json.loads(dry.stdout)
    assert dry.returncode == 0 and [f["seq"] for f in plan["forget"]] == [1, 2, 3]
    assert plan["bytes_freed"] > 0 and store.repo.seqs("user-1") == [1, 2, 3, 4, 5]
    assert ckptfs_cli("forget", root, "--keep-last", "2").returncode == 0
    assert store.repo.seqs("user-1") == [4, 5]
    assert ckptfs_cli("forget", root).returncode == 2  # no keep rule: refused

    gc = json.loads(ckptfs_cli("gc", root, "--grace", "0s", "--json").stdout)
    assert gc["manifests_deleted"] == 3

    r = ckptfs_cli("expire", root, "user-1@4", "--in", "0s")
    assert r.returncode == 0, r.stderr
    assert json.loads(ckptfs_cli("du", root, "--json").stdout)["expired"] == 1

    out = ckptfs_cli("erase", root, "user-1", "--reason", "deletion request 17", "--json")
    stone = json.loads(out.stdout)
    assert out.returncode == 0 and stone["state"] == "erased" and len(stone["snapshots"]) == 2
    assert ckptfs_cli("verify", root, "--read-data").returncode == 0
    gone = ckptfs_cli("erase", root, "nobody", "--reason", "x")
    assert gone.returncode == 3 and "nobody" in gone.stderr
    assert store.read("other") == {"x": "unrelated " * 50}


def test_read_commands_refuse_expired_state_unless_allowed(tmp_path: Path) -> None:
    """cat and effects print state data: an expired snapshot (here by a snapshot override, not
    its manifest) is refused with exit 3 / 'expired' unless --allow-expired; log withholds the
    expired snapshots' ledger records; show and diff (metadata only) still work."""
    from ckptfs.ops.expire import set_expiry
    from tests.test_cli_effects import _run_with_effects

    root = str(tmp_path / "s")
    big = _run_with_effects(root)  # x@1 {"a": 1}, x@2..4 ledger steps; k1's result is chunked
    store = ckptfs.open_store(root)
    run = store.resume("x", allow_expired=True)
    run.checkpoint({"a": 2, "blob": ckptfs.Blob(b"B" * 70_000)})  # x@5
    for seq in (4, 5):
        set_expiry(store.repo, f"x@{seq}", 1000)
    assert store.head("x").manifest.expires is None  # only the override says it expired

    refused = ckptfs_cli("cat", root, "x@5", "a")
    assert refused.returncode == 3 and "error (expired)" in refused.stderr
    assert refused.stdout == "" and "--allow-expired" in refused.stderr
    blob = ckptfs_cli("cat", root, "x@5", "blob")
    assert blob.returncode == 3 and blob.stdout == ""
    assert ckptfs_cli("cat", root, "x@5", "a", "--allow-expired").stdout.strip() == "2"
    assert ckptfs_cli("cat", root, "x@1", "a").stdout.strip() == "1"  # not expired: served

    fx = ckptfs_cli("effects", root, "x")
    assert fx.returncode == 3 and "error (expired)" in fx.stderr and big not in fx.stdout
    allowed = json.loads(ckptfs_cli("effects", root, "x", "--allow-expired", "--json").stdout)
    assert {e["key"] for e in allowed["effects"]} == {"k1", "k2"}

    log = json.loads(ckptfs_cli("log", root, "x", "--json").stdout)
    shown = {s["seq"]: s["effects"] for s in log["snapshots"]}
    assert shown[4] is None and shown[5] is None  # withheld: expired
    assert [e["key"] for e in shown[2]] == ["k1"] and shown[3][0]["status"] == "completed"
    assert "effects withheld: snapshot expired" in ckptfs_cli("log", root, "x").stdout
    full = json.loads(ckptfs_cli("log", root, "x", "--json", "--allow-expired").stdout)
    assert [e["key"] for e in full["snapshots"][3]["effects"]] == ["k2"]

    assert ckptfs_cli("show", root, "x@5").returncode == 0
    assert ckptfs_cli("diff", root, "x@1", "x@5").returncode == 0
