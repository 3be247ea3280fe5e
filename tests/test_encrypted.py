"""Encrypted stores (issue 33, spec/encryption.md): end to end on local disk and moto S3, the
byte scan, bad input, and erasure by key destruction reaching copies made before it."""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import subprocess
import sys
from pathlib import Path
import operator
from typing import Annotated, Any, TypedDict

import pytest
import zstandard

import ckptfs
from ckptfs.errors import ApprovalPending, CkptfsError, CorruptObject
from ckptfs.format.crypto import DecryptionError
from ckptfs.ops.erase_scope import erase_subject, verify_erased
from ckptfs.storage import keyring_shards
from ckptfs.storage.keyring import Keyring, KeyringError, ScopeErased
from ckptfs.storage.open import open_storage



def tree(root: Path) -> dict[str, str]:
    """Every file under ``root`` by relative path -> sha256 (to show that nothing changed)."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ckptfs", *args], capture_output=True,
                          text=True, env={**os.environ, **(env or {})}, timeout=300)


def make_store(tmp_path: Path) -> tuple[str, str, ckptfs.Store]:
    url, ring = str(tmp_path / "store"), str(tmp_path / "keyring")
    return url, ring, ckptfs.open_store(url, keyring=ring)


def test_commit_read_resume_fork_local(tmp_path: Path) -> None:
    url, ring, store = make_store(tmp_path)
    run = store.start_run("chat-1", subject="user-42")
    run.checkpoint({"msg": "hello", "n": 1})
    run.checkpoint({"msg": "hello", "n": 2})
    again = ckptfs.open_store(url, keyring=ring)
    assert again.runs() == ["chat-1"]
    assert again.read("chat-1") == {"msg": "hello", "n": 2}
    resumed = again.resume("chat-1")
    assert resumed.state == {"msg": "hello", "n": 2}
    resumed.checkpoint({"msg": "bye", "n": 3})
    fork = again.fork("chat-1@2", "chat-1-fork")
    fork.checkpoint({"msg": "forked"})
    third = ckptfs.open_store(url, keyring=ring)
    assert [s.seq for s in third.snapshots("chat-1")] == [1, 2, 3]
    assert third.read("chat-1-fork") == {"msg": "forked"}
    got = cli("verify", url, "--read-data", "--keyring", ring)
    assert got.returncode == 0, got.stdout + got.stderr
    assert "0 problem" in got.stdout


def test_subject_needs_an_encrypted_store(tmp_path: Path) -> None:
    store = ckptfs.open_store(str(tmp_path / "plain"))
    with pytest.raises(CkptfsError, match="encrypted store"):
        store.start_run("r", subject="user-1")


def test_s3_end_to_end(s3_options: dict[str, Any], tmp_path: Path) -> None:
    from tests.conftest import new_s3_url

    url, ring = new_s3_url(), str(tmp_path / "keyring")
    store = ckptfs.open_store(url, keyring=ring, **s3_options)
    run = store.start_run("s3-run", subject="user-7")
    run.checkpoint({"v": "on s3", "big": os.urandom(64).hex() * 3000})
    again = ckptfs.open_store(url, keyring=ring, **s3_options)
    assert again.read("s3-run")["v"] == "on s3"
    again.resume("s3-run").checkpoint({"v": 2})
    assert [s.seq for s in again.snapshots("s3-run")] == [1, 2]
    with pytest.raises(KeyringError, match="encrypted store"):
        ckptfs.open_store(url, **s3_options).runs()


MARK = "ZQXMARK"


def markers() -> dict[str, str]:
    return {k: f"{MARK}{k}{os.urandom(4).hex()}" for k in
            ("inline", "listitem", "blob", "effect", "approval", "label", "run", "subject",
             "entry", "ledger")}


def scan(root: Path, needles: list[bytes]) -> tuple[int, int, int, set[bytes]]:
    """Look for ``needles`` in every path and file under ``root``: as stored, and inflated
    from every zstd frame magic in it. (files, bytes, frames inflated, needles found)."""
    found: set[bytes] = set()
    files = scanned = inflated = 0
    for p in root.rglob("*"):
        if not p.is_file():
            continue
        files += 1
        rel = str(p.relative_to(root)).encode()
        data = p.read_bytes()
        scanned += len(data)
        views = [rel, data]
        at = data.find(b"\x28\xb5\x2f\xfd")
        while at >= 0:
            try:
                views.append(zstandard.ZstdDecompressor().decompressobj().decompress(data[at:]))
                inflated += 1
            except zstandard.ZstdError:
                pass
            at = data.find(b"\x28\xb5\x2f\xfd", at + 1)
        found.update(n for n in needles for v in views if n in v)
    return files, scanned, inflated, found


def test_byte_scan_no_marker_in_any_object(tmp_path: Path) -> None:
    """Markers in every shape a value takes; none in any stored object or path, read as stored
    or zstd-decompressed. Figures go into the report."""
    m = markers()
    url, ring, store = make_store(tmp_path)
    run_id = f"run-{m['run']}"
    run = store.start_run(run_id, subject=m["subject"])
    blob = b"".join(m["blob"].encode() + os.urandom(4096) for _ in range(2500))  # 10 MiB: packs
    run.checkpoint({"inline": m["inline"],
                    "items": [f"{m['listitem']}-{i}" for i in range(20000)],
                    f"e{m['entry']}": 1,
                    "blob": ckptfs.Blob(io.BytesIO(blob))},
                   labels={"who": m["label"]})
    run.effect("send", lambda: {"sent": m["effect"]}, key="send-1")
    with pytest.raises(ApprovalPending):
        run.wait_for_approval({"refund": m["approval"]}, key="ok-1")
    store2 = ckptfs.open_store(url, keyring=ring)
    assert store2.read(run_id)["inline"] == m["inline"]
    needles = [v.encode() for v in m.values()] + [MARK.encode()]
    files, scanned, inflated, found = scan(tmp_path / "store", needles)
    assert found == set(), found
    # a plaintext store of the same content shows them (so the scan can fail)
    plain = ckptfs.open_store(str(tmp_path / "plain"))
    prun = plain.start_run(run_id)
    prun.checkpoint({"inline": m["inline"], "items": [f"{m['listitem']}-{i}" for i in range(9)]},
                    labels={"who": m["label"]})
    _, _, _, shown = scan(tmp_path / "plain", needles)
    assert {m["inline"].encode(), m["label"].encode(), m["listitem"].encode(),
            m["run"].encode()} <= shown
    packs = [p for p in (tmp_path / "store" / "packs").rglob("*") if p.is_file()]
    assert packs  # the blob went into packs: sealed too
    assert store2.read(run_id)["blob"].read() == blob
    print(f"byte scan: {files} objects ({len(packs)} packs), {scanned} bytes, {inflated} inflated, 0 markers")


@pytest.fixture
def two_runs(tmp_path: Path) -> tuple[str, str]:
    url, ring, store = make_store(tmp_path)
    r = store.start_run("a", subject="user-1")
    r.checkpoint({"x": 1})
    r.checkpoint({"x": 2})
    store.start_run("b").checkpoint({"y": 1})
    return url, ring


def test_wrong_missing_truncated_keyrings_change_nothing(two_runs: tuple[str, str],
                                                         tmp_path: Path) -> None:
    url, ring = two_runs
    before = tree(Path(url))
    other = str(tmp_path / "other-ring")
    ckptfs.open_store(str(tmp_path / "other-store"), keyring=other).start_run("z").checkpoint({})
    with pytest.raises(KeyringError, match="another store"):
        ckptfs.open_store(url, keyring=other)
    with pytest.raises(KeyringError, match="no keyring"):
        ckptfs.open_store(url, keyring=str(tmp_path / "nowhere-ring"))
    with pytest.raises(KeyringError, match="encrypted store"):
        ckptfs.open_store(url).read("a")
    key = Path(ring) / "master.key"
    good = key.read_bytes()
    key.write_bytes(good[:20])
    with pytest.raises(KeyringError, match="truncated"):
        ckptfs.open_store(url, keyring=ring)
    key.write_bytes(good[:36] + bytes(4))
    with pytest.raises(KeyringError, match="truncated or damaged"):
        ckptfs.open_store(url, keyring=ring)
    key.write_bytes(good)
    assert tree(Path(url)) == before
    assert ckptfs.open_store(url, keyring=ring).read("a") == {"x": 2}


def test_passphrase_keyring(tmp_path: Path) -> None:
    st = open_storage(str(tmp_path / "ring"))
    Keyring.create(st, passphrase="correct horse", argon2={"t": 1, "m": 8192, "p": 1})
    url = str(tmp_path / "store")
    store = ckptfs.open_store(url, keyring=str(tmp_path / "ring"), passphrase="correct horse")
    store.start_run("p").checkpoint({"k": "v"})
    assert not (tmp_path / "ring" / "master.key").exists()
    with pytest.raises(KeyringError, match="does not open"):
        ckptfs.open_store(url, keyring=str(tmp_path / "ring"), passphrase="wrong")
    with pytest.raises(KeyringError, match="passphrase"):
        ckptfs.open_store(url, keyring=str(tmp_path / "ring"))
    assert ckptfs.open_store(url, keyring=str(tmp_path / "ring"),
                             passphrase="correct horse").read("p") == {"k": "v"}


def _records(url: str) -> list[Path]:
    return sorted(p for p in (Path(url) / "runs").rglob("*") if p.is_file()
                  and p.name.isdigit())


def test_tampered_swapped_planted_objects_fail_closed(two_runs: tuple[str, str],
                                                      tmp_path: Path) -> None:
    url, ring = two_runs
    recs = _records(url)
    a1, a2 = next(g for g in ([p for p in recs if p.parent == q.parent] for q in recs)
                  if len(g) == 2)
    good1, good2 = a1.read_bytes(), a2.read_bytes()

    def opened() -> ckptfs.Store:
        return ckptfs.open_store(url, keyring=ring)

    # tampered ciphertext: one bit of the last record
    a2.write_bytes(good2[:-1] + bytes([good2[-1] ^ 1]))
    with pytest.raises(DecryptionError, match="does not authenticate"):
        opened().read("a")
    # swapped: record 1's bytes at record 2's path (its own, valid ciphertext)
    a2.write_bytes(good1)
    with pytest.raises(DecryptionError):
        opened().read("a")
    # planted: a plaintext store's record in the encrypted store
    plain = ckptfs.open_store(str(tmp_path / "plain"))
    plain.start_run("a").checkpoint({"x": "evil"})
    a2.write_bytes(_records(str(tmp_path / "plain"))[0].read_bytes())
    with pytest.raises(CorruptObject, match="not a sealed object"):
        opened().read("a")
    # the other run reads on through all of it; restored, "a" reads again
    assert opened().read("b") == {"y": 1}
    a2.write_bytes(good2)
    assert opened().read("a") == {"x": 2}


def test_erasure_reaches_copies_made_before(two_runs: tuple[str, str], tmp_path: Path,
                                            s3_options: dict[str, Any]) -> None:
    import s3fs

    from tests.conftest import new_s3_url

    url, ring = two_runs
    store = ckptfs.open_store(url, keyring=ring)
    store.start_run("a2", subject="user-1").checkpoint({"also": "user-1"})
    copies = [str(tmp_path / "cp")]
    shutil.copytree(url, copies[0])  # cp -r
    if shutil.which("rsync"):
        copies.append(str(tmp_path / "rsync"))
        subprocess.run(["rsync", "-a", url + "/", copies[-1] + "/"], check=True)
    s3 = new_s3_url()  # aws s3 sync: every file, as stored
    fs = s3fs.S3FileSystem(**s3_options)
    for p in Path(url).rglob("*"):
        if p.is_file():
            fs.pipe(f"{s3[5:]}/{p.relative_to(url)}", p.read_bytes())
    backup = str(tmp_path / "keyring-backup")  # a keyring backup taken before the erase
    shutil.copytree(ring, backup)
    rep = erase_subject(store.storage, "user-1")
    assert rep.deleted > 0
    assert ckptfs.open_store(url, keyring=ring).runs() == ["b"]
    for loc in [url, *copies, s3]:
        opts = s3_options if loc.startswith("s3://") else {}
        st = ckptfs.open_store(loc, keyring=ring, **opts)
        assert st.runs() == ["b"]
        for run in ("a", "a2"):
            with pytest.raises(ScopeErased) as e:
                st.read(run)
            assert rep.tombstone in str(e.value) and e.value.tombstone == rep.tombstone
        st.resume("b").checkpoint({"y": 2})
        v = verify_erased(st.storage, "user-1")
        print(f"copy-erasure {loc.rsplit('/', 1)[-1]}: {v.scope_objects} object(s) of the scope, "
              f"{v.scope_opened} open; {v.other_objects} other, {len(v.other_failed)} fail; "
              f"{v.runs_read} run(s), {v.snapshots_read} snapshot(s) read")
        assert v.ok, v.problems
        assert v.scope_opened == 0 and v.runs_read == 1
        if loc != url:
            assert v.scope_objects > 0
    got = cli("verify", "--erased", "user-1", copies[0], "--keyring", ring, "--json")
    assert got.returncode == 0, got.stderr
    assert '"ok": true' in got.stdout
    # the same copy with the keyring backup (which still holds the key) is not erased, and
    # verify says so (exit 1): keyring backups are copies of the data (encryption.md 7)
    got = cli("verify", "--erased", "user-1", copies[0], "--keyring", backup)
    assert got.returncode == 1, got.stdout + got.stderr
    assert "not erased" in got.stdout and "still open" in got.stdout


def test_cli_init_encrypt_and_env(tmp_path: Path) -> None:
    url, ring = str(tmp_path / "s"), str(tmp_path / "k")
    got = cli("init", url, "--encrypt")
    assert got.returncode == 2 and "needs a keyring" in got.stderr
    assert cli("init", url, "--encrypt", "--keyring", ring).returncode == 0
    assert (Path(ring) / "keyring.cbor").exists()
    ckptfs.open_store(url, keyring=ring).start_run("r1", subject="s").checkpoint({"a": 1})
    got = cli("ls", url)
    assert got.returncode == 3 and "keyring" in got.stderr
    got = cli("ls", url, env={"CKPTFS_KEYRING": ring})
    assert got.returncode == 0 and "r1" in got.stdout, got.stderr
    # the environment's keyring never makes a plaintext store encrypted
    plain = str(tmp_path / "plain")
    got = cli("init", plain, env={"CKPTFS_KEYRING": ring})
    assert got.returncode == 0
    ckptfs.open_store(plain).start_run("p").checkpoint({})
    got = cli("erase", url, "--subject", "s", "--keyring", ring)
    assert got.returncode == 0, got.stderr
    assert "destroyed" in got.stdout
    got = cli("verify", "--erased", "s", url, "--keyring", ring)
    assert got.returncode == 0, got.stdout + got.stderr


def test_keyring_and_setting_objects_match_the_cddl(two_runs: tuple[str, str]) -> None:
    import cbor2
    import pycddl

    url, ring = two_runs
    cddl = (Path(__file__).parent.parent / "spec" / "ckptfs.cddl").read_text()

    def schema(root: str) -> pycddl.Schema:
        return pycddl.Schema(f"root = {root}\n{cddl}")

    erase_subject(ckptfs.open_store(url, keyring=ring).storage, "user-1")
    checked = 0
    for sub, root in (("keyring.cbor", "enc-keyring"), ("scopes", "enc-scope-key"),
                      ("names", "enc-name-entry"), ("erased", "enc-erased")):
        for p in [Path(ring) / sub] if sub.endswith(".cbor") else (Path(ring) / sub).iterdir():
            schema(root).validate_cbor(p.read_bytes())
            checked += 1
    for p in (Path(url) / "erased").iterdir():
        schema("enc-erased").validate_cbor(p.read_bytes())
    cfg = cbor2.loads((Path(url) / "ckptfs.cbor").read_bytes())
    schema("store-config").validate_cbor((Path(url) / "ckptfs.cbor").read_bytes())
    schema("enc-setting").validate_cbor(cbor2.dumps(cfg["settings"]["encryption"]))
    assert "encrypted" in cfg["required"]
    with pytest.raises(Exception):
        schema("enc-scope-key").validate_cbor(cbor2.dumps({"kind": "nobody", "key": b"k"}))
    assert checked >= 6


def test_erase_run_destroys_its_own_scope_not_a_subjects(tmp_path: Path) -> None:
    from ckptfs.ops.erase import erase_run

    url, ring, store = make_store(tmp_path)
    store.start_run("own").checkpoint({"v": "own"})
    store.start_run("subj", subject="user-5").checkpoint({"v": "subj"})
    store.start_run("keep").checkpoint({"v": "keep"})
    copy = str(tmp_path / "copy")
    shutil.copytree(url, copy)
    erase_run(store.repo, "own", reason="request 1")
    erase_run(store.repo, "subj", reason="request 2")
    old = ckptfs.open_store(copy, keyring=ring)
    with pytest.raises(ScopeErased):
        old.read("own")  # its own key is gone: the copy cannot open it
    assert old.read("subj") == {"v": "subj"}  # inside a subject's scope: until the subject goes
    assert old.read("keep") == {"v": "keep"}
    with pytest.raises(ScopeErased):
        ckptfs.open_store(url, keyring=ring).start_run("own")  # an erased id is not reused
    erase_subject(ckptfs.open_store(url, keyring=ring).storage, "user-5")
    with pytest.raises(ScopeErased):
        ckptfs.open_store(copy, keyring=ring).read("subj")


def test_copy_between_stores_of_one_keyring(tmp_path: Path) -> None:
    url, ring, store = make_store(tmp_path)
    run = store.start_run("c", subject="user-9")
    blob = os.urandom(9 << 20)
    run.checkpoint({"b": ckptfs.Blob(io.BytesIO(blob)), "v": 1})
    dst = str(tmp_path / "dst")
    got = cli("copy", url, dst, "--keyring", ring)
    assert got.returncode == 0, got.stdout + got.stderr
    assert list((Path(dst) / "packs").rglob("*"))
    d = ckptfs.open_store(dst, keyring=ring)
    assert d.read("c")["b"].read() == blob
    erase_subject(d.storage, "user-9")
    with pytest.raises(ScopeErased):
        ckptfs.open_store(url, keyring=ring).read("c")  # one keyring: erased everywhere


def test_seeded_chunker_native_is_the_python_definition() -> None:
    from ckptfs.format.cdc import ChunkerParams, cut_lengths, cut_lengths_py

    data = os.urandom(200_000)
    p = ChunkerParams(min_size=2048, avg_size=8192, max_size=32768)
    seeded = ChunkerParams(min_size=2048, avg_size=8192, max_size=32768,
                           seed=0x7123456789ABCDEF)
    assert cut_lengths(data, seeded) == cut_lengths_py(data, seeded)
    assert cut_lengths(data, seeded) != cut_lengths(data, p)
    assert seeded.to_cbor() == p.to_cbor()  # the seed never reaches the config


def test_content_confirmation(tmp_path: Path) -> None:
    """An observer with the candidate plaintexts: no candidate's digest, nor any digest of its
    chunks under the public chunker, appears in any stored path or byte; and the store cut
    the value at boundaries other than the public chunker's (its gear table is seeded)."""
    import blake3

    from ckptfs.format.cdc import ChunkerParams, cut_lengths

    cands = [os.urandom(1 << 20) for _ in range(2)]
    url, ring, store = make_store(tmp_path)
    store.start_run("doc").checkpoint({"doc": cands[0]})
    public = ChunkerParams()
    needles: set[bytes] = set()
    for c in cands:
        pieces, at = [], 0
        for n in cut_lengths(c, public):
            pieces.append(c[at:at + n])
            at += n
        for piece in [c, *pieces]:
            d = blake3.blake3(piece).digest()
            needles |= {d, d.hex().encode()}
    _, _, _, found = scan(Path(url), sorted(needles))
    assert found == set()
    # with the key: the stored chunks of the value are not the public chunker's, while a
    # plaintext store's are (the control)
    def sizes(st: ckptfs.Store) -> list[int]:
        return [c.size for c in st.head("doc").manifest.entries["doc"].chunks]

    plain = ckptfs.open_store(str(tmp_path / "plain"))
    plain.start_run("doc").checkpoint({"doc": cands[0]})
    assert len(sizes(plain)) > 4
    assert sizes(plain) == cut_lengths(_content(plain), public)
    assert sizes(ckptfs.open_store(url, keyring=ring)) != sizes(plain)


