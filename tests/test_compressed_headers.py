"""Compressed record headers (spec/v2.md 2 and 3.1.1, feature ``compressed-headers``).

A new version 2 store requires the feature and its run records store their header as one
zstd frame (container form 0x03); packs stay form 0x02. A store without the feature never
gets a form 0x03 container (an earlier release would take it for damage); ``ckptfs upgrade``
adds the feature; copy writes each record in its destination's form. The hostile forms of a
compressed header (bombs, frames without a size, trailing bytes) are conformance vectors
(``store-invalid/v2-zheader-*``); here the pure codec is checked against them directly too.
"""

from __future__ import annotations

import random
from pathlib import Path

import attrs
import blake3
import pytest
import zstandard

import ckptfs
from ckptfs.errors import CorruptObject, FormatError, UnsupportedFeature
from ckptfs.format import containers as ct
from ckptfs.format import cbor, framing, models
from ckptfs.format.models import COMPLETE_LOCATORS, COMPRESSED_HEADERS, StoreConfig
from ckptfs.format.names import CONFIG_PATH, record_path
from ckptfs.ops.copy import copy_runs
from tests.clihelp import cli
from tests.v1_stores import v1_store


def _records(root: Path) -> list[Path]:
    return sorted(f for f in (root / "runs").rglob("*") if f.is_file() and f.name.isdigit())


def _packs(root: Path) -> list[Path]:
    return sorted(f for f in (root / "packs").rglob("*") if f.is_file())


def _grow(store: ckptfs.Store, run_id: str, n: int, *, resume: bool = False) -> list[str]:
    run = store.resume(run_id) if resume else store.start_run(run_id)
    msgs: list[str] = list(run.state.get("messages", [])) if resume else []
    ids = []
    for i in range(n):
        msgs.append(f"message {len(msgs)}: " + "words of a conversation " * 40)
        ids.append(run.checkpoint({"messages": list(msgs), "plan": {"step": i}}).id)
    return ids


def _without_feature(url: str) -> None:
    """A version 2 store as ckptfs 0.2.0 created it: complete locators, no compressed headers."""
    store = ckptfs.open_store(url)
    store.init()
    cfg = store.repo.config
    store.repo.storage.replace(CONFIG_PATH, attrs.evolve(cfg, required=tuple(
        f for f in cfg.required if f != COMPRESSED_HEADERS)).to_bytes())


def test_a_new_store_compresses_record_headers_and_not_packs(tmp_path: Path) -> None:
    url = str(tmp_path / "s")
    store = ckptfs.open_store(url)
    store.init(settings={"record_bulk_max": 4096, "pack_target": 8192})
    ids = _grow(store, "r", 5)
    store.start_run("big").checkpoint({"blob": ckptfs.Blob(random.Random(1).randbytes(20_000))})
    cfg = store.repo.config
    assert cfg.required == (COMPLETE_LOCATORS, COMPRESSED_HEADERS)
    assert {f.read_bytes()[8] for f in _records(tmp_path / "s")} == {ct.CONTAINER_COMPRESSED}
    assert _packs(tmp_path / "s") and {f.read_bytes()[8] for f in _packs(tmp_path / "s")} == {2}
    fresh = ckptfs.open_store(url)
    assert [s.id for s in fresh.snapshots("r")] == ids
    assert fresh.read("r")["plan"] == {"step": 4}


def test_compressed_header_is_smaller_and_decodes_to_the_same_header(tmp_path: Path) -> None:
    url = str(tmp_path / "s")
    store = ckptfs.open_store(url)
    _grow(store, "r", 20)
    data = _records(tmp_path / "s")[-1].read_bytes()
    c = ct.decode(data, what="record")
    plain, start = ct.encode(c.header.to_cbor(), data[c.body_start:])
    assert ct.decode(plain, what="plain").header == c.header
    assert plain[8] == ct.CONTAINER_VERSION and data[8] == ct.CONTAINER_COMPRESSED
    assert c.body_start < start * 0.9  # the header shrank (the bodies are the same bytes)
    # locators count stored bytes: the body area moved, the bodies read the same
    for b in c.header.bodies:
        assert c.body_bytes(data, b) == plain[start + b.offset:start + b.offset + b.stored]


def test_a_store_without_the_feature_never_gets_a_compressed_container(tmp_path: Path) -> None:
    """The writer rule of spec/v2.md 2: no form 0x03 unless the config requires the feature."""
    url = str(tmp_path / "s")
    _without_feature(url)
    _grow(ckptfs.open_store(url), "r", 4)
    _grow(ckptfs.open_store(url), "r", 2, resume=True)
    assert {f.read_bytes()[8] for f in _records(tmp_path / "s")} == {ct.CONTAINER_VERSION}


def test_upgrade_adds_the_feature_and_both_forms_read(tmp_path: Path) -> None:
    url = str(tmp_path / "s")
    _without_feature(url)
    ids = _grow(ckptfs.open_store(url), "r", 3)
    dry = cli("upgrade", url, "--dry-run")
    assert "would get the feature compressed-headers" in dry.stdout
    assert COMPRESSED_HEADERS not in ckptfs.open_store(url).repo.config.required
    out = cli("upgrade", url)
    assert "now has the feature compressed-headers" in out.stdout
    assert "complete-locators" not in out.stdout  # it had that one already
    store = ckptfs.open_store(url)
    assert COMPRESSED_HEADERS in store.repo.config.required
    ids += _grow(store, "r", 2, resume=True)
    forms = [f.read_bytes()[8] for f in _records(tmp_path / "s")]
    assert forms == [2, 2, 2, 3, 3]
    fresh = ckptfs.open_store(url)
    assert [s.id for s in fresh.snapshots("r")] == ids
    assert len(fresh.read("r")["messages"]) == 5
    assert "nothing to do" in cli("upgrade", url).stdout


