"""Typed values (issue 17, spec/format.md 18): the codec registry, its built-ins and adapters,
the stored tag 27 form, and what a restore does with types it does not know."""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import enum
import pathlib
import uuid
import zoneinfo
from pathlib import Path
from typing import Any

import attrs
import cbor2
import pydantic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ckptfs
from ckptfs.errors import FormatError, TypedValueError, UnknownType, UnregisteredType
from ckptfs.format import cbor
from ckptfs.format.typed import TYPED_TAG

PARIS = zoneinfo.ZoneInfo("Europe/Paris")


class Status(enum.Enum):
    NEW = "new"
    PAID = "paid"


@dataclasses.dataclass(frozen=True)
class Line:
    sku: str
    qty: int
    price: decimal.Decimal


@dataclasses.dataclass
class Customer:
    id: uuid.UUID
    since: dt.date
    tags: frozenset[str] = frozenset()


@attrs.frozen
class Address:
    """An attrs class with a nested unregistered attrs class and typed fields."""

    street: str
    geo: Geo
    checked: dt.datetime | None = None
    history: tuple[Geo, ...] = ()


@attrs.frozen
class Geo:
    lat: decimal.Decimal
    lon: decimal.Decimal


class Order(pydantic.BaseModel):
    id: int
    status: Status
    lines: list[Line]
    customer: Customer
    placed: dt.datetime
    note: tuple[str, ...] = ()


class Money:
    """Not a dataclass: needs its own encode/decode."""

    def __init__(self, cents: int, currency: str) -> None:
        self.cents, self.currency = cents, currency

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Money) and (self.cents, self.currency) == (other.cents,
                                                                              other.currency)


def app_codecs(**kw: Any) -> ckptfs.Codecs:
    c = ckptfs.Codecs(**kw)
    c.register(Status, name="shop.Status")
    c.register(Line, name="shop.Line")
    c.register(Customer, name="shop.Customer")
    c.register(Order, name="shop.Order")
    c.register(Address, name="shop.Address")
    c.register(Money, name="shop.Money", encode=lambda m: [m.cents, m.currency],
               decode=lambda p: Money(*p))
    return c


def order() -> Order:
    return Order(id=7, status=Status.PAID,
                 lines=[Line("a", 2, decimal.Decimal("9.95")), Line("b", 1, decimal.Decimal("0"))],
                 customer=Customer(uuid.UUID(int=5), dt.date(2020, 2, 29), frozenset({"vip"})),
                 placed=dt.datetime(2024, 3, 1, 9, 30, tzinfo=PARIS), note=("gift", "fragile"))


BUILTINS: dict[str, Any] = {
    "datetime-utc": dt.datetime(2024, 3, 1, 12, 30, 5, 17, tzinfo=dt.timezone.utc),
    "datetime-offset": dt.datetime(2024, 3, 1, tzinfo=dt.timezone(dt.timedelta(hours=-3))),
    "datetime-naive": dt.datetime(1999, 12, 31, 23, 59, 59),
    "datetime-zone": dt.datetime(2024, 7, 1, 9, 0, tzinfo=PARIS),
    "datetime-fold": dt.datetime(2024, 10, 27, 2, 30, tzinfo=PARIS, fold=1),
    "datetime-min": dt.datetime.min,
    "date": dt.date(2024, 2, 29),
    "time": dt.time(8, 15, 1, 2),
    "time-offset": dt.time(8, 15, tzinfo=dt.timezone(dt.timedelta(hours=5, minutes=30))),
    "timedelta": dt.timedelta(days=-3, seconds=5, microseconds=1),
    "timedelta-max": dt.timedelta.max,
    "uuid": uuid.uuid4(),
    "decimal": decimal.Decimal("12.50"),
    "decimal-snan": decimal.Decimal("-sNaN"),
    "decimal-inf": decimal.Decimal("-Infinity"),
    "tuple": (1, ("a", b"x"), ()),
    "set": {3, "x", 1.5, b"y", (1, 2)},
    "frozenset": frozenset({frozenset({1}), None}),
    "path": pathlib.Path("/tmp/a b/c"),
    "pure-posix-path": pathlib.PurePosixPath("rel/x"),
    "pure-windows-path": pathlib.PureWindowsPath(r"C:\\Users\\x"),
    "nested": {"a": [dt.date(2024, 1, 1), {"s": {uuid.UUID(int=1)}}]},
}


