"""The ``shared`` key scope of encrypted stores (issue 33 item 2, spec/encryption.md 4.4):
entries a checkpoint marks ``shared=`` are stored once for every run that carries them, while
every other entry stays in its run's (or subject's) scope, and no erasure needs or touches the
shared key."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

import ckptfs
from ckptfs.format import crypto_stream
from ckptfs.ops.erase_scope import erase_subject, verify_erased
from ckptfs.storage.encrypted import EncryptedStorage
from ckptfs.storage.keyring import ScopeErased
from tests.test_encrypted import scan

SHARED = ("system", "tools")


def prompt(seed: int = 1, size: int = 200_000) -> str:
    """A system prompt of ``size`` bytes that does not compress away."""
    import random

    rng = random.Random(seed)
    return " ".join(f"w{rng.randrange(1 << 30):x}" for _ in range(size // 9))[:size]


def store_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def w4(url: str, ring: str | None, n: int, shared: tuple[str, ...] | None) -> ckptfs.Store:
    store = ckptfs.open_store(url, keyring=ring) if ring else ckptfs.open_store(url)
    system, tools = prompt(), [{"name": f"tool_{k}", "doc": prompt(k + 2, 3000)} for k in range(8)]
    for i in range(n):
        run = store.start_run(f"run-{i:03d}")
        run.checkpoint({"system": system, "tools": tools, "task": f"task {i} " + prompt(100 + i, 900)},
                       shared=shared)
    return store


def test_w4_in_an_encrypted_store_stores_the_prompt_once(tmp_path: Path) -> None:
    """40 runs, each in its own key scope, sharing a 200 KB prompt and tool schemas: marked
    shared, the store is about the plaintext store's size; unmarked, about 40 prompts."""
    n = 40
    w4(str(tmp_path / "plain"), None, n, None)
    w4(str(tmp_path / "shared"), str(tmp_path / "ring-s"), n, SHARED)
    w4(str(tmp_path / "apart"), str(tmp_path / "ring-a"), n, None)
    plain, shared, apart = (store_bytes(tmp_path / x) for x in ("plain", "shared", "apart"))
    one_prompt = len(prompt()) // 2  # zstd of the hex-ish words: well over half remains
    print(f"W4 x{n}: plaintext {plain} B, encrypted+shared {shared} B "
          f"({shared / plain:.3f}x), encrypted unshared {apart} B ({apart / plain:.2f}x)")
    assert shared <= plain * 1.25
    assert apart >= one_prompt * n * 0.8  # the control: every run stores its own copy
    st = ckptfs.open_store(str(tmp_path / "shared"), keyring=str(tmp_path / "ring-s"))
    for i in (0, n - 1):
        got = st.read(f"run-{i:03d}")
        assert got["system"] == prompt() and got["task"].startswith(f"task {i} ")
    got = cli("verify", str(tmp_path / "shared"), "--read-data", "--keyring",
              str(tmp_path / "ring-s"))
    assert got.returncode == 0 and "0 problem" in got.stdout, got.stdout + got.stderr


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ckptfs", *args], capture_output=True,
                          text=True, timeout=300)


def _opened_by_scope(store: ckptfs.Store) -> dict[str, list[bytes]]:
    """Every stored object of the store, opened with its keyring, by its scope's kind."""
    view = store.storage
    assert isinstance(view, EncryptedStorage)
    out: dict[str, list[bytes]] = {}
    for path in view.inner.scan(""):
        logical = view.back(path)
        if path == "ckptfs.cbor" or logical is None or path.startswith("tmp/"):
            continue
        data = view.inner.read(path)
        scope = view.keyring.scope(crypto_stream.scope_of(data, where=logical))
        out.setdefault(scope.kind, []).append(view.open(logical, data))
    return out


