"""References as a user makes and reads them (issue 35 item 13): ``Ref.of`` records the digest
and size of the data now, a relative path is made absolute when the Ref is made (not resolved
against the directory of a later restore), and ``open()``/``read()`` on a Ref give the data
verified against what was recorded, through the restore's reference policy."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import ckptfs
from ckptfs.errors import MissingReference, ReferenceChanged


def test_ref_of_records_digest_and_size(tmp_path: Path) -> None:
    data = tmp_path / "data.json"
    data.write_bytes(b'{"a": 1}')
    ref = ckptfs.Ref.of(data, labels={"kind": "input"})
    assert ref.digest == ckptfs.Digest.of(b'{"a": 1}') and ref.size == 8
    assert ref.uri == str(data) and ref.labels == {"kind": "input"}


def test_ref_of_an_fsspec_url() -> None:
    import fsspec

    with fsspec.open("memory://refs-api/x.bin", "wb") as f:
        f.write(b"abc")
    ref = ckptfs.Ref.of("memory://refs-api/x.bin")
    assert ref.uri == "memory://refs-api/x.bin"
    assert ref.digest == ckptfs.Digest.of(b"abc") and ref.size == 3
    assert ref.read() == b"abc"


def test_a_relative_path_is_resolved_when_the_ref_is_made(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "data.json").write_bytes(b"{}")
    monkeypatch.chdir(work)
    made = ckptfs.Ref("data.json")
    of = ckptfs.Ref.of("data.json")
    assert made.uri == of.uri == str(work / "data.json")
    assert ckptfs.Ref("file:data.json").uri == str(work / "data.json")
    assert ckptfs.Ref("s3://b/k").uri == "s3://b/k"
    url = str(tmp_path / "store")
    ckptfs.open_store(url).start_run("r").checkpoint({"ref": of})
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "data.json").write_bytes(b"other")  # what a relative URI would have found
    monkeypatch.chdir(elsewhere)
    got = ckptfs.open_store(url, ref_policy=ckptfs.RefPolicy.allow(str(work))).read(
        "r", lenient_refs=False)
    assert got["ref"].uri == str(work / "data.json") and got["ref"].missing is None
    assert got["ref"].read() == b"{}"


def test_a_restored_ref_reads_verified_and_refuses_changed_data(tmp_path: Path) -> None:
    data = tmp_path / "refs" / "doc.txt"
    data.parent.mkdir()
    data.write_bytes(b"x" * 100_000)
    url = str(tmp_path / "store")
    ckptfs.open_store(url).start_run("r").checkpoint({"doc": ckptfs.Ref.of(data)})
    policy = ckptfs.RefPolicy.allow(str(data.parent))
    ref = ckptfs.open_store(url, ref_policy=policy).read("r")["doc"]
    assert ref.read() == b"x" * 100_000
    with ref.open() as f:  # streamed in pieces
        pieces = []
        while piece := f.read(4096):
            pieces.append(piece)
    assert b"".join(pieces) == b"x" * 100_000
    data.write_bytes(b"y" * 100_000)  # same size, other bytes
    with pytest.raises(ReferenceChanged, match="has changed"):
        ref.read()
    data.write_bytes(b"x" * 100_001)
    with pytest.raises(ReferenceChanged, match="longer than the recorded 100000 bytes"):
        ref.read()
    # what a store names is opened only where the reader allowed, as for its checks
    bare = ckptfs.open_store(url).read("r")["doc"]
    with pytest.raises(MissingReference, match="not opened.*RefPolicy.allow"):
        bare.open()


def test_a_restored_ref_does_not_follow_links(tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_bytes(b"abc")
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    os.symlink(secret, allowed / "link.txt")
    url = str(tmp_path / "store")
    ckptfs.open_store(url).start_run("r").checkpoint(
        {"l": ckptfs.Ref(str(allowed / "link.txt"), size=3)})
    ref = ckptfs.open_store(url, ref_policy=ckptfs.RefPolicy.allow(str(allowed)),
                            ).read("r")["l"]
    with pytest.raises(MissingReference, match="links are not followed"):
        ref.read()


def test_a_ref_without_digest_reads_unverified(tmp_path: Path) -> None:
    data = tmp_path / "d"
    data.write_bytes(b"abc")
    assert ckptfs.Ref(str(data)).read() == b"abc"
    with pytest.raises(ReferenceChanged, match="is 3 bytes, expected 4"):
        ckptfs.Ref(str(data), size=4).read()