def _same(a: Any, b: Any) -> bool:
    """Equal, of the same types all the way down, the time zone object's type included."""
    if type(a) is not type(b):
        return False
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (dt.datetime, dt.time)):
        return a == b and type(a.tzinfo) is type(b.tzinfo) and a.fold == b.fold and (
            a.tzinfo is None or str(a.tzinfo) == str(b.tzinfo))
    if isinstance(a, decimal.Decimal) and a.is_nan():
        return str(a) == str(b)
    return bool(a == b)


@pytest.mark.parametrize("name", list(BUILTINS))
def test_builtin_round_trips_through_a_store(tmp_path: Path, name: str) -> None:
    store = ckptfs.open_store(str(tmp_path / "s"))
    value = BUILTINS[name]
    snap = store.start_run("r").checkpoint({"v": value, "in-list": [value, value]})
    assert snap.manifest.required == ("typed-values",)
    got = store.read("r")
    assert _same(got["v"], value) and _same(got["in-list"], [value, value])
    # resume, checkpoint again unchanged: the same entry (the tagged form is canonical)
    run = store.resume("r")
    again = run.checkpoint(run.state)
    assert again.manifest.entries == snap.manifest.entries


def test_plain_state_needs_no_feature(tmp_path: Path) -> None:
    store = ckptfs.open_store(str(tmp_path / "s"))
    assert store.start_run("r").checkpoint({"a": [1, {"b": "c"}]}).manifest.required == ()


def test_equal_values_encode_identically_and_deduplicate() -> None:
    c = ckptfs.Codecs()
    a = {"s": {1, 2, 3, "x", "y"}, "when": dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)}
    b = {"when": dt.datetime.fromisoformat("2024-01-01T00:00:00+00:00"),
         "s": set(reversed(["y", "x", 3, 2, 1]))}
    assert cbor.encode(c.encode(a)) == cbor.encode(c.encode(b))
    # set order follows the encoded bytes, not Python's iteration order
    big = set(range(-300, 300, 7)) | {str(i) for i in range(50)}
    shuffled = set(sorted(big, key=lambda x: hash((str(x), 1))))
    assert cbor.encode(c.encode(big)) == cbor.encode(c.encode(shuffled))
    # the zone is part of the value: the same instant elsewhere is another value
    paris = dt.datetime(2024, 1, 1, 1, tzinfo=PARIS)
    utc = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
    assert paris == utc and cbor.encode(c.encode(paris)) != cbor.encode(c.encode(utc))


def test_equal_typed_values_share_chunks_across_runs(tmp_path: Path) -> None:
    store = ckptfs.open_store(str(tmp_path / "s"))
    big = [{"at": dt.datetime(2024, 1, 1) + dt.timedelta(minutes=i), "id": uuid.UUID(int=i)}
           for i in range(3000)]
    one = store.start_run("one").checkpoint({"log": big}).manifest.entries["log"]
    two = store.start_run("two").checkpoint(
        {"log": [dict(x) for x in big]}).manifest.entries["log"]
    assert one.digest == two.digest and one.chunks == two.chunks  # type: ignore[union-attr]
    assert one.chunks  # type: ignore[union-attr]


def test_appending_typed_items_writes_only_the_new_ones(tmp_path: Path) -> None:
    store = ckptfs.open_store(str(tmp_path / "s"))
    run = store.start_run("r")
    msgs: list[Any] = [{"at": dt.datetime(2024, 1, 1, i % 24), "n": i, "pad": "x" * 200}
                       for i in range(400)]
    run.checkpoint({"m": msgs})
    before = run._writer.bytes_new
    msgs.append({"at": dt.datetime(2025, 1, 1), "n": 400, "pad": "y" * 200})
    run.checkpoint({"m": msgs})
    assert run._writer.bytes_new - before < 4096
    assert store.read("r")["m"] == msgs