def _content(st: ckptfs.Store) -> bytes:
    from ckptfs.store.entry_reads import read_content

    return read_content(st.repo.objects, st.head("doc").manifest.entries["doc"], where="doc")


def test_effects_and_approvals_resume(tmp_path: Path) -> None:
    url, ring, store = make_store(tmp_path)
    run = store.start_run("fx", subject="user-3")
    calls: list[int] = []
    assert run.effect("pay", lambda: calls.append(1) or {"paid": 10}, key="pay-1") == {"paid": 10}
    with pytest.raises(ApprovalPending):
        run.wait_for_approval({"refund": 5}, key="ok-1")
    human = ckptfs.open_store(url, keyring=ring).resume("fx")
    human.approve("ok-1", {"by": "ana"})
    again = ckptfs.open_store(url, keyring=ring).resume("fx")
    assert again.effect("pay", lambda: calls.append(2), key="pay-1") == {"paid": 10}
    assert calls == [1]  # the recorded result, not a second call
    assert again.wait_for_approval({"refund": 5}, key="ok-1").approved is True


def test_forget_gc_after_grace_keeps_scopes_apart(tmp_path: Path) -> None:
    """gc moves the live bodies of forgotten containers into new packs: per key scope, so
    erasing one subject afterwards leaves the other's data whole."""
    url, ring, store = make_store(tmp_path)
    keeps = {}
    for name, subject in (("g", "user-8"), ("h", "user-9")):
        run = store.start_run(name, subject=subject)
        keep = keeps[name] = os.urandom(3 << 20)
        run.checkpoint({"a": ckptfs.Blob(io.BytesIO(os.urandom(9 << 20))), "k": keep})
        run.checkpoint({"k": keep, "n": 2})
        run.checkpoint({"k": keep, "n": 3})
        got = cli("forget", url, "--run", name, "--keep-last", "1", "--keyring", ring)
        assert got.returncode == 0, got.stderr
    got = cli("gc", url, "--grace", "0s", "--keyring", ring)
    assert got.returncode == 0, got.stdout + got.stderr
    assert "freed" in got.stdout, got.stdout
    got = cli("verify", url, "--read-data", "--keyring", ring)
    assert got.returncode == 0 and "0 problem" in got.stdout, got.stdout + got.stderr
    erase_subject(ckptfs.open_store(url, keyring=ring).storage, "user-8")
    assert ckptfs.open_store(url, keyring=ring).read("h") == {"k": keeps["h"], "n": 3}
    got = cli("verify", url, "--read-data", "--keyring", ring)
    assert got.returncode == 0 and "0 problem" in got.stdout, got.stdout + got.stderr


