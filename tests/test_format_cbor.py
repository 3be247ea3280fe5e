"""Canonical CBOR: round trips, the canonical form, and everything a reader must reject."""

from __future__ import annotations

import math
from typing import Any

import cbor2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ckptfs.errors import FormatError, NonCanonical
from ckptfs.format import cbor

U64 = (1 << 64) - 1
scalars = (
    st.none() | st.booleans() | st.integers(min_value=-(1 << 64), max_value=U64)
    | st.floats(allow_nan=False) | st.text(max_size=40) | st.binary(max_size=40)
)
plain: st.SearchStrategy[Any] = st.recursive(
    scalars,
    lambda kids: st.lists(kids, max_size=6) | st.dictionaries(st.text(max_size=30), kids, max_size=6),
    max_leaves=40,
)
big_ints = st.integers(min_value=U64 + 1, max_value=1 << 200) | st.integers(
    min_value=-(1 << 200), max_value=-(1 << 64) - 1)


@given(plain)
def test_round_trip_and_canonical(value: Any) -> None:
    data = cbor.encode(value)
    assert cbor.decode(data, what="v") == value
    assert cbor.encode(cbor.decode(data, what="v")) == data  # a fixed point


@given(st.dictionaries(st.text(max_size=30), st.integers(), max_size=12), st.randoms())
def test_encoding_ignores_insertion_order(d: dict[str, int], rnd: Any) -> None:
    items = list(d.items())
    rnd.shuffle(items)
    assert cbor.encode(dict(items)) == cbor.encode(d)


@given(st.dictionaries(st.text(max_size=40), st.none(), min_size=2, max_size=12))
def test_text_keys_are_in_bytewise_order_of_their_encoding(d: dict[str, None]) -> None:
    # cbor2 sorts length-first; for text keys this equals RFC 8949 bytewise order.
    order = list(cbor2.loads(cbor.encode(d)))
    assert order == sorted(d, key=cbor2.dumps)


@given(plain)
def test_any_other_encoding_of_the_same_value_is_rejected(value: Any) -> None:
    loose = cbor2.dumps(value)  # shortest ints but insertion key order and f64 floats
    if loose == cbor.encode(value):
        assert cbor.decode(loose, what="v") == value
    else:
        with pytest.raises(NonCanonical):
            cbor.decode(loose, what="v")


@given(big_ints)
def test_bignums_only_where_allowed(n: int) -> None:
    data = cbor.encode(n)
    assert data[0] in (0xC2, 0xC3)  # tag 2 / tag 3
    assert cbor.decode(data, what="v", allow_bignum=True) == n
    with pytest.raises(FormatError):
        cbor.decode(data, what="manifest")


@pytest.mark.parametrize("hexdata,why", [
    ("a2616101616102", "duplicate key"),
    ("9f01ff", "indefinite array"),
    ("bf616101ff", "indefinite map"),
    ("5f4101ff", "indefinite byte string"),
    ("7f6161ff", "indefinite text string"),
    ("f7", "undefined"),
    ("f0", "simple value 16"),
    ("f820", "simple value 32"),
    ("a10102", "integer key"),
    ("a1416101", "byte string key"),
    ("a1f601", "null key"),
    ("a1820102f6", "array key"),
    ("c11a00000001", "tag 1 (epoch time)"),
    ("c074323031332d30332d32315432303a30343a30305a", "tag 0 (date string)"),
    ("d82076687474703a2f2f6578616d706c652e636f6d", "tag 32 (URI)"),
    ("d9d9f701", "tag 55799 (self-described CBOR)"),
    ("da0001000001", "tag 65536"),
    ("d81c01", "tag 28 (shared value)"),
    ("c24101", "tag 2 outside user values"),
    ("6261", "truncated text"),
    ("61ff", "invalid UTF-8"),
    ("", "empty"),
    ("0101", "trailing bytes"),
    ("1c", "reserved additional information"),
])
def test_reader_rejects(hexdata: str, why: str) -> None:
    with pytest.raises(FormatError):
        cbor.decode(bytes.fromhex(hexdata), what=why)