@settings(max_examples=60, deadline=None)
@given(st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=8),
              st.datetimes(timezones=st.none() | st.just(dt.timezone.utc) | st.timezones()),
              st.dates(), st.times(), st.timedeltas(), st.uuids(),
              st.decimals(allow_nan=False, places=3), st.frozensets(st.integers(), max_size=4)),
    lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner)
    | st.dictionaries(st.text(max_size=4), inner, max_size=4) | st.sets(st.integers(), max_size=4),
    max_leaves=12))
def test_any_builtin_value_round_trips_canonically(value: Any) -> None:
    c = ckptfs.Codecs()
    encoded = cbor.encode(c.encode(value))
    back = c.decode(cbor.decode(encoded, what="v", allow_bignum=True), what="v")
    assert _same(back, value) or value != value  # NaN-free, but be safe
    assert cbor.encode(c.encode(back)) == encoded  # one encoding per value


def test_registered_classes_round_trip(tmp_path: Path) -> None:
    store = ckptfs.open_store(str(tmp_path / "s"), codecs=app_codecs())
    state = {"order": order(), "money": Money(995, "EUR"), "status": [Status.NEW, Status.PAID],
             "line": Line("z", 3, decimal.Decimal("1.10")),
             "address": Address("Main St", Geo(decimal.Decimal("1.5"), decimal.Decimal("-2")),
                                dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc),
                                (Geo(decimal.Decimal(0), decimal.Decimal(1)),))}
    store.start_run("r").checkpoint(state)
    got = ckptfs.open_store(str(tmp_path / "s"), codecs=app_codecs()).read("r")
    assert got == state
    assert type(got["order"]) is Order and type(got["order"].lines[0]) is Line
    assert type(got["order"].customer.since) is dt.date
    assert got["order"].placed.tzinfo == PARIS and got["order"].note == ("gift", "fragile")
    assert got["status"][1] is Status.PAID
    assert type(got["address"].geo) is Geo and type(got["address"].history) is tuple


def test_the_stored_form_shows_the_names_and_payloads(tmp_path: Path) -> None:
    """What a reader in another language sees: tag 27, the name, plain fields."""
    c = app_codecs()
    plain = c.encode(Line("a", 2, decimal.Decimal("9.95")))
    assert plain == cbor2.CBORTag(TYPED_TAG, ["shop.Line", {
        "sku": "a", "qty": 2, "price": cbor2.CBORTag(TYPED_TAG, ["decimal", "9.95"])}])
    assert c.encode(dt.datetime(2024, 7, 1, 9, tzinfo=PARIS)).value == ["datetime", {
        "wall": "2024-07-01T09:00:00", "offset": 7200, "zone": "Europe/Paris"}]
    assert c.encode(dt.datetime(2024, 7, 1)).value == ["datetime", {
        "wall": "2024-07-01T00:00:00", "offset": None}]  # naive, stated


@pytest.mark.parametrize("value, path, type_name", [
    ({"a": [1, Status.NEW]}, "state['v']['a'][1]", "Status"),
    ((1, {"x": object()}), "state['v']<tuple>[1]['x']", "object"),
    (Line("a", 1, decimal.Decimal(1)), "state['v']", "Line"),
    ({"m": Money(1, "EUR")}, "state['v']['m']", "Money"),
    ({"b": ckptfs.Blob(b"x")}, "state['v']['b']", "Blob"),
    (dt.datetime(2024, 1, 1, tzinfo=dt.timezone(dt.timedelta(microseconds=5))), "state['v']",
     "offset"),
])
def test_unregistered_types_are_refused_and_nothing_is_written(
        tmp_path: Path, value: Any, path: str, type_name: str) -> None:
    store = ckptfs.open_store(str(tmp_path / "s"))
    with pytest.raises(UnregisteredType) as e:
        store.start_run("r").checkpoint({"v": value})
    assert path in str(e.value) and type_name in str(e.value)
    assert isinstance(e.value, TypeError) and e.value.category == "unregistered-type"
    assert store.runs() == []


def test_a_subclass_is_not_its_registered_base() -> None:
    class Special(Line):
        pass

    with pytest.raises(UnregisteredType, match="Special"):
        app_codecs().encode(Special("a", 1, decimal.Decimal(1)))


