"""The operator's command line (issue 18): wrong answers an operator could be misled by.

Every case runs ``ckptfs`` as a subprocess against a real store on local disk."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import ckptfs
from tests.clihelp import cli


def _store(tmp_path: Path, runs: tuple[str, ...] = ("loop",), steps: int = 3) -> str:
    url = str(tmp_path / "store")
    store = ckptfs.open_store(url)
    for run_id in runs:
        run = store.start_run(run_id)
        for i in range(steps):
            run.checkpoint({"x": i, "text": f"step {i} " * 400}, "step")
    return url


# --- 1. an unknown --run is an error everywhere -------------------------------------------

@pytest.mark.parametrize("argv", [
    ["verify"], ["verify", "--read-data"], ["check"], ["du"],
    ["forget", "--keep-last", "1"], ["forget", "--keep-last", "1", "--dry-run"],
    ["copy"], ["export"],
])
def test_unknown_run_is_an_error(tmp_path: Path, argv: list[str]) -> None:
    url = _store(tmp_path)
    extra = {"copy": [str(tmp_path / "dst")], "export": [str(tmp_path / "out.zip")]}
    args = [argv[0], url, *extra.get(argv[0], []), *argv[1:], "--run", "loop1"]
    p = cli(*args, check=3)
    assert "no run 'loop1'" in p.stderr and "ckptfs ls" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr
    # the known run alongside does not make the typo pass either
    p = cli(*args, "--run", "loop", check=3)
    assert "no run 'loop1'" in p.stderr


def test_known_run_still_works(tmp_path: Path) -> None:
    url = _store(tmp_path, runs=("loop", "other"))
    out = json.loads(cli("verify", url, "--run", "loop", "--json").stdout)
    assert out["snapshots"] == 3
    out = json.loads(cli("du", url, "--run", "other", "--json").stdout)
    assert [r["run"] for r in out["runs"]] == ["other"]


# --- 2./3. a store this process cannot write: a ckptfs error, exit 3; dry runs still work --

CHECKPOINT = """
import sys, ckptfs
store = ckptfs.open_store(sys.argv[1])
run = store.resume("loop")
try:
    run.checkpoint({"x": 99}, "step")
except ckptfs.errors.CkptfsError as e:
    print(f"CKPTFS {type(e).__name__} {e.category}: {e}")
    sys.exit(7)
"""


def _as_readonly_mount(store: str) -> list[str]:
    """A command prefix that runs its command with ``store`` bind-mounted read-only in a private
    mount namespace (EROFS); skips unless this is root with ``unshare`` (a non-root user cannot
    mount; the chmod test below covers it)."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("a read-only bind mount needs root and unshare(1); the EACCES test covers "
                    "non-root users")
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True)
    if probe.returncode:
        pytest.skip(f"unshare -m is not permitted here: {probe.stderr!r}")
    return ["unshare", "-m", "sh", "-c",
            f'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@"',
            store]


def _as_denied(store: str) -> list[str]:
    """The store's files and folders made read-only (chmod a-w) and a prefix that runs the
    command without the capabilities that would let root ignore that (EACCES)."""
    for d, dirs, files in os.walk(store):
        for n in [*dirs, *files]:
            p = os.path.join(d, n)
            os.chmod(p, os.stat(p).st_mode & ~0o222)
    os.chmod(store, os.stat(store).st_mode & ~0o222)
    if os.geteuid() != 0:
        return []
    if not shutil.which("setpriv"):
        pytest.skip("root ignores file modes and setpriv(1) is not here to drop its capabilities")
    return ["setpriv", "--inh-caps=-all", "--bounding-set=-all"]


def _restore_modes(store: str) -> None:
    os.chmod(store, 0o755)
    for d, dirs, files in os.walk(store):
        for n in [*dirs, *files]:
            p = os.path.join(d, n)
            os.chmod(p, os.stat(p).st_mode | 0o200)


def _run(prefix: list[str], *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*prefix, *argv], capture_output=True, text=True, timeout=120)