def test_byte_scan_and_nothing_personal_in_the_shared_scope(tmp_path: Path) -> None:
    """Markers in shared and in personal entries: none appears in any stored object (the
    shared scope is sealed too); opened with the keyring, the shared scope's objects hold the
    shared marker and no personal one, and the personal markers are in their subject's."""
    mark = "ZQXSHARE" + os.urandom(4).hex()
    personal = {k: f"ZQXPERS{k}{os.urandom(4).hex()}" for k in ("inline", "item", "blob")}
    url, ring = str(tmp_path / "store"), str(tmp_path / "ring")
    store = ckptfs.open_store(url, keyring=ring)
    system = (mark + " ") + prompt(size=60_000)
    for i, subject in enumerate(("user-1", "user-2")):
        run = store.start_run(f"chat-{i}", subject=subject)
        run.checkpoint({"system": system,
                        "tools": ckptfs.Blob(io.BytesIO((mark + "-blob ").encode() * 40_000)),
                        "inline": personal["inline"],
                        "items": [f"{personal['item']}-{k}" for k in range(5000)],
                        "file": ckptfs.Blob(io.BytesIO(personal["blob"].encode() * 40_000))},
                       shared=SHARED)
    needles = [mark.encode(), *(v.encode() for v in personal.values())]
    _, _, _, found = scan(Path(url), needles)
    assert found == set(), found
    by_kind = _opened_by_scope(ckptfs.open_store(url, keyring=ring))
    assert set(by_kind) == {"shared", "subject"}
    shared_plain = b"".join(by_kind["shared"])
    subject_plain = b"".join(by_kind["subject"])
    from tests.bytescan import holds

    assert holds(shared_plain, mark.encode())  # the control: the scan finds what is there
    for v in personal.values():
        assert not holds(shared_plain, v.encode()), v
        assert holds(subject_plain, v.encode()), v
    assert not holds(subject_plain, mark.encode())  # the shared entries went to shared only


def test_erasing_a_subject_leaves_shared_content_readable(tmp_path: Path) -> None:
    url, ring = str(tmp_path / "store"), str(tmp_path / "ring")
    store = ckptfs.open_store(url, keyring=ring)
    system = prompt()
    store.start_run("a", subject="user-1").checkpoint({"system": system, "who": "ann"},
                                                      shared=SHARED[:1])
    store.start_run("b", subject="user-2").checkpoint({"system": system, "who": "bob"},
                                                      shared=SHARED[:1])
    rep = erase_subject(store.storage, "user-1")
    assert rep.deleted > 0
    fresh = ckptfs.open_store(url, keyring=ring)
    assert fresh.read("b") == {"system": system, "who": "bob"}
    with pytest.raises(ScopeErased):
        fresh.read("a")
    assert verify_erased(fresh.storage, "user-1").ok
    # the same process and a new one both go on writing the shared entry
    store.start_run("c").checkpoint({"system": system, "n": 1}, shared=SHARED[:1])
    fresh.resume("b").checkpoint({"system": system, "who": "bob", "n": 2}, shared=SHARED[:1])
    fresh.start_run("d", subject="user-3").checkpoint({"system": system}, shared=SHARED[:1])
    last = ckptfs.open_store(url, keyring=ring)
    assert [last.read(r)["system"] == system for r in ("b", "c", "d")] == [True] * 3
    got = cli("gc", url, "--grace", "0s", "--keyring", ring)
    assert got.returncode == 0, got.stdout + got.stderr
    got = cli("verify", url, "--read-data", "--keyring", ring)
    assert got.returncode == 0 and "0 problem" in got.stdout, got.stdout + got.stderr


