"""The operator's command line (issue 18), part 2: progress on a terminal, the operator's
ledger actions, restic and fsspec conventions, and output people can read.

Every case runs ``ckptfs`` as a subprocess (under a pseudo-terminal where progress matters)."""

from __future__ import annotations

import json
import random
import os
import subprocess
import sys
from pathlib import Path

import pytest

import ckptfs
from tests.clihelp import cli
from tests.test_cli_operator import _effect_store, _store


# --- progress: bars on a terminal (tqdm), nothing in a pipe, JSON lines when asked ---------

def _under_pty(*argv: str) -> tuple[int, str, str]:
    """Run the CLI with stderr on a pseudo-terminal of 120 columns; (rc, stdout, terminal)."""
    import fcntl
    import pty
    import select
    import struct
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    p = subprocess.Popen([sys.executable, "-m", "ckptfs.cli", *argv], stdout=subprocess.PIPE,
                         stderr=slave, stdin=subprocess.DEVNULL)
    os.close(slave)
    seen = b""
    try:
        while True:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    data = os.read(master, 65536)
                except OSError:  # EIO: the child closed the terminal
                    break
                if not data:
                    break
                seen += data
            elif p.poll() is not None:
                break
        out = p.stdout.read().decode() if p.stdout else ""
        p.wait(timeout=120)
    finally:
        os.close(master)
        if p.stdout:
            p.stdout.close()
    return p.returncode, out, seen.decode(errors="replace")


@pytest.mark.parametrize("command", ["verify", "gc", "copy", "export", "check"])
def test_progress_on_a_terminal_only(tmp_path: Path, command: str) -> None:
    url = _effect_store(tmp_path)
    dest = {"copy": [str(tmp_path / "dst")], "export": [str(tmp_path / "out.tar")]}
    flags = {"verify": ["--read-data"], "gc": ["--dry-run"]}
    argv = [command, url, *dest.get(command, []), *flags.get(command, [])]
    rc, out, term = _under_pty(*argv)
    assert rc == 0, (out, term)
    assert f"{command} read:" in term and "B/s" in term and "objects" in term, term
    if command in ("verify", "copy", "export"):  # they report snapshots: count, rate, ETA
        assert f"{command} snapshots: 100%" in term and " snap/s" in term, term
    assert "Traceback" not in term
    # the same command in a pipe prints no progress at all
    dest = {"copy": [str(tmp_path / "dst2")], "export": [str(tmp_path / "out2.tar")]}
    p = cli(command, url, *dest.get(command, []), *flags.get(command, []))
    assert p.stderr == "", p.stderr


def test_progress_json_lines(tmp_path: Path) -> None:
    url = _effect_store(tmp_path)
    p = cli("verify", url, "--read-data", "--progress", "json")
    lines = [json.loads(line) for line in p.stderr.splitlines()]
    assert lines and lines[-1]["done"] is True and lines[-1]["progress"] == "verify"
    assert all(not x["done"] for x in lines[:-1])
    last = lines[-1]
    assert last["snapshots"] == last["snapshots_total"] == 12
    assert last["bytes_read"] > 0 and last["objects_read"] > 0
    assert set(last) == {"progress", "done", "snapshots", "snapshots_total", "bytes_read",
                         "objects_read", "objects_deleted", "elapsed_s", "bytes_per_s",
                         "eta_s", "note"}
    p = cli("gc", url, "--grace", "0s", "--progress", "json")
    assert json.loads(p.stderr.splitlines()[-1])["done"] is True


# --- operator actions: settle an in-doubt effect, approve / reject a pending approval -----

def _in_doubt_and_pending(url: str) -> None:
    from ckptfs.errors import ApprovalPending, EffectInDoubt

    run = ckptfs.open_store(url).start_run("ops")
    run.checkpoint({"a": 1})

    class Crash(BaseException):
        pass

    def crash() -> None:
        raise Crash

    try:
        run.effect("pay", crash, key="pay-1", timeout=0.001)  # in doubt once its lease is out
    except (Crash, EffectInDoubt):
        pass
    run = ckptfs.open_store(url).resume("ops", lenient_refs=True)
    for key in ("ok-1", "no-1"):
        try:
            run.wait_for_approval({"refund": 10}, key=key)
        except ApprovalPending:
            pass