def _unwritable_store_cases(prefix: list[str], url: str, errno_text: str) -> None:
    py = sys.executable
    before = sorted(str(p.relative_to(url)) for p in Path(url).rglob("*"))
    p = _run(prefix, py, "-m", "ckptfs.cli", "fork", url, "loop@2", "newrun")
    assert p.returncode == 3, (p.returncode, p.stdout, p.stderr)
    assert "Traceback" not in p.stderr and "error (storage)" in p.stderr, p.stderr
    assert errno_text in p.stderr and "write" in p.stderr, p.stderr
    p = _run(prefix, py, "-c", CHECKPOINT, url)
    assert p.returncode == 7, (p.returncode, p.stdout, p.stderr)
    assert "CKPTFS StorageError storage:" in p.stdout and errno_text in p.stdout, p.stdout
    # the dry runs need no write access and write nothing
    for argv in (["forget", url, "--keep-last", "1", "--dry-run"],
                 ["gc", url, "--dry-run", "--grace", "0s"],
                 ["verify", url], ["du", url], ["ls", url]):
        p = _run(prefix, py, "-m", "ckptfs.cli", *argv)
        assert p.returncode == 0, (argv, p.returncode, p.stdout, p.stderr)
    p = _run(prefix, py, "-m", "ckptfs.cli", "forget", url, "--keep-last", "1", "--dry-run",
             "--json")
    assert len(json.loads(p.stdout)["forget"]) == 2
    assert sorted(str(p.relative_to(url)) for p in Path(url).rglob("*")) == before


def test_read_only_mount_is_a_store_error(tmp_path: Path) -> None:
    url = _store(tmp_path)
    _unwritable_store_cases(_as_readonly_mount(url), url, "Read-only file system")


def test_no_write_permission_is_a_store_error(tmp_path: Path) -> None:
    url = _store(tmp_path)
    prefix = _as_denied(url)
    try:
        _unwritable_store_cases(prefix, url, "Permission denied")
    finally:
        _restore_modes(url)


# --- 4. du counts every object a snapshot holds: entries', ledger's, ledger results' chunks -

def _effect_store(tmp_path: Path) -> str:
    url = str(tmp_path / "store")
    run = ckptfs.open_store(url).start_run("loop")
    for i in range(4):
        run.checkpoint({"x": i, "text": "a" * (i * 1000)}, "step")
        # a large result is stored in chunks of its own, which the ledger names
        run.effect("pay", lambda i=i: {"ok": "r" * (20000 * (i + 1)), "n": i}, key=f"k{i}")
    return url


def _files(root: Path) -> tuple[int, int]:
    sizes = [p.stat().st_size for p in root.rglob("*") if p.is_file()]
    return len(sizes), sum(sizes)


def test_du_counts_ledger_chunks(tmp_path: Path) -> None:
    url = _effect_store(tmp_path)
    out = json.loads(cli("du", url, "--json").stdout)
    nchunks, chunk_bytes = _files(Path(url) / "chunks")
    _, manifest_bytes = _files(Path(url) / "snapshots")
    assert nchunks > 4  # the store holds ledger and result chunks besides the entries'
    assert out["chunks"] == nchunks
    assert out["stored_bytes"] == chunk_bytes + manifest_bytes
    assert out["runs"][0]["stored_bytes"] == chunk_bytes + manifest_bytes
    text = cli("du", url).stdout
    assert f"{nchunks} chunks" in text, text


# --- 5. log after forget: no made-up fork, earlier records not pinned on the oldest kept ---

