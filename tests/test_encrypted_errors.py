"""No plaintext name in the errors of an encrypted store (issue 33, spec/encryption.md 8).

A run id, a subject id or a content digest is a plaintext name: a run id may be an e-mail
address. The errors a tampered, swapped, planted or erased object raises (and those of
hostile keyrings) are logged by applications; their messages (and every message in their
cause chain) must name objects by their stored, encrypted path only."""

from __future__ import annotations

import io
import os
import shutil
from pathlib import Path

import pytest

import ckptfs
from ckptfs.errors import CkptfsError
from ckptfs.ops.erase_scope import erase_subject

MARK = "QZMARK"


def _chain(e: BaseException) -> str:
    out = []
    cur: BaseException | None = e
    while cur is not None:
        out.append(f"{type(cur).__name__}: {cur}")
        cur = cur.__cause__ or cur.__context__
    return "\n".join(out)


def _flip(p: Path, at: int = -1) -> bytes:
    good = p.read_bytes()
    b = bytearray(good)
    b[at] ^= 1
    p.write_bytes(bytes(b))
    return good


@pytest.fixture
def store(tmp_path: Path) -> tuple[str, str, str, str]:
    url, ring = str(tmp_path / "store"), str(tmp_path / "keyring")
    run_id = f"{MARK}-run-alice.example.com"
    subject = f"{MARK}-subject-bob@example.com"
    st = ckptfs.open_store(url, keyring=ring)
    run = st.start_run(run_id, subject=subject)
    run.checkpoint({"n": 1})
    blob = os.urandom(3 << 20)
    run.checkpoint({"n": 2, "blob": ckptfs.Blob(io.BytesIO(blob))})
    st.start_run(f"{MARK}-other").checkpoint({"k": 1})
    return url, ring, run_id, subject


def _secrets(url: str, ring: str, run_id: str, subject: str) -> list[str]:
    """Every plaintext name of the store: run ids, the subject, and the content digests of its
    packs (a digest of content confirms a guessed plaintext)."""
    st = ckptfs.open_store(url, keyring=ring)
    names = [run_id, subject, MARK]
    names += [p.rsplit("/", 1)[-1] for p in st.storage.scan("") if p.startswith("packs/")]
    assert len(names) > 3  # the blob went into packs
    return names


def _errors(url: str, ring: str, run_id: str, subject: str) -> list[str]:
    """The messages of every error a damaged store or keyring raises on a read."""
    got: list[str] = []

    def read() -> None:
        blob = ckptfs.open_store(url, keyring=ring).read(run_id)["blob"]
        assert sum(len(b) for b in blob.iter_bytes()) > 0

    def expect_error() -> None:
        with pytest.raises(CkptfsError) as ei:
            read()
        got.append(_chain(ei.value))

    root = Path(url)
    recs = sorted(p for p in (root / "runs").rglob("*") if p.is_file() and p.name.isdigit())
    packs = sorted(p for p in (root / "packs").rglob("*") if p.is_file())
    rec = max((p for p in recs if len([q for q in recs if q.parent == p.parent]) == 2))
    first = min(q for q in recs if q.parent == rec.parent)
    # a tampered record; a swapped one; a planted plaintext one; a truncated one
    good = _flip(rec)
    expect_error()
    rec.write_bytes(first.read_bytes())
    expect_error()
    rec.write_bytes(b"plain bytes, no header" * 4)
    expect_error()
    rec.write_bytes(good[:30])
    expect_error()
    rec.write_bytes(good)
    # a tampered pack: its middle, its last byte; a truncated pack
    for pack in packs:
        good = _flip(pack, len(pack.read_bytes()) // 2)
        expect_error()
        pack.write_bytes(good)
        _flip(pack)
        expect_error()
        pack.write_bytes(good[: len(good) - 1000])
        expect_error()
        pack.write_bytes(good)
    read()  # all restored: reads again
    # an erased scope
    copy = url + "-copy"
    shutil.copytree(url, copy)
    erase_subject(ckptfs.open_store(url, keyring=ring).storage, subject)
    for loc in (url, copy):
        with pytest.raises(CkptfsError) as ei:
            ckptfs.open_store(loc, keyring=ring).read(run_id)
        got.append(_chain(ei.value))
    return got


def test_no_plaintext_name_in_any_error(store: tuple[str, str, str, str]) -> None:
    url, ring, run_id, subject = store
    names = _secrets(url, ring, run_id, subject)
    errors = _errors(url, ring, run_id, subject)
    assert len(errors) >= 9
    leaks = [(n, e) for e in errors for n in names if n in e]
    assert leaks == [], "\n\n".join(f"{n}: {e}" for n, e in leaks)