def test_unknown_type_in_a_stored_snapshot(tmp_path: Path) -> None:
    url = str(tmp_path / "s")
    ckptfs.open_store(url, codecs=app_codecs()).start_run("r").checkpoint(
        {"order": order(), "when": dt.date(2024, 1, 1)})
    with pytest.raises(UnknownType, match=r"'shop\.(Order|Status)'") as e:
        ckptfs.open_store(url).read("r")
    assert e.value.category == "unknown-type" and "register" in str(e.value)
    with pytest.raises(UnknownType):
        ckptfs.open_store(url).resume("r")
    # asked for it, the caller gets the name and payload, and writing it back changes nothing
    raw_store = ckptfs.open_store(url, codecs=ckptfs.Codecs(unknown="raw"))
    got = raw_store.read("r")
    assert isinstance(got["order"], ckptfs.TypedValue) and got["order"].name == "shop.Order"
    assert got["order"].payload["id"] == 7 and got["when"] == dt.date(2024, 1, 1)
    assert isinstance(got["order"].payload["status"], ckptfs.TypedValue)
    run = raw_store.resume("r")
    snap = run.checkpoint(run.state)
    assert snap.manifest.entries == raw_store.get("r@1").manifest.entries
    assert ckptfs.open_store(url, codecs=app_codecs()).read("r")["order"] == order()


def test_importable_but_unregistered_names_build_nothing(tmp_path: Path) -> None:
    """A stored name never imports anything: a module path is just an unknown name."""
    store = ckptfs.open_store(str(tmp_path / "s"))
    store.start_run("r").checkpoint({"v": ckptfs.TypedValue("os.system", "echo pwned")})
    with pytest.raises(UnknownType, match="os.system"):
        store.read("r")


def test_a_renamed_type_restores_through_its_alias(tmp_path: Path) -> None:
    url = str(tmp_path / "s")
    old = ckptfs.Codecs()
    old.register(Line, name="oldshop.Item")
    ckptfs.open_store(url, codecs=old).start_run("r").checkpoint({"l": Line("a", 1,
                                                                            decimal.Decimal(2))})
    new = ckptfs.Codecs()
    new.register(Line, name="shop.Line", aliases=["oldshop.Item"])
    store = ckptfs.open_store(url, codecs=new)
    assert store.read("r")["l"] == Line("a", 1, decimal.Decimal(2))
    run = store.resume("r")
    snap = run.checkpoint(run.state)  # written back under the current name
    assert store.codecs.encode(run.state["l"]).value[0] == "shop.Line"
    assert snap.manifest.entries["l"] != store.get("r@1").manifest.entries["l"]


def test_a_migration_maps_a_renamed_type_and_sees_typed_values(tmp_path: Path) -> None:
    url = str(tmp_path / "s")
    old = ckptfs.Codecs()
    old.register(Line, name="oldshop.Item")
    ckptfs.open_store(url, codecs=old).start_run("r", schema=("shop", 1)).checkpoint(
        {"items": [Line("a", 1, decimal.Decimal(2))], "at": dt.datetime(2024, 1, 1)})
    migrations = ckptfs.Migrations()
    seen: dict[str, Any] = {}

    @migrations.register("shop", 1)
    def rename(state: dict[str, Any]) -> dict[str, Any]:
        seen.update(state)
        state["items"] = [ckptfs.TypedValue("shop.Line", tv.payload) for tv in state["items"]]
        state["at"] = state["at"].replace(tzinfo=dt.timezone.utc)
        return state

    new = ckptfs.Codecs()
    new.register(Line, name="shop.Line")
    store = ckptfs.open_store(url, codecs=new)
    with pytest.raises(UnknownType):  # without the migration the old name is unknown
        store.read("r")
    run = store.resume("r", schema=("shop", 2), migrations=migrations)
    assert type(seen["at"]) is dt.datetime  # the step saw a datetime, not its payload
    assert isinstance(seen["items"][0], ckptfs.TypedValue)
    assert seen["items"][0].payload == {"sku": "a", "qty": 1, "price": decimal.Decimal(2)}
    assert run.state["items"] == [Line("a", 1, decimal.Decimal(2))]
    assert run.state["at"].tzinfo is dt.timezone.utc
    run.checkpoint(run.state)
    assert store.read("r")["items"] == [Line("a", 1, decimal.Decimal(2))]


