"""What an encrypted store costs beyond a plaintext one (issue 33, W1): counted, not timed.
A commit is one batch to the inner storage; a restore encrypts each run's name once, and a
store opened again does not unwrap the scope keys or derive the object keys it has met."""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

import pytest

import ckptfs
from ckptfs.format import crypto, crypto_stream
from ckptfs.storage import key_providers


def _store(tmp_path: Path) -> tuple[str, str]:
    url, ring = str(tmp_path / "s"), str(tmp_path / "ring")
    st = ckptfs.open_store(url, keyring=ring)
    run = st.start_run("w1", subject="user-1")
    state: dict[str, Any] = {"messages": []}
    for i in range(30):
        state["messages"].append(f"message {i} " * 40)
        run.checkpoint(state)
    return url, ring


def test_a_commit_is_one_batch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url, ring = _store(tmp_path)
    st = ckptfs.open_store(url, keyring=ring)
    run = st.resume("w1")
    inner: Any = st.storage.inner  # type: ignore[attr-defined]
    calls: list[str] = []
    for name in ("write", "create", "write_many", "commit", "write_parts"):
        real = getattr(inner, name)

        def counted(*a: Any, _real: Any = real, _name: str = name) -> Any:
            calls.append(_name)
            return _real(*a)

        monkeypatch.setattr(inner, name, counted)
    run.checkpoint({"blob": ckptfs.Blob(io.BytesIO(os.urandom(3 << 20))), "n": 1})
    # (the blob's packs stream out before the commit, as in a plaintext store)
    assert calls.count("commit") == 1 and "create" not in calls, calls


def test_a_restore_names_each_run_once_and_reopens_without_unwrapping(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url, ring = _store(tmp_path)
    ckptfs.open_store(url, keyring=ring).read("w1")  # this process has met the store
    names, unwraps, objects = [0], [0], [0]
    real_name, real_unwrap, real_key = (crypto.encrypt_name, key_providers.LocalKek.unwrap,
                                        crypto_stream.object_key)

    def name(*a: Any, **k: Any) -> str:
        names[0] += 1
        return real_name(*a, **k)

    def unwrap(self: Any, *a: Any) -> bytes:
        unwraps[0] += 1
        return real_unwrap(self, *a)

    def object_key(*a: Any) -> bytes:
        objects[0] += 1
        return real_key(*a)

    monkeypatch.setattr(crypto, "encrypt_name", name)
    monkeypatch.setattr(key_providers.LocalKek, "unwrap", unwrap)
    monkeypatch.setattr(crypto_stream, "object_key", object_key)
    got = ckptfs.open_store(url, keyring=ring).read("w1")
    assert len(got["messages"]) == 30
    assert names[0] == 1  # the run's stored name, once (it was once per object read)
    assert unwraps[0] == 2  # the keyring's check value and name-index key; no scope key
    # every immutable object's key was derived by the first restore; the head hint (a
    # mutable object, rewritten by each commit) is opened afresh
    assert objects[0] <= 1


def test_a_restore_reads_the_config_once(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Opening the store reads its config (is it encrypted? whose keyring?); the restore
    then takes those bytes instead of reading the config again, as a plaintext store's
    restore reads it once. A later read of the config reads it afresh."""
    from ckptfs.format.names import CONFIG_PATH
    from ckptfs.storage.local import LocalStorage

    url, ring = _store(tmp_path)
    reads: list[str] = []
    real = LocalStorage.read

    def read(self: LocalStorage, path: str) -> bytes:
        reads.append(path)
        return real(self, path)

    monkeypatch.setattr(LocalStorage, "read", read)
    st = ckptfs.open_store(url, keyring=ring)
    assert len(st.read("w1")["messages"]) == 30
    assert reads.count(CONFIG_PATH) == 1, reads
    assert st.storage.read(CONFIG_PATH) == real(st.storage.inner, CONFIG_PATH)  # type: ignore[attr-defined]
    assert reads.count(CONFIG_PATH) == 2