def test_settle_approve_reject(tmp_path: Path) -> None:
    url = str(tmp_path / "s")
    _in_doubt_and_pending(url)
    before = json.loads(cli("effects", url, "ops", "--json").stdout)
    assert before["in_doubt"] == 1 and before["pending"] == 2
    # refused: not in doubt / not pending / unknown key; nothing is written
    p = cli("settle", url, "ops", "ok-1", "--result", "{}", check=3)
    assert "only an in-doubt effect can be settled" in p.stderr, p.stderr
    p = cli("approve", url, "ops", "pay-1", check=3)
    assert "is an effect, not an approval" in p.stderr, p.stderr
    cli("reject", url, "ops", "nope", check=3)
    cli("settle", url, "ops", "pay-1", "--result", "{not json", check=2)
    cli("settle", url, "ops", "pay-1", check=2)  # one of --result / --failed is required
    assert json.loads(cli("effects", url, "ops", "--json").stdout)["head_seq"] == \
        before["head_seq"]
    # done, as the API records it
    out = json.loads(cli("settle", url, "ops", "pay-1", "--result", '{"id": "tx-9"}',
                         "--json").stdout)
    assert out["effect"]["status"] == "completed" and out["effect"]["via"] == "manual"
    assert out["effect"]["result"] == {"id": "tx-9"} and out["snapshot"]["boundary"] == \
        "after_effect"
    assert "approved ok-1 of ops" in cli("effects", "approve", url, "ops", "ok-1",
                                         "--decision", '{"amount": 10}').stdout
    cli("reject", url, "ops", "no-1", "--reason", "too much")
    cli("approve", url, "ops", "ok-1", check=3)  # decided once
    after = json.loads(cli("effects", url, "ops", "--json").stdout)
    assert after["in_doubt"] == 0 and after["pending"] == 0
    by_key = {e["key"]: e for e in after["effects"]}
    assert by_key["ok-1"]["result"] == {"approved": True, "decision": {"amount": 10}}
    assert by_key["no-1"]["result"] == {"approved": False, "decision": "too much"}
    # a resumed run reads the decisions and the settled result
    run = ckptfs.open_store(url).resume("ops")
    assert run.wait_for_approval({"refund": 10}, key="ok-1").approved is True
    assert run.wait_for_approval({"refund": 10}, key="no-1").approved is False
    assert run.effect("pay", lambda: 1 / 0, key="pay-1") == {"id": "tx-9"}


def test_settle_failed(tmp_path: Path) -> None:
    url = str(tmp_path / "s")
    _in_doubt_and_pending(url)
    cli("settle", url, "ops", "pay-1", "--failed", "provider says no such payment")
    eff = {e["key"]: e for e in json.loads(cli("effects", url, "ops", "--json").stdout)
           ["effects"]}["pay-1"]
    assert eff["status"] == "failed" and "no such payment" in json.dumps(eff["error"])


# --- conventions from restic and fsspec: CKPTFS_STORE, -o, storage_options=, --create-bucket -

def test_store_from_the_environment(tmp_path: Path) -> None:
    url = _store(tmp_path, runs=("loop", "other"))
    env = {**os.environ, "CKPTFS_STORE": url}
    out = json.loads(cli("ls", "--json", env=env).stdout)
    assert [r["run"] for r in out["runs"]] == ["loop", "other"]
    assert "loop  (schema" in cli("log", "loop", env=env).stdout
    assert json.loads(cli("verify", "--run", "other", "--json", env=env).stdout)["snapshots"] == 3
    # a STORE on the command line wins; without either, the usual usage error
    other = _store(tmp_path / "b", runs=("solo",))
    assert "solo" in cli("ls", other, env=env).stdout
    env.pop("CKPTFS_STORE")
    p = cli("log", "loop", env=env, check=2)
    assert "required: RUN" in p.stderr or "required" in p.stderr


def _s3_env_without_credentials(s3: dict[str, object], tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update({"AWS_ENDPOINT_URL_S3": str(s3["endpoint_url"]), "AWS_EC2_METADATA_DISABLED": "true",
                "AWS_DEFAULT_REGION": "us-east-1", "AWS_CONFIG_FILE": str(tmp_path / "none"),
                "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"), "HOME": str(tmp_path)})
    return env