def test_a_migration_that_leaves_an_unknown_name_fails(tmp_path: Path) -> None:
    url = str(tmp_path / "s")
    ckptfs.open_store(url).start_run("r", schema=("s", 1)).checkpoint(
        {"v": ckptfs.TypedValue("gone.Type", 1)})
    migrations = ckptfs.Migrations()
    migrations.add("s", 1, lambda s: s)
    with pytest.raises(UnknownType, match="gone.Type"):
        ckptfs.open_store(url).resume("r", schema=("s", 2), migrations=migrations)


@pytest.mark.parametrize("name, payload", [
    ("datetime", "2024-01-01"),
    ("datetime", {"wall": "2024-01-01T00:00:00"}),
    ("datetime", {"wall": "2024-01-01 00:00:00", "offset": None}),
    ("datetime", {"wall": "2024-01-01T00:00:00", "offset": 0, "zone": "Nowhere/Atlantis"}),
    ("datetime", {"wall": "2024-01-01T00:00:00", "offset": 0, "zone": "/etc/passwd"}),
    ("datetime", {"wall": "x" * 10_000, "offset": None}),
    ("date", "2024-02-30"),
    ("time", {"wall": "25:00:00", "offset": None}),
    ("timedelta", 10 ** 30),
    ("uuid", "12345678-1234-5678-1234-567812345678"),
    ("decimal", "1e5"),
    ("decimal", "1" * 2000),
    ("set", [1, 1]),
    ("frozenset", [[1]]),
    ("tuple", "abc"),
    ("path", 5),
    ("shop.Line", {"sku": "a"}),
    ("shop.Line", {"sku": "a", "qty": 1, "price": decimal.Decimal(1), "extra": 1}),
    ("shop.Line", [1, 2, 3]),
    ("shop.Order", {"id": "not an int"}),
    ("shop.Status", "refunded"),
    ("shop.Money", 5),
])
def test_hostile_payloads_are_typed_value_errors(tmp_path: Path, name: str, payload: Any) -> None:
    store = ckptfs.open_store(str(tmp_path / "s"), codecs=app_codecs())
    store.start_run("r").checkpoint({"v": {"deep": [ckptfs.TypedValue(name, payload)]}})
    with pytest.raises(TypedValueError) as e:
        store.read("r")
    assert not isinstance(e.value, UnknownType) and e.value.category == "typed-value"
    assert name in str(e.value) and "entry 'v'" in str(e.value)


def test_deep_typed_nesting(tmp_path: Path) -> None:
    store = ckptfs.open_store(str(tmp_path / "s"))
    v: Any = 0
    for _ in range(84):  # three levels each (tag, array, payload array): 252, inside 256
        v = (v,)
    store.start_run("ok").checkpoint({"v": v})
    assert store.read("ok")["v"] == v
    for _ in range(2):
        v = (v,)
    with pytest.raises(TypeError, match="deeper than 256"):
        store.start_run("deep").checkpoint({"v": v})
    very: Any = 0
    for _ in range(100_000):
        very = (very,)
    with pytest.raises(TypeError, match="deeper than 256"):
        store.start_run("deeper").checkpoint({"v": very})
    # hostile bytes: 400 levels of tag 27 are refused by the decoder, not by recursion
    with pytest.raises(FormatError):
        cbor.decode(bytes.fromhex("d81b82657475706c65" * 200 + "00"), what="v",
                    allow_bignum=True)
    assert store.runs() == ["ok"]


def test_malformed_tag_27_is_corrupt() -> None:
    for h in ("d81b6161", "d81b816161", "d81b8361610102", "d81b820101"):
        with pytest.raises(FormatError, match="typed value"):
            cbor.decode(bytes.fromhex(h), what="v", allow_bignum=True)
    with pytest.raises(FormatError):  # not in manifests, records, config
        cbor.decode(cbor.encode(cbor2.CBORTag(27, ["date", "2024-01-01"])), what="manifest")


