"""``ckptfs copy`` between key regimes (issue 33, spec/encryption.md 7.1), as CLI subprocesses
on local disk and moto S3: a plaintext store copied into an encrypted one (``--encrypt``),
an encrypted store into one with another keyring (``--dst-keyring``), and out of an encrypted
store into a plaintext one only with ``--decrypt``. Snapshot ids as ``ckptfs log`` shows them
are the same on both sides."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import cbor2
import pytest

import ckptfs
from ckptfs.storage.keyring import KeyringError, ScopeErased
from tests.test_encrypted import scan

MARK = "ZQXCOPY" + os.urandom(4).hex()


def cli(*args: str, check: int | None = 0) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CKPTFS_")}
    p = subprocess.run([sys.executable, "-m", "ckptfs", *args], capture_output=True, text=True,
                       env=env, timeout=300)
    if check is not None:
        assert p.returncode == check, p.stdout + p.stderr
    return p


def s3_args(opts: dict[str, Any]) -> list[str]:
    return ["-o", f"endpoint_url={opts['endpoint_url']}", "-o", "key=testing",
            "-o", "secret=testing", "-o", "client_kwargs.region_name=us-east-1"]


def ids(log: str) -> list[str]:
    """The snapshot ids ``ckptfs log`` prints, in order."""
    return re.findall(r"@\d+\s+\S+\s+([0-9a-f]{12})\s", log)


def fill(store: ckptfs.Store, subjects: bool) -> dict[str, dict[str, Any]]:
    """Three runs (two of one subject when ``subjects``), one with a 6 MiB blob (packs)."""
    blob = b"".join(f"{MARK}-blob".encode() + os.urandom(2048) for _ in range(3000))
    kw: list[dict[str, Any]] = ([{"subject": "user-1"}, {"subject": "user-1"}, {}]
                                if subjects else [{}, {}, {}])
    states = {"r1": {"v": f"{MARK}-one", "items": [f"{MARK}-{i}" for i in range(3000)]},
              "r2": {"v": "two", "b": ckptfs.Blob(io.BytesIO(blob))},
              "r3": {"v": "three"}}
    for (run_id, state), k in zip(states.items(), kw):
        run = store.start_run(run_id, **k)
        run.checkpoint({"v": 0})
        run.checkpoint(state)
    out = {r: dict(s) for r, s in states.items()}
    out["r2"]["b"] = blob
    return out


def check_reads(store: ckptfs.Store, want: dict[str, dict[str, Any]]) -> None:
    for run_id, state in want.items():
        got = store.read(run_id)
        if "b" in got:
            got["b"] = got["b"].read()
        assert got == state, run_id


@pytest.mark.parametrize("where", ["local", "s3"])
def test_copy_plaintext_into_an_encrypted_store(tmp_path: Path, where: str,
                                                request: pytest.FixtureRequest) -> None:
    src, ring = str(tmp_path / "plain"), str(tmp_path / "ring")
    want = fill(ckptfs.open_store(src), subjects=False)
    opts: dict[str, Any] = {}
    extra: list[str] = []
    if where == "s3":
        from tests.conftest import new_s3_url

        opts = request.getfixturevalue("s3_options")
        dst, extra = new_s3_url(), s3_args(opts)
    else:
        dst = str(tmp_path / "enc")
    # without --encrypt a keyring is refused for the plaintext source, and says what to do
    p = cli("copy", src, dst, "--keyring", ring, *extra, check=3)
    assert "copy --encrypt" in p.stderr
    p = cli("copy", src, dst, "--encrypt", "--keyring", ring, *extra)
    assert "3 run(s): 6 snapshot(s) copied" in p.stdout
    for run_id in want:
        a = cli("log", src, run_id).stdout
        b = cli("log", dst, run_id, "--keyring", ring, *extra).stdout
        assert ids(a) and ids(a) == ids(b), (a, b)
    enc = ckptfs.open_store(dst, keyring=ring, **opts)
    check_reads(enc, want)
    with pytest.raises(KeyringError):
        ckptfs.open_store(dst, **opts).runs()
    # every run in a key scope of its own (and the store's)
    kinds = sorted(cbor2.loads(p.read_bytes())["kind"] for p in (Path(ring) / "scopes").iterdir())
    assert kinds == ["run", "run", "run", "store"]
    again = cli("copy", src, dst, "--encrypt", "--keyring", ring, *extra).stdout
    assert "0 snapshot(s) copied, 6 already there" in again
    got = cli("verify", dst, "--read-data", "--keyring", ring, *extra)
    assert "0 problem" in got.stdout
    # the copy goes on as an encrypted store: a resume commits under the run's scope
    enc.resume("r3").checkpoint({"v": "four"})
    assert ckptfs.open_store(dst, keyring=ring, **opts).read("r3") == {"v": "four"}
    if where == "local":
        _, _, _, found = scan(Path(dst), [MARK.encode()])
        assert found == set()
        _, _, _, shown = scan(Path(src), [MARK.encode()])
        assert shown  # the control: the plaintext source shows it


def test_copy_between_keyrings_on_s3(tmp_path: Path, s3_options: dict[str, Any]) -> None:
    """An encrypted store on S3 copied to another S3 store with its own keyring: sealed again
    under that keyring's scopes (a subject's runs together), read only with it; erasing the
    subject there (found by its name, which neither keyring holds in the clear) leaves the
    source whole, and a second copy does not bring the erased runs back."""
    from tests.conftest import new_s3_url

    src, dst = new_s3_url(), new_s3_url()
    ring_a, ring_b = str(tmp_path / "ring-a"), str(tmp_path / "ring-b")
    extra = s3_args(s3_options)
    want = fill(ckptfs.open_store(src, keyring=ring_a, **s3_options), subjects=True)
    cli("copy", src, dst, "--keyring", ring_a, "--dst-keyring", ring_b, *extra)
    for run_id in want:
        a = cli("log", src, run_id, "--keyring", ring_a, *extra).stdout
        b = cli("log", dst, run_id, "--keyring", ring_b, *extra).stdout
        assert ids(a) and ids(a) == ids(b)
    check_reads(ckptfs.open_store(dst, keyring=ring_b, **s3_options), want)
    p = cli("ls", dst, "--keyring", ring_a, *extra, check=3)
    assert "not the keyring" in p.stderr
    kinds = sorted(cbor2.loads(p.read_bytes())["kind"]
                   for p in (Path(ring_b) / "scopes").iterdir())
    assert kinds == ["run", "store", "subject"]  # r1 and r2 share user-1's scope there too
    cli("erase", dst, "--subject", "user-1", "--keyring", ring_b, *extra)
    after = ckptfs.open_store(dst, keyring=ring_b, **s3_options)
    assert after.runs() == ["r3"]
    with pytest.raises(ScopeErased):
        after.read("r1")
    cli("verify", "--erased", "user-1", dst, "--keyring", ring_b, *extra)
    check_reads(ckptfs.open_store(src, keyring=ring_a, **s3_options), want)  # its own keys
    p = cli("copy", src, dst, "--keyring", ring_a, "--dst-keyring", ring_b, *extra)
    assert ckptfs.open_store(dst, keyring=ring_b, **s3_options).runs() == ["r3"]
    # a new run of the subject in the copy finds the subject (and its erased scope)
    with pytest.raises(ScopeErased):
        after.start_run("r9", subject="user-1")


def test_copy_out_of_an_encrypted_store_needs_decrypt(tmp_path: Path) -> None:
    src, ring, dst = str(tmp_path / "enc"), str(tmp_path / "ring"), str(tmp_path / "plain")
    want = fill(ckptfs.open_store(src, keyring=ring), subjects=True)
    ckptfs.open_store(dst).init()  # an existing plaintext destination
    before = sorted(p.name for p in Path(dst).rglob("*"))
    p = cli("copy", src, dst, "--keyring", ring, check=3)
    assert "--decrypt" in p.stderr and "in the clear" not in p.stdout
    assert sorted(p.name for p in Path(dst).rglob("*")) == before  # nothing written
    p = cli("copy", src, dst, "--keyring", ring, "--dst-keyring", str(tmp_path / "x"),
            "--decrypt", check=2)
    assert "contradicts" in p.stderr
    cli("copy", src, dst, "--keyring", ring, "--decrypt")
    for run_id in want:
        a = cli("log", src, run_id, "--keyring", ring).stdout
        assert ids(a) and ids(a) == ids(cli("log", dst, run_id).stdout)
    check_reads(ckptfs.open_store(dst), want)
    _, _, _, shown = scan(Path(dst), [MARK.encode()])
    assert shown  # decrypted, as asked
    p = cli("copy", str(tmp_path / "plain"), str(tmp_path / "p2"), "--decrypt", check=3)
    assert "not encrypted" in p.stderr
    from ckptfs.ops.copy import copy_runs

    with pytest.raises(KeyringError, match="--decrypt"):
        copy_runs(ckptfs.open_store(src, keyring=ring).repo,
                  ckptfs.open_store(str(tmp_path / "p3")).repo)


def test_carried_subject_names_survive_a_rotation_and_match_the_cddl(tmp_path: Path) -> None:
    import pycddl

    from ckptfs.ops.copy import copy_runs
    from ckptfs.storage.keyring import open_keyring

    src, dst = str(tmp_path / "a"), str(tmp_path / "b")
    ring_a, ring_b = str(tmp_path / "ring-a"), str(tmp_path / "ring-b")
    s = ckptfs.open_store(src, keyring=ring_a)
    s.start_run("r1", subject="user-7").checkpoint({"v": 1})
    copy_runs(s.repo, ckptfs.open_store(dst, keyring=ring_b).repo)
    cddl = (Path(__file__).parent.parent / "spec" / "ckptfs.cddl").read_text()
    for p in (Path(ring_b) / "indexes").iterdir():
        pycddl.Schema(f"root = enc-index\n{cddl}").validate_cbor(p.read_bytes())
    open_keyring(ring_b).rotate()
    meta = (Path(ring_b) / "keyring.cbor").read_bytes()
    pycddl.Schema(f"root = enc-keyring\n{cddl}").validate_cbor(meta)
    assert not list((Path(ring_b) / "indexes").iterdir())  # the old generation's, deleted
    fresh = ckptfs.open_store(dst, keyring=ring_b)
    fresh.start_run("r2", subject="user-7").checkpoint({"v": 2})  # the carried scope
    names = {p.name.split("-")[0] for p in (Path(dst) / "runs").iterdir()}
    assert len(names) == 1  # r1 and r2: one scope prefix
    from ckptfs.ops.erase_scope import erase_subject

    erase_subject(fresh.storage, "user-7")
    assert ckptfs.open_store(dst, keyring=ring_b).runs() == []
    assert ckptfs.open_store(src, keyring=ring_a).read("r1") == {"v": 1}


def test_copy_under_one_keyring_repacks_into_the_runs_scope(tmp_path: Path) -> None:
    """A copy under the source's keyring whose bodies are repacked (a 3 MiB value, not a
    pack moved whole) failed with ScopeRequired: the new pack had no scope. It is sealed under
    its run's scope now."""
    from ckptfs.ops.copy import copy_runs

    src = ckptfs.open_store(str(tmp_path / "enc"), keyring=str(tmp_path / "ring"))
    big = os.urandom(3 << 20)
    src.start_run("c2", subject="user-1").checkpoint({"c": 2, "big": big})
    rep = copy_runs(src.repo, ckptfs.open_store(str(tmp_path / "dst"),
                                                keyring=src.storage.keyring).repo)
    assert rep.snapshots_copied == 1
    dst = ckptfs.open_store(str(tmp_path / "dst"), keyring=str(tmp_path / "ring"))
    assert dst.read("c2") == {"c": 2, "big": big}
    assert list((tmp_path / "dst" / "packs").rglob("*"))