def test_resume_keeps_the_shared_chunks_where_they_are(tmp_path: Path) -> None:
    """A resumed run (another process) that marks the entry again locates its parent's shared
    chunks instead of writing them; an entry left unmarked goes to the run's own scope."""
    url, ring = str(tmp_path / "store"), str(tmp_path / "ring")
    system = prompt()
    ckptfs.open_store(url, keyring=ring).start_run("r").checkpoint({"system": system},
                                                                    shared=SHARED[:1])
    before = store_bytes(tmp_path / "store")
    run = ckptfs.open_store(url, keyring=ring).resume("r")
    run.checkpoint({"system": system, "n": 2}, shared=SHARED[:1])
    assert store_bytes(tmp_path / "store") - before < 4096  # a record, no second prompt
    run.checkpoint({"system": system + "!", "n": 3})  # not marked: in the run's scope
    by_kind = _opened_by_scope(ckptfs.open_store(url, keyring=ring))
    from tests.bytescan import holds

    # the value's first 2,000 bytes: always inside its first chunk (at least 16 KiB), so in
    # one body of the run's scope (its last 2,000 bytes crossed a chunk boundary whenever the
    # run's secret gear seed cut a last chunk shorter than that: 3 runs of 200 failed)
    assert sum(holds(b, system[:2000].encode()) for b in by_kind["run"]) >= 1
    assert ckptfs.open_store(url, keyring=ring).read("r")["n"] == 3


def test_shared_names_an_entry_and_is_harmless_on_plaintext(tmp_path: Path) -> None:
    url, ring = str(tmp_path / "store"), str(tmp_path / "ring")
    run = ckptfs.open_store(url, keyring=ring).start_run("r")
    with pytest.raises(KeyError, match="nope"):
        run.checkpoint({"a": 1}, shared=["nope"])
    plain = ckptfs.open_store(str(tmp_path / "plain"))
    plain.start_run("p").checkpoint({"system": prompt(), "n": 1}, shared=SHARED[:1])
    assert plain.read("p")["n"] == 1


def test_the_shared_scope_key_matches_the_cddl_and_is_made_once(tmp_path: Path) -> None:
    import cbor2
    import pycddl

    url, ring = str(tmp_path / "store"), str(tmp_path / "ring")
    for proc in range(2):  # two Stores (as two processes would) find the one shared scope
        st = ckptfs.open_store(url, keyring=ring)
        st.start_run(f"r{proc}").checkpoint({"system": prompt(size=5000)}, shared=SHARED[:1])
    cddl = (Path(__file__).parent.parent / "spec" / "ckptfs.cddl").read_text()
    kinds = [cbor2.loads(p.read_bytes())["kind"] for p in (Path(ring) / "scopes").iterdir()]
    assert sorted(kinds) == ["run", "run", "shared", "store"]
    for p in (Path(ring) / "scopes").iterdir():
        pycddl.Schema(f"root = enc-scope-key\n{cddl}").validate_cbor(p.read_bytes())


def test_copies_of_a_store_with_shared_content(tmp_path: Path) -> None:
    """A copy (same keyring, or another) of runs whose prompt is in the shared scope: a pack of
    the shared scope is not moved whole into the first run's scope (the next run then needed
    the same pack in its own: ScopeRequired); each run gets the bodies in its own scope."""
    from ckptfs.ops.copy import copy_runs

    system = prompt(size=1_500_000)  # into packs
    src = ckptfs.open_store(str(tmp_path / "src"), keyring=str(tmp_path / "ring"))
    for i in range(3):
        src.start_run(f"r{i}", subject=f"u{i}").checkpoint({"system": system, "i": i},
                                                            shared=SHARED[:1])
    for name, ring in (("same", src.storage.keyring), ("other", str(tmp_path / "ring2"))):
        dst = ckptfs.open_store(str(tmp_path / name), keyring=ring)
        assert copy_runs(src.repo, dst.repo).snapshots_copied == 3
        again = ckptfs.open_store(str(tmp_path / name),
                                  keyring=str(tmp_path / ("ring" if name == "same" else "ring2")))
        assert [again.read(f"r{i}") for i in range(3)] == [{"system": system, "i": i}
                                                           for i in range(3)]
    erase_subject(ckptfs.open_store(str(tmp_path / "other"),
                                    keyring=str(tmp_path / "ring2")).storage, "u0")
    left = ckptfs.open_store(str(tmp_path / "other"), keyring=str(tmp_path / "ring2"))
    assert left.runs() == ["r1", "r2"] and left.read("r2")["system"] == system