def test_log_after_forget(tmp_path: Path) -> None:
    url = str(tmp_path / "store")
    run = ckptfs.open_store(url).start_run("loop")
    run.checkpoint({"x": 1}, "step")                        # @1
    run.effect("pay", lambda: {"ok": 1}, key="k1")         # @2 intended, @3 completed
    run.checkpoint({"x": 2}, "step")                        # @4
    run.effect("pay", lambda: {"ok": 2}, key="k2")         # @5, @6
    run.checkpoint({"x": 3}, "step")                        # @7
    cli("forget", url, "--keep-last", "2")
    text = cli("log", url, "loop").stdout
    assert "forked from" not in text and "not in this store" not in text, text
    assert "@1..@5 forgotten (5 snapshots)" in text, text
    out = json.loads(cli("log", url, "loop", "--json").stdout)
    assert out["forked_from"] is None
    first, last = out["snapshots"]
    assert (first["seq"], first["forgotten_before"], last["forgotten_before"]) == (6, 5, 0)
    # k1's records were appended by forgotten snapshots: they are not shown as @6's own
    lines = text.splitlines()
    at6 = next(i for i, line in enumerate(lines) if "@6 " in line)
    assert "include those of the forgotten snapshots" in "\n".join(lines[at6:at6 + 2]), text
    # a run forked from a snapshot in this store still names it; one whose origin is
    # elsewhere still says so
    cli("fork", url, "loop@7", "child")
    out = json.loads(cli("log", url, "child", "--json").stdout)
    assert out["forked_from"]["run"] == "loop" and out["snapshots"][0]["forgotten_before"] == 0


# --- 6. Ref(expires_at=) takes what checkpoint(expires_at=) takes; milliseconds refused ----

REF_EXPIRY = """
import datetime, json, sys, time, ckptfs
store = ckptfs.open_store(sys.argv[1])
run = store.start_run("refs")
t0 = time.time()
aware = datetime.datetime(2030, 1, 1, tzinfo=datetime.timezone.utc)
refs = {"delta": ckptfs.Ref("file:///x", expires_at=datetime.timedelta(hours=1)),
        "aware": ckptfs.Ref("file:///x", expires_at=aware),
        "secs": ckptfs.Ref("file:///x", expires_at=1_900_000_000)}
snap = run.checkpoint(refs)
out = {n: e.expires for n, e in snap.manifest.entries.items()}
out["t0_ms"] = int(t0 * 1000)
errors = {}
for name, bad in [("millis", int(t0 * 1000)), ("naive", datetime.datetime(2030, 1, 1)),
                  ("text", "tomorrow"), ("nan", float("nan"))]:
    for where in ("ref", "checkpoint"):
        try:
            if where == "ref":
                ckptfs.Ref("file:///x", expires_at=bad)
            else:
                run.checkpoint({"x": 1}, expires_at=bad)
        except ckptfs.errors.CkptfsError as e:
            errors[f"{where}/{name}"] = f"{type(e).__name__}: {e}"
        except Exception as e:
            errors[f"{where}/{name}"] = f"RAW {type(e).__name__}: {e}"
        else:
            errors[f"{where}/{name}"] = "accepted"
print(json.dumps({"expires": out, "errors": errors}))
"""


def test_ref_expires_at_takes_what_checkpoint_takes(tmp_path: Path) -> None:
    p = subprocess.run([sys.executable, "-c", REF_EXPIRY, str(tmp_path / "store")],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout)
    exp = got["expires"]
    assert exp["t0_ms"] + 3_600_000 <= exp["delta"] <= exp["t0_ms"] + 3_600_000 + 60_000
    assert exp["aware"] == 1_893_456_000_000 and exp["secs"] == 1_900_000_000_000
    for key, msg in got["errors"].items():
        assert not msg.startswith(("RAW", "accepted")), (key, msg)
    assert "milliseconds" in got["errors"]["ref/millis"], got["errors"]
    assert "milliseconds" in got["errors"]["checkpoint/millis"], got["errors"]
    assert "time zone" in got["errors"]["ref/naive"], got["errors"]


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
    assert "0 expired snapshots, 0 stray records; would delete 0 manifests" in gc, gc


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
    run = ckptfs.open_store(url).start_run("r")
    big = "shared text " * 3000  # one chunk every snapshot keeps
    for i in range(12):
        run.checkpoint({"doc": big, "i": i})
    from ckptfs.format.names import chunk_path

    snap = ckptfs.open_store(url).head("r")
    doc = snap.manifest.entries["doc"]
    (Path(url) / chunk_path(doc.chunks[0].digest)).unlink()  # type: ignore[union-attr]
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