def test_copy_writes_each_record_in_its_destinations_form(tmp_path: Path) -> None:
    src_url = str(tmp_path / "src")
    ids = _grow(ckptfs.open_store(src_url), "r", 4)
    old = str(tmp_path / "old")  # an existing destination without the feature
    _without_feature(old)
    copy_runs(ckptfs.open_store(src_url).repo, ckptfs.open_store(old).repo)
    assert {f.read_bytes()[8] for f in _records(tmp_path / "old")} == {2}
    assert COMPRESSED_HEADERS not in ckptfs.open_store(old).repo.config.required
    new = str(tmp_path / "new")  # a destination the copy creates
    copy_runs(ckptfs.open_store(old).repo, ckptfs.open_store(new).repo)
    assert COMPRESSED_HEADERS in ckptfs.open_store(new).repo.config.required
    assert {f.read_bytes()[8] for f in _records(tmp_path / "new")} == {3}
    for url in (old, new):
        assert [s.id for s in ckptfs.open_store(url).snapshots("r")] == ids


def test_a_reader_that_does_not_know_the_feature_refuses_the_store(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What ckptfs 0.2.0 does: the store is refused at its config, naming the feature."""
    url = str(tmp_path / "s")
    _grow(ckptfs.open_store(url), "r", 1)
    monkeypatch.setattr(models, "KNOWN_FEATURES", models.KNOWN_FEATURES - {COMPRESSED_HEADERS})
    with pytest.raises(UnsupportedFeature, match="compressed-headers"):
        StoreConfig.from_bytes((tmp_path / "s" / CONFIG_PATH).read_bytes())


@pytest.mark.parametrize("stored,why", [
    (lambda raw: zstandard.ZstdCompressor(write_content_size=False).compress(raw),
     "does not declare its content size"),
    (lambda raw: framing.deflate(raw) + b"\x00", "after the zstd frame"),
    (lambda raw: framing.deflate(bytes(ct.MAX_HEADER_SIZE + 1)), "outside 1 .."),
    (lambda raw: framing.deflate(b""), "outside 1 .."),
    (lambda raw: raw, "zstd frame header is damaged"),
])
def test_hostile_compressed_headers_are_corrupt_before_inflating(stored: object,
                                                                why: str) -> None:
    header = {"kind": "pack", "created": 1, "writer": "t", "bodies": [], "body_length": 0}
    raw = cbor.encode(header)
    s = stored(raw)  # type: ignore[operator]
    data = b"".join([ct.MAGIC, bytes([ct.CONTAINER_COMPRESSED]), len(s).to_bytes(4, "big"), s,
                     blake3.blake3(s).digest()])
    with pytest.raises(CorruptObject, match=why):
        ct.decode(data, what="c")
    # the same bytes under an unknown form byte (0x05) are refused before any header is read
    with pytest.raises(FormatError, match="form byte 5"):
        ct.decode(data[:8] + b"\x05" + data[9:], what="c")


def test_a_header_bomb_is_refused_without_inflating(tmp_path: Path) -> None:
    """A record of a few KiB whose header frame declares a valid header padded to 1 GiB: the
    read fails ``corrupt`` with under 8 MiB allocated (the declared size is checked first)."""
    import tracemalloc

    url = str(tmp_path / "s")
    _grow(ckptfs.open_store(url), "r", 2)
    rec = _records(tmp_path / "s")[-1]
    c = ct.decode(rec.read_bytes(), what="record")
    raw = cbor.encode({**c.header.to_cbor(), "x-pad": b""})
    z = zstandard.ZstdCompressor(level=3).compress(
        cbor.encode({**c.header.to_cbor(), "x-pad": bytes((1 << 30) - len(raw))}))
    assert len(z) < 64 * 1024
    area = rec.read_bytes()[c.body_start:]
    rec.write_bytes(b"".join([ct.MAGIC, bytes([ct.CONTAINER_COMPRESSED]),
                              len(z).to_bytes(4, "big"), z, blake3.blake3(z).digest(), area]))
    fresh = ckptfs.open_store(url)
    tracemalloc.start()
    try:
        with pytest.raises(CorruptObject, match="declares"):
            fresh.read("r")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * 1024 * 1024


def test_upgrading_a_version_1_store_gives_both_features(tmp_path: Path) -> None:
    from ckptfs.ops.upgrade import upgrade

    url = v1_store(tmp_path / "s")
    ids = [s.id for s in ckptfs.open_store(url).snapshots("chat")]
    r = upgrade(ckptfs.open_store(url).repo)
    assert r.changed and r.added == (COMPLETE_LOCATORS, COMPRESSED_HEADERS)
    store = ckptfs.open_store(url)
    run = store.resume("chat")
    ids.append(run.checkpoint({**run.state, "step": 6}).id)
    assert (tmp_path / "s" / record_path("chat", 7)).read_bytes()[8] == ct.CONTAINER_COMPRESSED
    assert [s.id for s in ckptfs.open_store(url).snapshots("chat")] == ids
