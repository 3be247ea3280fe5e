"""Regression tests for the reader rules issue 16 settled ("the spec alone must be enough"):
each pins a point where the reference disagreed with spec/ or where two readers could differ."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from ckptfs.errors import CkptfsError, FormatError, InvalidName
from ckptfs.format import cbor
from ckptfs.format.digest import Digest
from ckptfs.format.ledger import Record
from ckptfs.format.names import parse_seq_name
from ckptfs.store.repository import Repository
from ckptfs.storage import open_storage
from ckptfs_conformance import generate as G
from ckptfs_conformance.render import render_ref, render_store, tagged


@pytest.fixture()
def base(tmp_path: Path) -> Path:
    p = tmp_path / "s"
    G._base(p)
    return p


def test_by_id_lookup_checks_the_record_size(base: Path) -> None:
    """format.md 8.1: by id as by run, a record whose size is not its manifest's is corrupt."""
    G._patch_record(base, size=G._record(base)["size"] + 1)
    head = Digest(G._record(base)["snapshot"])
    repo = Repository(open_storage(str(base)))
    with pytest.raises(CkptfsError) as e:
        repo.snapshot(head)
    assert e.value.category == "corrupt"
    with pytest.raises(CkptfsError) as e2:
        render_ref(str(base), head.text, G.NOW)
    assert e2.value.category == "corrupt"


def test_record_names_above_u64_are_not_records(base: Path) -> None:
    """format.md 3.1: a 20-digit name above 2^64-1 names no record: ignored, not read."""
    assert parse_seq_name("99999999999999999999") is None
    assert parse_seq_name("18446744073709551616") is None
    assert parse_seq_name("18446744073709551615") == 2**64 - 1
    (base / "runs/r2/99999999999999999999").write_bytes(b"junk")
    out = render_store(str(base), G.NOW)
    assert out["runs"]["r2"]["head"] == 1


@pytest.mark.parametrize("text", ["blake3:" + "A" * 64, "blake3:" + "0" * 63, " x", ""])
def test_text_that_is_no_digest_is_a_path_error(text: str) -> None:
    """format.md 3.3: a name the caller gives that breaks the grammar is `path`."""
    with pytest.raises(InvalidName):
        Digest.parse(text)


def test_nan_renders_as_the_canonical_nan() -> None:
    """ckptfs_conformance/README.md: every NaN is 7ff8000000000000 (payload and sign dropped)."""
    for h in ("f97e01", "f9fe00", "fb7ff8000000000001", "fa7fc00001"):
        v = cbor.decode(bytes.fromhex(h), what="v", allow_bignum=True, check_canonical=False)
        assert tagged(v) == {"$float": "7ff8000000000000"}


def _rec(**kw: Any) -> dict[str, Any]:
    m = {"key": "k", "kind": "effect", "name": "pay", "args": Digest.of(b"a").raw,
         "status": "completed", "at": 1, "attempt": 1, "result": 1, "via": "call"}
    m.update(kw)
    return {k: v for k, v in m.items() if v is not ...}


@pytest.mark.parametrize("m", [
    _rec(result=...),                                           # completed without a result
    _rec(via=...),                                              # settling record without via
    _rec(status="failed", result=..., error={"type": "E", "message": "m"}, via=...),
    _rec(status="intended", result=..., via=..., request=1),   # request on an effect
])
def test_ledger_record_fields_are_required_where_the_spec_says(m: dict[str, Any]) -> None:
    """ledger.md 1: `result`/`result_content` on completed, `via` on settling records,
    `request` on approvals only."""
    with pytest.raises(FormatError):
        Record.from_cbor(m)


def test_ledger_records_still_accepted() -> None:
    Record.from_cbor(_rec(result=None))
    Record.from_cbor(_rec(kind="approval", status="intended", result=..., via=..., request=1))


@pytest.mark.parametrize("tail", [b"\x00", bytes.fromhex("502a4d1804000000") + b"skip", None])
def test_bytes_after_the_zstd_frame_are_refused(tail: bytes | None) -> None:
    """format.md 4: the payload is exactly one zstd frame; anything after it is corrupt."""
    import zstandard

    from ckptfs.format import framing

    data = b"ckptfs framing " * 300
    z = zstandard.ZstdCompressor(write_content_size=True).compress(data)
    extra = zstandard.ZstdCompressor(write_content_size=True).compress(b"x") if tail is None \
        else tail
    assert framing.unframe(b"\x01" + z, len(data), what="o") == data
    with pytest.raises(FormatError):
        framing.unframe(b"\x01" + z + extra, len(data), what="o")
    zc = zstandard.ZstdCompressor(write_content_size=True, write_checksum=True).compress(data)
    assert framing.unframe(b"\x01" + zc, len(data), what="o") == data
    with pytest.raises(FormatError):
        framing.unframe(b"\x01" + zc + extra, len(data), what="o")
