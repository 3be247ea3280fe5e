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