def test_backend_options_on_the_command_line(s3_options: dict[str, object], tmp_path: Path
                                             ) -> None:
    from tests.conftest import S3_BUCKET

    url = f"s3://{S3_BUCKET}/opt-{tmp_path.name}"
    ckptfs.open_store(url, storage_options=s3_options).start_run("r").checkpoint({"x": 1})
    env = _s3_env_without_credentials(s3_options, tmp_path)
    p = cli("ls", url, env=env, check=3)  # no credentials anywhere: refused
    creds = ["-o", "key=testing", "-o", "secret=testing",
             "-o", "client_kwargs.region_name=us-east-1"]
    assert "r " in cli("ls", url, *creds, env=env).stdout          # after the command
    assert "r " in cli(*creds, "ls", url, env=env).stdout          # or before it, like restic
    assert json.loads(cli("verify", url, *creds, "--json", env=env).stdout)["ok"]
    p = cli("ls", url, "-o", "novalue", env=env, check=2)
    assert "KEY=VALUE" in p.stderr
    # a local store beside it is opened without them
    local = _store(tmp_path)
    cli("copy", url, local, *creds, env=env)
    assert "r " in cli("ls", local).stdout


def test_dash_o_means_a_backend_option_on_cat_too(s3_options: dict[str, object],
                                                  tmp_path: Path) -> None:
    """issue 35 item 4: on ``cat``, -o was the output file, so ``cat s3://... -o
    endpoint_url=...`` wrote a file named after the option and tried real AWS. It is now a
    backend option there as on every command; the old spelling fails naming --output."""
    from tests.conftest import S3_BUCKET

    url = f"s3://{S3_BUCKET}/cat-{tmp_path.name}"
    ckptfs.open_store(url, storage_options=s3_options).start_run("r").checkpoint({"x": 41})
    env = _s3_env_without_credentials(s3_options, tmp_path)
    creds = ["-o", "key=testing", "-o", "secret=testing",
             "-o", "client_kwargs.region_name=us-east-1"]
    assert json.loads(cli("cat", url, "r@1", "x", *creds, env=env).stdout) == 41
    out = tmp_path / "x.json"
    cli("cat", url, "r@1", "x", *creds, "--output", str(out), env=env)
    assert json.loads(out.read_text()) == 41
    p = cli("cat", url, "r@1", "x", *creds, "-o", str(out), env=env, check=2)
    assert "--output FILE" in p.stderr and "KEY=VALUE" in p.stderr
    assert not list(tmp_path.glob("endpoint_url*"))


def test_open_store_storage_options_and_filesystem(s3_options: dict[str, object],
                                                   tmp_path: Path) -> None:
    import fsspec

    from ckptfs.errors import InvalidArgument
    from tests.conftest import S3_BUCKET

    url = f"s3://{S3_BUCKET}/api-{tmp_path.name}"
    ckptfs.open_store(url, storage_options=s3_options).start_run("r").checkpoint({"x": 1})
    assert ckptfs.open_store(url, **s3_options).runs() == ["r"]         # keyword arguments
    fs = fsspec.filesystem("s3", **s3_options)
    assert ckptfs.open_store(url, filesystem=fs).runs() == ["r"]        # an fsspec object
    assert ckptfs.open_store(url[len("s3://"):], filesystem=fs).runs() == ["r"]
    with pytest.raises(InvalidArgument):
        ckptfs.open_store(url, storage_options={"anon": False}, anon=True)
    local = fsspec.filesystem("file")
    ckptfs.open_store(str(tmp_path / "l"), filesystem=local).start_run("x").checkpoint({"y": 1})
    assert ckptfs.open_store(str(tmp_path / "l")).runs() == ["x"]


def test_init_create_bucket(s3_options: dict[str, object], tmp_path: Path) -> None:
    import uuid

    url = f"s3://made-{uuid.uuid4().hex[:12]}/p"
    p = cli("init", url, check=3)
    assert "does not exist" in p.stderr
    out = cli("init", url, "--create-bucket")
    assert "bucket created: s3://made-" in out.stdout and "store created" in out.stdout
    again = json.loads(cli("init", url, "--create-bucket", "--json").stdout)
    assert again["created"] is False and again["bucket_created"] is False
    p = cli("init", str(tmp_path / "x"), "--create-bucket", check=2)
    assert "object-store" in p.stderr