def test_a_start_that_never_committed_does_not_block_its_id(tmp_path: Path) -> None:
    url, ring, store = make_store(tmp_path)
    store.start_run("once", subject="user-1")  # crashed before its first checkpoint
    store.start_run("solo")
    again = ckptfs.open_store(url, keyring=ring)
    again.start_run("once", subject="user-1").checkpoint({"v": 1})
    again.start_run("solo").checkpoint({"v": 2})
    with pytest.raises(CkptfsError, match="already exists"):
        again.start_run("once", subject="user-1")
    with pytest.raises(CkptfsError, match="already exists"):
        ckptfs.open_store(url, keyring=ring).start_run("solo", subject="user-2")
    assert ckptfs.open_store(url, keyring=ring).read("once") == {"v": 1}


class Crash(Exception):
    pass


@pytest.mark.parametrize("point", ["before-key-delete", "before-marker", "before-deletes"])
def test_erase_crash_points(two_runs: tuple[str, str], point: str,
                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A crash at any step of an erase leaves the scope erased (no copy opens it, the other
    run reads on); running the erase again completes it."""
    url, ring = two_runs
    copy = url + "-copy"
    shutil.copytree(url, copy)
    st = ckptfs.open_store(url, keyring=ring).storage
    target = {"before-key-delete": (st.keyring.storage, "delete"),  # type: ignore[attr-defined]
              "before-marker": (st.inner, "create"),  # type: ignore[attr-defined]
              "before-deletes": (st.inner, "delete_many")}[point]  # type: ignore[attr-defined]

    def boom(*a: Any, **k: Any) -> None:
        raise Crash(point)

    with monkeypatch.context() as m:
        m.setattr(target[0], target[1], boom)
        with pytest.raises(Crash):
            erase_subject(st, "user-1")
    for loc in (url, copy):
        s = ckptfs.open_store(loc, keyring=ring)
        with pytest.raises(ScopeErased):
            s.read("a")
        assert s.read("b") == {"y": 1}
    rep = erase_subject(ckptfs.open_store(url, keyring=ring).storage, "user-1")
    assert not list((Path(ring) / "scopes").glob(rep.scope))
    assert (Path(url) / "erased" / rep.scope).exists()
    assert verify_erased(ckptfs.open_store(copy, keyring=ring).storage, "user-1").ok
    assert verify_erased(ckptfs.open_store(url, keyring=ring).storage, "user-1").scope_objects == 0


@pytest.mark.parametrize("damage", ["keyring-garbage", "keyring-no-check", "scope-bitflip",
                                    "scope-garbage", "name-garbage", "kdf-garbage"])
def test_hostile_keyrings(two_runs: tuple[str, str], damage: str) -> None:
    """A damaged or hostile keyring gives a typed keyring error; the store is unchanged."""
    import cbor2

    url, ring = two_runs
    before = tree(Path(url))
    root = Path(ring)
    meta = cbor2.loads((root / "keyring.cbor").read_bytes())
    if damage == "keyring-garbage":
        (root / "keyring.cbor").write_bytes(b"\xff\x00garbage")
    elif damage == "keyring-no-check":
        del meta["check"]
        (root / "keyring.cbor").write_bytes(cbor2.dumps(meta))
    elif damage == "kdf-garbage":
        meta["kdf"] = {"algorithm": "argon2id", "salt": b"", "params": {"t": 0, "m": 1, "p": 0}}
        (root / "keyring.cbor").write_bytes(cbor2.dumps(meta))
    elif damage.startswith("scope"):
        for p in (root / "scopes").iterdir():
            m = cbor2.loads(p.read_bytes())
            if damage == "scope-bitflip":
                m["key"] = m["key"][:-1] + bytes([m["key"][-1] ^ 1])
                p.write_bytes(cbor2.dumps(m))
            else:
                p.write_bytes(b"\x00\x01")
    else:
        for p in (root / "names").iterdir():
            p.write_bytes(cbor2.dumps({"scope": "not bytes"}))
    with pytest.raises(KeyringError):
        s = ckptfs.open_store(url, keyring=ring, passphrase="x")
        s.read("a")
    assert tree(Path(url)) == before


@pytest.mark.parametrize("to_passphrase", [False, True])
def test_master_key_rotation_rewraps_only(two_runs: tuple[str, str], to_passphrase: bool
                                          ) -> None:
    url, ring = two_runs
    before = tree(Path(url))
    old_key = (Path(ring) / "master.key").read_bytes()
    kr = ckptfs.open_store(url, keyring=ring).storage.keyring  # type: ignore[attr-defined]
    n = len(list((Path(ring) / "scopes").iterdir()))
    pw = "new pass" if to_passphrase else None
    new = kr.rotate(passphrase=pw, argon2={"t": 1, "m": 8192, "p": 1})
    assert new.gen == 1
    assert tree(Path(url)) == before  # no object of the store rewritten
    assert not (Path(ring) / "scopes").exists() or not list((Path(ring) / "scopes").iterdir())
    # every key rewrapped into the generation's key shards (spec/encryption.md 4.3)
    shards = [p for d in Path(ring).glob("shards-1-*") for p in d.iterdir()]
    assert sum(len(keyring_shards.decode(p.read_bytes(), ring, p.name)) for p in shards) == n
    assert not [p for d in Path(ring).glob("scopes-1-*") for p in d.iterdir()]
    assert not (Path(ring) / "master.key").exists()
    s = ckptfs.open_store(url, keyring=ring, passphrase=pw)
    assert s.read("a") == {"x": 2} and s.read("b") == {"y": 1}
    s.start_run("after", subject="user-1").checkpoint({"z": 1})  # the subject's scope found
    # the old master key opens nothing any more
    if not to_passphrase:
        next(Path(ring).glob("master-1-*.key")).write_bytes(old_key)
        with pytest.raises(KeyringError, match="does not open"):
            ckptfs.open_store(url, keyring=ring)


def test_rotation_crash_before_the_switch_keeps_the_old_keyring(
        two_runs: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    url, ring = two_runs
    kr = ckptfs.open_store(url, keyring=ring).storage.keyring  # type: ignore[attr-defined]
    real = kr.storage.replace

    def crash_at_switch(path: str, data: bytes) -> None:
        if path == "keyring.cbor":
            raise Crash("switch")
        real(path, data)

    with monkeypatch.context() as m:
        m.setattr(kr.storage, "replace", crash_at_switch)
        with pytest.raises(Crash):
            kr.rotate()
    assert ckptfs.open_store(url, keyring=ring).read("a") == {"x": 2}  # the old generation
    new = Keyring(open_storage(ring)).rotate()  # a rerun completes
    assert new.gen == 1
    assert ckptfs.open_store(url, keyring=ring).read("a") == {"x": 2}
    erase_subject(ckptfs.open_store(url, keyring=ring).storage, "user-1")
    assert not any(p.name for d in Path(ring).glob("scopes*") for p in d.iterdir()
                   if bytes.fromhex(p.name) == ckptfs.open_store(url, keyring=ring)
                   .storage.keyring.find("subject", "user-1"))  # type: ignore[attr-defined]


class LgState(TypedDict):
    msgs: Annotated[list[str], operator.add]


def test_langgraph_saver_on_an_encrypted_store(tmp_path: Path) -> None:
    from langgraph.graph import END, START, StateGraph

    from ckptfs.integrations.langgraph.saver import CkptfsSaver

    m = markers()

    def graph(store: ckptfs.Store) -> Any:
        g = StateGraph(LgState)
        g.add_node("a", lambda s: {"msgs": [m["inline"]]})
        g.add_edge(START, "a")
        g.add_edge("a", END)
        return g.compile(checkpointer=CkptfsSaver(store))

    url, ring, store = make_store(tmp_path)
    cfg: Any = {"configurable": {"thread_id": f"{m['run']}@example.com"}}
    graph(store).invoke({"msgs": []}, cfg)
    graph(store).invoke({"msgs": ["x"]}, cfg)
    again = graph(ckptfs.open_store(url, keyring=ring))
    assert again.get_state(cfg).values["msgs"] == [m["inline"], "x", m["inline"]]
    needles = [m["inline"].encode(), m["run"].encode(), MARK.encode()]
    assert scan(Path(url), needles)[3] == set()
    with pytest.raises(KeyringError):
        graph(ckptfs.open_store(url)).get_state(cfg)


def test_kms_keyring_on_moto(s3_options: dict[str, Any]) -> None:
    """An encrypted store on (moto) S3 whose keyring, also on S3, wraps its scope keys with an
    AWS KMS key (moto's KMS on loopback, a real API): commit, read with a fresh keyring,
    erase a subject, rotate to another KMS key, and a wrong KMS key refused."""
    import boto3
    import cbor2

    from tests.conftest import new_s3_url

    kms = boto3.client("kms", endpoint_url=s3_options["endpoint_url"], region_name="us-east-1",
                       aws_access_key_id="testing", aws_secret_access_key="testing")
    key_a = kms.create_key()["KeyMetadata"]["KeyId"]
    key_b = kms.create_key()["KeyMetadata"]["KeyId"]
    ring_url, url = new_s3_url(), new_s3_url()
    ring = Keyring.create(open_storage(ring_url, **s3_options), kms_key_id=key_a, kms=kms)
    store = ckptfs.open_store(url, keyring=ring, **s3_options)
    store.start_run("k1", subject="user-1").checkpoint({"v": 1})
    store.start_run("k2").checkpoint({"v": 2})

    def fresh() -> ckptfs.Store:
        return ckptfs.open_store(url, keyring=Keyring(open_storage(ring_url, **s3_options),
                                                      kms=kms), **s3_options)

    assert fresh().read("k1") == {"v": 1}
    rotated = Keyring(open_storage(ring_url, **s3_options), kms=kms).rotate(kms_key_id=key_b,
                                                                            kms=kms)
    assert rotated.gen == 1
    assert fresh().read("k1") == {"v": 1} and fresh().read("k2") == {"v": 2}
    erase_subject(fresh().storage, "user-1")
    with pytest.raises(ScopeErased):
        fresh().read("k1")
    assert fresh().read("k2") == {"v": 2}
    # the keyring pointed at another KMS key: refused at its check value
    rs = open_storage(ring_url, **s3_options)
    meta = cbor2.loads(rs.read("keyring.cbor"))
    meta["kdf"]["key_id"] = key_a
    rs.replace("keyring.cbor", cbor2.dumps(meta))
    with pytest.raises(KeyringError, match="does not open"):
        fresh()


def test_a_bound_keyring_does_not_make_a_second_store(two_runs: tuple[str, str],
                                                      tmp_path: Path) -> None:
    url, ring = two_runs
    with pytest.raises(KeyringError, match="another store"):
        ckptfs.open_store(str(tmp_path / "second"), keyring=ring).start_run("x")
    assert not (tmp_path / "second" / "ckptfs.cbor").exists()
    got = cli("init", str(tmp_path / "third"), "--encrypt", "--keyring", ring)
    assert got.returncode == 3 and "another store" in got.stderr


def test_export_of_an_encrypted_store_is_an_encrypted_copy(two_runs: tuple[str, str],
                                                           tmp_path: Path) -> None:
    url, ring = two_runs
    out = str(tmp_path / "a.zip")
    got = cli("export", url, out, "--run", "a", "--keyring", ring)
    assert got.returncode == 0, got.stdout + got.stderr
    assert ckptfs.open_store(out, keyring=ring).read("a") == {"x": 2}
    with pytest.raises(KeyringError):
        ckptfs.open_store(out).read("a")
    import zipfile

    blob = b"".join(zipfile.ZipFile(out).read(n) for n in zipfile.ZipFile(out).namelist())
    assert b'"x"' not in blob and b"\xa1ax" not in blob
    erase_subject(ckptfs.open_store(url, keyring=ring).storage, "user-1")
    with pytest.raises(ScopeErased):
        ckptfs.open_store(out, keyring=ring).read("a")


def test_demo_on_an_encrypted_store(tmp_path: Path) -> None:
    """The demo's workers (killed and resumed as subprocesses) run on an encrypted store."""
    store, ring = str(tmp_path / "s"), str(tmp_path / "k")
    got = cli("demo", "--store", store, "--keyring", ring, "--seed", "7")
    assert got.returncode == 0, got.stdout + got.stderr
    assert "exactly once" in got.stdout
    assert (Path(ring) / "keyring.cbor").exists()
    with pytest.raises(KeyringError):
        ckptfs.open_store(store).runs()
    assert len(ckptfs.open_store(store, keyring=ring).runs()) == 1