def test_registry_rules() -> None:
    c = ckptfs.Codecs()
    with pytest.raises(ValueError, match="already registered"):
        c.register(dt.datetime, name="my.Datetime")
    with pytest.raises(ckptfs.errors.InvalidName, match="reserved"):
        c.register(Line, name="Line")
    with pytest.raises(TypeError, match="encode="):
        c.register(Money)
    c.register(Line)
    assert "tests.test_typed_values.Line" in c.names()
    with pytest.raises(ValueError):
        c.register(Customer, name="tests.test_typed_values.Line")
    bare = ckptfs.Codecs(builtins=False)
    with pytest.raises(UnregisteredType):
        bare.encode(dt.date(2024, 1, 1))


_decimals = st.decimals(allow_nan=False, allow_infinity=False, places=2,
                        min_value=-10**6, max_value=10**6)


@settings(max_examples=40, deadline=None)
@given(st.builds(Order, id=st.integers(), status=st.sampled_from(Status),
                 lines=st.lists(st.builds(Line, st.text(max_size=5), st.integers(), _decimals),
                                max_size=3),
                 customer=st.builds(Customer, st.uuids(), st.dates(),
                                    st.frozensets(st.text(max_size=3), max_size=3)),
                 placed=st.datetimes(timezones=st.just(dt.timezone.utc) | st.timezones()),
                 note=st.lists(st.text(max_size=4), max_size=3).map(tuple)),
       st.builds(Address, st.text(max_size=8), st.builds(Geo, _decimals, _decimals),
                 st.none() | st.datetimes(), st.lists(st.builds(Geo, _decimals, _decimals),
                                                      max_size=2).map(tuple)))
def test_registered_classes_round_trip_canonically(order: Order, address: Address) -> None:
    c = app_codecs()
    for value in (order, address, [order, address]):
        encoded = cbor.encode(c.encode(value))
        back = c.decode(cbor.decode(encoded, what="v", allow_bignum=True), what="v")
        assert back == value
        assert cbor.encode(c.encode(back)) == encoded


def test_may_hold_typed_answers_as_a_search_for_the_tag_head() -> None:
    """The reader's skip of the typed pass (``may_hold_typed``) says what ``TYPED_HEAD in
    data`` says, also with many 0xd8 bytes (where it gives up looking at each one)."""
    import random

    from ckptfs.format.typed import TYPED_HEAD, may_hold_typed

    rng = random.Random(7)
    cases = [b"", b"\xd8", b"\x1b", b"\xd8\x1b", b"x\xd8\x1b", b"\x1b\xd8", b"\xd8" * 200,
             b"\xd8" * 200 + b"\x1b", b"\xd8x" * 100 + b"\xd8\x1b", b"\xd8x" * 63 + b"\xd8\x1b",
             b"\xd8x" * 64 + b"\xd8\x1b", b"\xd8x" * 65 + b"\xd8\x1b", b"\xd8x" * 64 + b"\xd8"]
    cases += [bytes(rng.choice(b"\xd8\x1bab") for _ in range(rng.randrange(300)))
              for _ in range(500)]
    for data in cases:
        assert may_hold_typed(data) is (TYPED_HEAD in data), data


def test_a_typed_value_given_in_its_tagged_form_requires_the_feature(tmp_path: Path) -> None:
    """A raw tag 27 (``cbor2.CBORTag(27, [name, payload])``, as a value read with another
    library gives it) is a typed value like ckptfs.TypedValue: the manifest requires
    ``typed-values``, so a reader that does not know them refuses it instead of misreading it
    (spec/format.md 18). Before, it was written as plain data with no required feature, in a
    whole value, inside a list, and appended."""
    import cbor2

    store = ckptfs.open_store(str(tmp_path / "s"), codecs=ckptfs.Codecs(unknown="raw"))
    run = store.start_run("r")
    run.checkpoint({"x": cbor2.CBORTag(27, ["my.type", 1])})
    run.checkpoint({"x": [1, cbor2.CBORTag(27, ["my.type", 2])]})
    run.checkpoint({"x": [1]})
    run.append("x", cbor2.CBORTag(27, ["my.type", 3]))
    required = {s.seq: store.repo.snapshot_at("r", s.seq).manifest.required
                for s in store.snapshots("r")}
    assert required == {1: ("typed-values",), 2: ("typed-values",), 3: (),
                        4: ("typed-values",)}
    assert store.read("r") == {"x": [1, ckptfs.TypedValue("my.type", 3)]}