# --- forget --keep-hourly/daily/weekly/monthly/yearly (restic) -----------------------------

def _dated_store(tmp_path: Path) -> str:
    import datetime

    url = str(tmp_path / "store")
    t0 = int(datetime.datetime(2026, 3, 2, tzinfo=datetime.timezone.utc).timestamp() * 1000)
    hour, day = 3_600_000, 86_400_000
    now = [t0]
    run = ckptfs.open_store(url, clock=lambda: now[0]).start_run("r")
    for offset in (0, hour, 2 * hour, day, day + hour, 2 * day, 10 * day):  # seqs 1..7
        now[0] = t0 + offset
        run.checkpoint({"t": offset})
    return url


@pytest.mark.parametrize("flags, kept", [
    (["--keep-daily", "2"], [6, 7]),
    (["--keep-daily", "3"], [5, 6, 7]),
    (["--keep-hourly", "4"], [4, 5, 6, 7]),
    (["--keep-weekly", "2"], [6, 7]),        # 2026-03-02 is a Monday: @1..@6 one ISO week
    (["--keep-monthly", "1"], [7]),
    (["--keep-yearly", "5"], [7]),
    (["--keep-daily", "1", "--keep-last", "2"], [6, 7]),
])
def test_forget_keep_periods(tmp_path: Path, flags: list[str], kept: list[int]) -> None:
    url = _dated_store(tmp_path)
    out = json.loads(cli("forget", url, *flags, "--dry-run", "--json").stdout)
    assert [k["seq"] for k in out["keep"]] == kept, out
    assert [f["seq"] for f in out["forget"]] == [s for s in range(1, 8) if s not in kept]
    cli("forget", url, "--keep-daily", "0", check=2)


def test_forget_keep_daily_applies(tmp_path: Path) -> None:
    url = _dated_store(tmp_path)
    cli("forget", url, "--keep-daily", "2")
    assert [s["seq"] for s in json.loads(cli("log", url, "r", "--json").stdout)["snapshots"]] \
        == [6, 7]


# --- output people can read: units, grammar, summaries, grouping, ls states, log -n -------

def test_du_and_gc_speak_human_units(tmp_path: Path) -> None:
    url = _effect_store(tmp_path)
    du = cli("du", url).stdout
    assert " KiB" in du and "T" in du.splitlines()[1] and "Z" in du.splitlines()[1], du
    total = du.splitlines()[-1]
    assert "B stored" in total and "bytes" not in total and "snapshot(s)" not in total, total
    gc = cli("gc", url, "--dry-run").stdout
    assert "3600000" not in gc and " ms" not in gc and "(s)" not in gc, gc
    assert "nothing to free" in gc and "stray record" not in gc, gc  # issue 35 item 2


def test_forget_summary_prune_and_when_space_is_free(tmp_path: Path) -> None:
    url = _store(tmp_path, runs=("a", "b"), steps=6)
    out = cli("forget", url, "--keep-last", "2", "--dry-run").stdout
    lines = out.splitlines()
    assert lines[:2] == ["would forget 4 snapshots of a (@1..@4)",
                         "would forget 4 snapshots of b (@1..@4)"], out
    assert lines[-1].startswith("would forget 8 snapshots of 2 runs, kept 4; gc would then free")
    assert "(s)" not in out and "bytes" not in out
    verbose = cli("forget", url, "--keep-last", "2", "--dry-run", "-v").stdout
    assert sum(line.startswith("would forget  a@") for line in verbose.splitlines()) == 4
    # forget --prune runs gc: the snapshots are minutes old, so their data waits out the grace
    # period, and the summary says until when instead of a bare "0 bytes"
    out = cli("forget", url, "--keep-last", "2", "--prune").stdout
    assert "forgot 8 snapshots of 2 runs" in out, out
    prune = [line for line in out.splitlines() if line.startswith("prune: ")]
    assert prune and "grace period" in out and "a gc run after 20" in out, out
    got = json.loads(cli("forget", url, "--keep-last", "1", "--prune", "--json").stdout)
    assert got["prune"]["young_kept"] > 0 and len(got["forget"]) == 2
    assert json.loads(cli("gc", url, "--grace", "0s", "--json").stdout)["bytes_freed"] > 0


