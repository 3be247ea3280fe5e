"""Models: store config, manifest, entries and run records validate strictly and round-trip."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ckptfs.errors import FormatError, UnsupportedFeature, UnsupportedVersion
from ckptfs.format import cbor
from ckptfs.format.cdc import ChunkerParams
from ckptfs.format.digest import Digest
from ckptfs.format.models import (
    Captured,
    ChunkRef,
    Manifest,
    Reference,
    RunRecord,
    Schema,
    StoreConfig,
    entry_from_cbor,
)

D1, D2 = Digest.of(b"1"), Digest.of(b"2")


def value_entry() -> dict[str, Any]:
    return {"kind": "value", "type": "application/cbor", "size": 7, "digest": D1.raw,
            "chunks": [[D1.raw, 3], [D2.raw, 4]], "encoding": "cbor"}


def manifest_map(**over: Any) -> dict[str, Any]:
    m: dict[str, Any] = {
        "format": 1, "run": "r", "seq": 1, "boundary": "step", "created": 1700000000000,
        "writer": "test/1", "schema": {"name": "agent", "version": 2},
        "entries": {"v": value_entry(), "x": {"kind": "ref", "uri": "s3://b/k"}},
        "parent": None, "resumed_from": None, "attempt": 1, "ledger": None, "labels": {},
        "expires": None,
    }
    m.update(over)
    return m


def config_map(**over: Any) -> dict[str, Any]:
    m = StoreConfig(created=5).to_cbor()
    m.update(over)
    return m


# -- manifest ----------------------------------------------------------------------------------
def test_manifest_round_trip_is_exact() -> None:
    m = manifest_map(parent=D1.raw, resumed_from=D2.raw, attempt=3, labels={"k": "v"},
                     expires=123, ledger={"count": 1, "size": 1, "digest": Digest.of(b"\x01").raw,
                                           "inline": b"\x01"})
    data = cbor.encode(m)
    man = Manifest.from_bytes(data)
    assert man.parent == D1 and man.resumed_from == D2 and man.attempt == 3
    assert isinstance(man.entries["v"], Captured) and isinstance(man.entries["x"], Reference)
    assert man.to_bytes() == data


@pytest.mark.parametrize("field", ["format", "run", "seq", "boundary", "created", "writer", "schema",
                                   "entries", "parent", "resumed_from", "attempt", "ledger",
                                   "labels", "expires"])
def test_manifest_missing_field(field: str) -> None:
    m = manifest_map()
    del m[field]
    with pytest.raises(FormatError):
        Manifest.from_cbor(m)


@pytest.mark.parametrize("field,value", [
    ("run", 5), ("run", "../r"), ("run", ""), ("seq", 0), ("seq", -1), ("seq", "1"), ("seq", True),
    ("seq", 1 << 64), ("boundary", "Step"), ("created", -1), ("created", 1.5), ("writer", None),
    ("schema", {"name": "a"}), ("schema", {"name": "", "version": 1}),
    ("schema", {"name": "a", "version": -1}), ("schema", ["a", 1]), ("entries", []),
    ("entries", {"../x": value_entry()}), ("parent", D1.hex), ("parent", b"short"),
    ("resumed_from", ""), ("attempt", 0), ("ledger", []), ("labels", None),
    ("labels", {"k": 1}), ("labels", {"bad key": "v"}), ("labels", {"k": "v" * 1025}),
    ("expires", "soon"), ("required", "x"), ("required", [1]),
])
def test_manifest_wrong_field(field: str, value: Any) -> None:
    with pytest.raises(FormatError):
        Manifest.from_cbor(manifest_map(**{field: value}))


def test_manifest_not_a_map() -> None:
    for data in (cbor.encode([1]), cbor.encode("m")):
        with pytest.raises(FormatError):
            Manifest.from_bytes(data)


@pytest.mark.parametrize("version", [0, 2, 99])
def test_manifest_unknown_format_version(version: int) -> None:
    with pytest.raises(UnsupportedVersion):
        Manifest.from_cbor(manifest_map(format=version))


def test_manifest_unknown_required_feature_fails_closed() -> None:
    with pytest.raises(UnsupportedFeature, match="time-travel"):
        Manifest.from_cbor(manifest_map(required=["time-travel"]))
    assert Manifest.from_cbor(manifest_map(required=[])).required == ()


def test_unknown_optional_top_level_keys_are_kept() -> None:
    m = manifest_map(migrated_from={"schema": "agent@1"}, zz=[1, 2])
    man = Manifest.from_cbor(m)
    assert man.extra == {"migrated_from": {"schema": "agent@1"}, "zz": [1, 2]}
    assert man.to_bytes() == cbor.encode(m)


def test_manifest_is_canonical_on_read() -> None:
    import cbor2

    m = manifest_map()
    loose = cbor2.dumps(m)  # insertion order, not canonical
    assert loose != cbor.encode(m)
    with pytest.raises(FormatError):
        Manifest.from_bytes(loose)


def test_writer_refuses_a_manifest_readers_would_reject() -> None:
    man = Manifest.from_cbor(manifest_map())
    import attrs

    for bad in (attrs.evolve(man, labels={"k": "v" * 2000}),
                attrs.evolve(man, entries={"r": Reference(uri="")}),
                attrs.evolve(man, required=("unknown-feature",))):
        with pytest.raises((FormatError, UnsupportedFeature)):
            bad.to_bytes()


# -- entries -----------------------------------------------------------------------------------
@pytest.mark.parametrize("change", [
    {"kind": "file"}, {"size": 8}, {"chunks": [[D1.raw, 7, 0]]}, {"chunks": [[D1.raw, 0]]},
    {"chunks": [[D1.raw, (16 << 20) + 1]], "size": (16 << 20) + 1}, {"chunks": [[D1.hex, 7]]},
    {"encoding": "json"}, {"encoding": None}, {"type": "application/json"},
    {"type": "application/cbor-seq"}, {"digest": None}, {"labels": {"k": 5}}, {"labels": None},
])
def test_bad_value_entries(change: dict[str, Any]) -> None:
    with pytest.raises(FormatError):
        entry_from_cbor("e", {**value_entry(), **change})


def test_entry_needs_its_fields() -> None:
    for field in ("kind", "type", "size", "digest", "chunks", "encoding"):
        e = value_entry()
        del e[field]
        with pytest.raises(FormatError):
            entry_from_cbor("e", e)


def test_blob_entries() -> None:
    blob = {"kind": "blob", "type": "image/png", "size": 0, "digest": Digest.of(b"").raw,
            "chunks": []}
    e = entry_from_cbor("b", blob)
    assert isinstance(e, Captured) and e.to_cbor() == blob
    with pytest.raises(FormatError):
        entry_from_cbor("b", {**blob, "encoding": "cbor"})
    with pytest.raises(FormatError):
        entry_from_cbor("b", {**blob, "type": ""})


def test_ref_entries() -> None:
    full = {"kind": "ref", "uri": "s3://b/k", "digest": D1.raw, "size": 10, "expires": 5,
            "labels": {"a": "b"}}
    e = entry_from_cbor("r", full)
    assert isinstance(e, Reference) and e.to_cbor() == full
    for bad in ({"uri": ""}, {"uri": "u" * 4097}, {"uri": None}, {"digest": None},
                {"digest": b"x"}, {"size": None}, {"size": -1}, {"expires": None}):
        with pytest.raises(FormatError):
            entry_from_cbor("r", {**full, **bad})


@given(st.lists(st.integers(1, 1 << 24), max_size=5), st.sampled_from(["cbor", "cbor-seq"]))
def test_captured_round_trip(sizes: list[int], enc: str) -> None:
    chunks = tuple(ChunkRef(Digest.of(str(i).encode()), s) for i, s in enumerate(sizes))
    e = Captured(kind="value", type={"cbor": "application/cbor",
                                     "cbor-seq": "application/cbor-seq"}[enc],
                 size=sum(sizes), digest=D1, chunks=chunks, encoding=enc)
    assert entry_from_cbor("e", cbor.decode(cbor.encode(e.to_cbor()), what="e")) == e


# -- run records -------------------------------------------------------------------------------
def test_run_record_round_trip_and_checks() -> None:
    rec = RunRecord(run="r", seq=3, snapshot=D1, size=100, created=7)
    assert RunRecord.from_bytes(rec.to_bytes(), what="rec") == rec
    good = rec.to_cbor()
    for bad in ({"seq": 0}, {"run": "../r"}, {"snapshot": D1.hex}, {"size": (64 << 20) + 1},
                {"created": "x"}):
        with pytest.raises(FormatError):
            RunRecord.from_bytes(cbor.encode({**good, **bad}), what="rec")
    for field in good:
        with pytest.raises(FormatError):
            RunRecord.from_bytes(cbor.encode({k: v for k, v in good.items() if k != field}),
                                 what="rec")
    data = rec.to_bytes()
    with pytest.raises(FormatError):
        RunRecord.from_bytes(data[:-1], what="rec")
    with pytest.raises(FormatError):
        RunRecord.from_bytes(data + b"\x00" * 70_000, what="rec")


# -- store config ------------------------------------------------------------------------------
def test_config_round_trip() -> None:
    cfg = StoreConfig(chunker=ChunkerParams(min_size=64, avg_size=256, max_size=1024), created=9,
                      optional=("future-thing",), settings={"retention": {"days": 3}})
    assert StoreConfig.from_bytes(cfg.to_bytes()) == cfg


@pytest.mark.parametrize("over,err", [
    ({"version": 3}, UnsupportedVersion), ({"version": 0}, UnsupportedVersion),
    ({"required": ["encryption"]}, UnsupportedFeature), ({"hash": "sha256"}, UnsupportedFeature),
    ({"format": "zarr"}, FormatError), ({"required": "x"}, FormatError),
    ({"optional": [1]}, FormatError), ({"settings": []}, FormatError),
    ({"chunker": {"algorithm": "fastcdc-2020"}}, FormatError), ({"created": -5}, FormatError),
    ({"chunker": {**ChunkerParams().to_cbor(), "algorithm": "rabin"}}, UnsupportedFeature),
])
def test_config_rejections(over: dict[str, Any], err: type[Exception]) -> None:
    with pytest.raises(err):
        StoreConfig.from_bytes(cbor.encode(config_map(**over)))


@pytest.mark.parametrize("field", ["format", "version", "hash", "chunker", "created", "required",
                                   "optional", "settings"])
def test_config_missing_field(field: str) -> None:
    m = config_map()
    del m[field]
    with pytest.raises((FormatError, UnsupportedFeature)):
        StoreConfig.from_bytes(cbor.encode(m))


def test_config_unknown_optional_feature_and_keys_are_ignored() -> None:
    cfg = StoreConfig.from_bytes(cbor.encode(config_map(optional=["later"], newkey=1)))
    assert cfg.optional == ("later",)


def test_schema_text() -> None:
    assert str(Schema("agent", 3)) == "agent@3"


def test_every_error_category_is_in_the_spec() -> None:
    import inspect
    import re
    from pathlib import Path

    from ckptfs import errors

    text = (Path(__file__).parent.parent / "spec" / "format.md").read_text()
    table = text[text.index("## 13. Error categories"):text.index("## 14. Versioning")]
    listed = set(re.findall(r"`([a-z-]+)`", table))
    used = {c.category for _, c in inspect.getmembers(errors, inspect.isclass)
            if issubclass(c, errors.CkptfsError)}
    assert used <= listed, f"categories missing from format.md section 13: {used - listed}"