@pytest.mark.parametrize("hexdata", [
    "1801", "190001", "1a00000001", "1b0000000000000001",  # non-minimal unsigned
    "3800", "3a00000000",  # non-minimal negative
    "780161", "59000141",  # non-minimal lengths
    "fb3ff0000000000000", "fa3f800000",  # 1.0 wider than needed
    "a2616201616101",  # {"b", "a"}: keys out of order
    "a262616101616202",  # {"aa", "b"}: "b" is shorter, so it sorts first
])
def test_noncanonical_is_rejected_for_manifests_and_records(hexdata: str) -> None:
    data = bytes.fromhex(hexdata)
    with pytest.raises(NonCanonical):
        cbor.decode(data, what="m")
    cbor.decode(data, what="content", check_canonical=False)  # entry content may skip the check


def test_entry_content_still_rejects_structural_problems() -> None:
    for hexdata in ("a2616101616102", "9f01ff", "f7", "a10102", "c11a00000001", "0101"):
        with pytest.raises(FormatError):
            cbor.decode(bytes.fromhex(hexdata), what="v", check_canonical=False, allow_bignum=True)


def test_floats_take_the_shortest_exact_form() -> None:
    assert cbor.encode(1.5) == bytes.fromhex("f93e00")
    assert cbor.encode(100000.0) == bytes.fromhex("fa47c35000")
    assert cbor.encode(1.1) == bytes.fromhex("fb3ff199999999999a")
    assert cbor.encode(math.inf) == bytes.fromhex("f97c00")
    assert cbor.encode(-0.0) == bytes.fromhex("f98000")
    assert math.isnan(cbor.decode(cbor.encode(math.nan), what="v"))
    assert cbor.encode(math.nan) == bytes.fromhex("f97e00")


def test_nesting_limit() -> None:
    deep: Any = []
    for _ in range(cbor.MAX_DEPTH + 5):
        deep = [deep]
    with pytest.raises(FormatError):
        cbor.decode(cbor2.dumps(deep), what="deep")
    with pytest.raises(TypeError, match="deeper than 256"):
        cbor.check_plain(deep)


@given(st.lists(plain, max_size=8))
def test_sequence_round_trip(items: list[Any]) -> None:
    data = b"".join(cbor.encode(x) for x in items)
    assert cbor.decode_sequence(data, what="seq") == items


@given(big_ints)
def test_sequence_allows_bignums(n: int) -> None:
    assert cbor.decode_sequence(cbor.encode(n) + cbor.encode(1), what="seq") == [n, 1]


@pytest.mark.parametrize("hexdata", ["0162", "01f7", "019f01ff", "01a2616101616102", "01c11a00000001"])
def test_sequence_rejects_bad_items(hexdata: str) -> None:
    with pytest.raises(FormatError):
        cbor.decode_sequence(bytes.fromhex(hexdata), what="seq")


@pytest.mark.parametrize("value,path", [
    ({"a": [1, {"b": object()}]}, "['a'][1]['b']"),
    ({1: "x"}, ""),
    ({"t": (1, 2)}, "['t']"),
    ([set()], "[0]"),
    ({"s": bytearray(b"x")}, "['s']"),
    ({"n": cbor2.undefined}, "['n']"),
])
def test_check_plain_names_the_offending_path(value: Any, path: str) -> None:
    with pytest.raises(TypeError) as e:
        cbor.check_plain(value, what="state")
    assert f"state{path}:" in str(e.value)


def test_check_plain_refuses_subclasses() -> None:
    class S(str):
        pass

    with pytest.raises(TypeError):
        cbor.check_plain({"x": S("a")})
    with pytest.raises(TypeError):
        cbor.check_plain({S("k"): 1})


@settings(max_examples=50)
@given(plain)
def test_check_plain_accepts_plain_data(value: Any) -> None:
    cbor.check_plain(value)