def test_verify_groups_a_problem_by_object(tmp_path: Path) -> None:
    url = str(tmp_path / "store")
    store = ckptfs.open_store(url)
    store.init(settings={"record_bulk_max": 4096})  # the shared chunk goes to a pack
    run = store.start_run("r")
    big = random.Random(7).randbytes(20_000).hex()  # chunks every snapshot keeps
    for i in range(12):
        run.checkpoint({"doc": big, "i": i})
    packs = [p for p in (Path(url) / "packs").rglob("*") if p.is_file()]
    assert len(packs) == 1, packs
    packs[0].unlink()
    out = cli("verify", url, check=1).stdout
    lines = [line for line in out.splitlines() if "missing" in line]
    assert len(lines) == 1, out
    assert "12 snapshots: r@1, r@2, r@3, r@4, r@5, and 7 more (-v lists them)" in lines[0], out
    assert "12 problem(s)" in out  # the count stays that of the JSON list
    verbose = cli("verify", url, "-v", check=1).stdout
    assert "r@12" in verbose and "more" not in verbose
    assert len(json.loads(cli("verify", url, "--json", check=1).stdout)["problems"]) == 12


def test_verify_read_data_subset(tmp_path: Path) -> None:
    url = _store(tmp_path, steps=20)
    full = json.loads(cli("verify", url, "--read-data", "--json").stdout)
    none = json.loads(cli("verify", url, "--json").stdout)
    part = json.loads(cli("verify", url, "--read-data-subset", "100%", "--json").stdout)
    assert none["bytes_read"] == 0 and part["bytes_read"] == full["bytes_read"] > 0
    some = json.loads(cli("verify", url, "--read-data-subset", "50%", "--json").stdout)
    assert 0 <= some["bytes_read"] <= full["bytes_read"]
    for bad in ("0%", "150%", "x"):
        cli("verify", url, "--read-data-subset", bad, check=2)


def test_ls_says_which_runs_are_erased_or_forgotten(tmp_path: Path) -> None:
    url = _store(tmp_path, runs=("a", "b", "c"))
    cli("erase", url, "b", "--reason", "request 7")
    cli("forget", url, "--keep-last", "1", "--run", "a")
    rows = {r["run"]: r for r in json.loads(cli("ls", url, "--json").stdout)["runs"]}
    assert rows["a"]["status"] == "live" and rows["a"]["status_detail"] is None
    assert rows["b"]["status"] == "erased" and "request 7" in rows["b"]["status_detail"]
    text = {line.split()[0]: line for line in cli("ls", url).stdout.splitlines()[1:]}
    assert "erased at 20" in text["b"], text


def test_ls_forgotten_run(tmp_path: Path) -> None:
    url = str(tmp_path / "store")
    run = ckptfs.open_store(url).start_run("done")
    run.checkpoint({"x": 1}, "final")
    run.checkpoint({"x": 2}, "final")
    cli("forget", url, "--keep-unfinished-heads")  # the head is final: the whole run goes
    row = json.loads(cli("ls", url, "--json").stdout)["runs"][0]
    assert row["status"] == "forgotten", row
    assert cli("ls", url).stdout.splitlines()[1].rstrip().endswith("forgotten")


def test_log_latest(tmp_path: Path) -> None:
    url = _store(tmp_path, steps=6)
    text = cli("log", url, "loop", "-n", "2").stdout
    assert "6 snapshots, newest 2 shown" in text and "@5" in text and "@4 " not in text, text
    out = json.loads(cli("log", url, "loop", "--latest", "2", "--json").stdout)
    assert [s["seq"] for s in out["snapshots"]] == [5, 6] and out["total_snapshots"] == 6
    cli("log", url, "loop", "-n", "0", check=2)


def test_help_says_which_is_restics_check() -> None:
    top = cli("--help").stdout
    assert "restic's 'check'" in top and "CKPTFS_STORE" in top
    assert "ckptfs verify" in cli("check", "--help").stdout.replace("\n", " ")
    assert "--read-data-subset" in cli("verify", "--help").stdout
    for cmd in ("forget", "init", "settle", "approve", "reject", "gc", "copy"):
        assert cli(cmd, "--help").returncode == 0
