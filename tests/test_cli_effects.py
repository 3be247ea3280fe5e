"""effects and log over a run's effect ledger; copy and verify follow the ledger's chunks."""

from __future__ import annotations

import os
from pathlib import Path


import ckptfs
from ckptfs.errors import EffectInDoubt
from ckptfs.format.names import chunk_path
from ckptfs.ops.chunks import snapshot_chunks
from tests.clihelp import cli, cli_json

EFFECTS_KEYS = {"run", "head_seq", "head", "records", "in_doubt", "running", "pending",
                "effects"}


def _run_with_effects(url: str) -> str:
    """k1 completed with a result big enough to be chunked; k2 issued and never settled."""
    run = ckptfs.open_store(url).start_run("x")
    run.checkpoint({"a": 1})
    big = os.urandom(150_000).hex()
    run.effect("fetch", lambda: big, key="k1")

    class Crash(BaseException):
        pass

    def crash() -> None:
        raise Crash

    try:
        run.effect("pay", crash, key="k2", timeout=0.001)  # lease over: in doubt at once
    except (Crash, EffectInDoubt):  # the 1 ms lease may run out before the call starts
        pass
    return big


def test_effects_and_log_flag_in_doubt(tmp_path: Path) -> None:
    url = str(tmp_path / "s")
    _run_with_effects(url)
    out = cli_json("effects", url, "x")
    assert set(out) == EFFECTS_KEYS and out["in_doubt"] == 1 and out["records"] == 3
    by_key = {e["key"]: e for e in out["effects"]}
    assert by_key["k2"]["in_doubt"] and by_key["k2"]["status"] == "intended"
    assert by_key["k1"]["status"] == "completed" and not by_key["k1"]["in_doubt"]
    assert out["running"] == 0 and not by_key["k2"]["running"]
    text = cli("effects", url, "x").stdout
    assert text.splitlines()[2].startswith("IN DOUBT") and "1 in doubt," in text
    log = cli_json("log", url, "x")
    per_seq = {s["seq"]: [(e["key"], e["status"], e["in_doubt"]) for e in s["effects"]]
               for s in log["snapshots"]}
    assert per_seq == {1: [], 2: [("k1", "intended", False)], 3: [("k1", "completed", False)],
                       4: [("k2", "intended", True)]}
    assert "! effect k2  pay  intended" in cli("log", url, "x").stdout


def test_gc_keeps_the_ledger_and_its_results(tmp_path: Path) -> None:
    url = str(tmp_path / "s")
    run = ckptfs.open_store(url).start_run("r")
    for i in range(40):  # enough records for the ledger content to be chunked
        run.effect("note", lambda: "x" * 100, key=f"k{i}")
    big = os.urandom(100_000).hex()
    run.effect("big", lambda: big, key="big")
    cli("gc", url, "--grace", "0s")
    assert cli_json("verify", url, "--read-data")["ok"]
    resumed = ckptfs.open_store(url).resume("r")
    assert resumed.effect("big", lambda: "ran again", key="big") == big


def test_erase_removes_ledger_results_and_keeps_a_forks(tmp_path: Path) -> None:
    url = str(tmp_path / "s")
    store = ckptfs.open_store(url)
    run = store.start_run("r")
    run.checkpoint({"a": 1})
    big = os.urandom(100_000).hex()
    run.effect("big", lambda: big, key="big")
    fork = store.fork("r", "f")  # inherits the ledger, so it shares the result's chunks
    fork.checkpoint(fork.state, "step")
    secret = os.urandom(100_000).hex()
    run.effect("secret", lambda: secret, key="secret")
    secret_chunks = {c.digest for what, c in snapshot_chunks(store.repo, store.head("r"))
                     if what == "(ledger result 'secret')"}
    assert secret_chunks
    cli("erase", url, "r", "--reason", "test: user asked")
    assert not any((Path(url) / chunk_path(d)).exists() for d in secret_chunks)
    assert cli_json("verify", url, "--read-data")["ok"]
    assert ckptfs.open_store(url).resume("f").effect("big", lambda: "again", key="big") == big


def test_effects_shows_an_intent_whose_lease_runs_as_running(tmp_path: Path) -> None:
    """An intent whose lease has not run out is not shown as in doubt only: another process
    may not reconcile it yet (spec/ledger.md 4.1), and the operator must see until when."""
    url = str(tmp_path / "s")
    run = ckptfs.open_store(url).start_run("x")

    class Crash(BaseException):
        pass

    def crash() -> None:
        raise Crash

    try:
        run.effect("pay", crash, key="slow", timeout=3600)
    except Crash:
        pass
    out = cli_json("effects", url, "x")
    (eff,) = out["effects"]
    assert out["in_doubt"] == 1 and out["running"] == 1 and eff["running"]
    assert eff["deadline"] > eff["intended_at"] and eff["owner"]
    text = cli("effects", url, "x").stdout
    assert "1 in doubt (1 still running)" in text
    assert text.splitlines()[2].startswith("RUNNING until ")
