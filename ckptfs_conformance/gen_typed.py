"""Vectors for typed values (spec/format.md 18, issue 17), category ``typed``.

* ``decode-*``: value content holding typed values decodes, for a reader that knows no type
  at all, to the type name and the plain payload (rendered ``{"$typed": [name, payload]}``);
  application types (``shop.Order``) included.
* ``encode-*``: the canonical bytes a writer produces for each built-in type (the payload
  shapes of 18.3, set items sorted by encoded bytes).
* ``roundtrip-*``: a reader that implements the built-ins turns the bytes into its own types
  and writes them back identically (``typed-roundtrip``).
* ``reject-*``: malformed tag 27 content is ``corrupt``; a built-in payload of the wrong shape
  or in a non-canonical text form is ``typed-value``; an application name the reader has not
  registered is ``unknown-type``; tag 27 outside user values is ``corrupt``.
"""

from __future__ import annotations

import datetime as dt
import decimal
import pathlib
import uuid
import zoneinfo
from typing import Any

import cbor2

from ckptfs.format import cbor
from ckptfs.format.typed import tagged as typed
from ckptfs.runtime.codecs import Codecs
from ckptfs_conformance.render import canonical_json, tagged

CAT = "typed"
UTC = dt.timezone.utc
PARIS = zoneinfo.ZoneInfo("Europe/Paris")

#: built-in values a writer encodes (name -> Python value); each becomes encode-, decode- and
#: roundtrip- vectors
BUILTIN_VALUES: dict[str, Any] = {
    "datetime-utc": dt.datetime(2024, 3, 1, 12, 30, 5, tzinfo=UTC),
    "datetime-offset-micro": dt.datetime(2024, 3, 1, 12, 30, 5, 120,
                                         tzinfo=dt.timezone(dt.timedelta(hours=-5, minutes=-30))),
    "datetime-naive": dt.datetime(1999, 12, 31, 23, 59, 59),
    "datetime-zone": dt.datetime(2024, 7, 1, 9, 0, tzinfo=PARIS),
    "datetime-zone-fold": dt.datetime(2024, 10, 27, 2, 30, tzinfo=PARIS, fold=1),
    "date": dt.date(2024, 2, 29),
    "time-naive": dt.time(8, 15),
    "time-offset": dt.time(8, 15, 0, 5, tzinfo=dt.timezone(dt.timedelta(hours=2))),
    "timedelta": dt.timedelta(days=-1, seconds=5, microseconds=7),
    "uuid": uuid.UUID("12345678-1234-5678-9abc-def012345678"),
    "decimal": decimal.Decimal("12.50"),
    "decimal-exponent": decimal.Decimal("1E+3"),
    "decimal-nan": decimal.Decimal("-NaN"),
    "tuple": (1, "two", (3.5,)),
    "set": {"b", "a", "cc", 10},
    "frozenset-empty": frozenset(),
    "path": pathlib.Path("/var/data/run.log"),
    "pure-windows-path": pathlib.PureWindowsPath("C:/Users/a"),
    "nested": {"when": [dt.date(2024, 1, 1), {"ids": (uuid.UUID(int=1),)}]},
}

#: application types as a reader that has not registered them sees them
UNKNOWN_VALUES: dict[str, Any] = {
    "app-type": typed("shop.Order", {"id": 7, "total": typed("decimal", "19.90"),
                                     "when": typed("date", "2024-05-01")}),
    "app-enum": [typed("shop.Status", "paid"), typed("shop.Status", "new")],
}


def _h(*parts: str) -> str:
    return "".join(parts)


#: (hex, category) value content that MUST be rejected
REJECT: dict[str, tuple[str, str]] = {
    "not-array": ("d81b6161", "corrupt"),                                  # 27("a")
    "one-item": ("d81b816161", "corrupt"),                                 # 27(["a"])
    "three-items": ("d81b83616101" "02", "corrupt"),                       # 27(["a", 1, 2])
    "name-not-text": ("d81b820101", "corrupt"),                            # 27([1, 1])
    "unknown-app-type": (cbor.encode(typed("shop.Order", {"id": 7})).hex(), "unknown-type"),
    "unknown-builtin-name": (cbor.encode(typed("datetime2", "x")).hex(), "unknown-type"),
    "datetime-not-map": (cbor.encode(typed("datetime", "2024-01-01T00:00:00")).hex(),
                         "typed-value"),
    "datetime-extra-key": (cbor.encode(typed("datetime", {"wall": "2024-01-01T00:00:00",
                                                          "offset": 0, "x": 1})).hex(),
                           "typed-value"),
    "datetime-wall-not-canonical": (cbor.encode(typed("datetime", {
        "wall": "2024-01-01T00:00:00.000000", "offset": None})).hex(), "typed-value"),
    "datetime-wall-with-offset": (cbor.encode(typed("datetime", {
        "wall": "2024-01-01T00:00:00+01:00", "offset": 3600})).hex(), "typed-value"),
    "datetime-offset-a-day": (cbor.encode(typed("datetime", {
        "wall": "2024-01-01T00:00:00", "offset": 86400})).hex(), "typed-value"),
    "datetime-zone-without-offset": (cbor.encode(typed("datetime", {
        "wall": "2024-01-01T00:00:00", "offset": None, "zone": "Europe/Paris"})).hex(),
        "typed-value"),
    "datetime-zone-path": (cbor.encode(typed("datetime", {
        "wall": "2024-01-01T00:00:00", "offset": 0, "zone": "../../etc/passwd"})).hex(),
        "typed-value"),
    "uuid-15-bytes": (cbor.encode(typed("uuid", b"\x00" * 15)).hex(), "typed-value"),
    "decimal-not-canonical": (cbor.encode(typed("decimal", "01.5")).hex(), "typed-value"),
    "decimal-not-a-number": (cbor.encode(typed("decimal", "one")).hex(), "typed-value"),
    "timedelta-float": (cbor.encode(typed("timedelta", 1.5)).hex(), "typed-value"),
    "set-duplicate": (cbor.encode(typed("set", [1, 1])).hex(), "typed-value"),
    "set-unhashable-item": (cbor.encode(typed("set", [[1]])).hex(), "typed-value"),
    "tuple-not-array": (cbor.encode(typed("tuple", {"a": 1})).hex(), "typed-value"),
    "date-not-text": (cbor.encode(typed("date", 20240101)).hex(), "typed-value"),
    "nested-bad-payload": (cbor.encode({"a": [typed("tuple", [typed("uuid", b"")])]}).hex(),
                           "typed-value"),
    "deep-typed-nesting": (("d81b82657475706c65" * 200) + "00", "corrupt"),  # 400 levels
}


def _tuples(n: int) -> str:
    """``n`` tuples, each one item around the next: 3 levels each (tag, array, array)."""
    v: Any = 0
    for _ in range(n):
        v = typed("tuple", [v])
    return cbor.encode(v).hex()


def vectors(g: Any) -> None:
    codecs = Codecs()
    for name, value in BUILTIN_VALUES.items():
        plain = codecs.encode(value)
        h = cbor.encode(plain).hex()
        g.vector(CAT, f"encode-{name}", "format.md 18.3: the canonical bytes of a built-in "
                 "typed value (writers)", ["cbor-encode", "{file:input}"],
                 {"output": h, "compare": "text"}, ["cbor-encode", "typed-values"],
                 {"input": {"text": canonical_json(tagged(plain))}})
        g.vector(CAT, f"decode-{name}", "format.md 18.1: a reader that knows no type sees the "
                 "type name and the plain payload", ["value-decode", "{file:input}"],
                 {"output": tagged(plain), "compare": "json"}, ["cbor", "typed-values"],
                 {"input": {"hex": h}})
        g.vector(CAT, f"roundtrip-{name}", "format.md 18.3: decoded into the reader's own "
                 "types and encoded again, the bytes are the same", ["typed-roundtrip",
                                                                    "{file:input}"],
                 {"output": h, "compare": "text"}, ["typed-values"], {"input": {"hex": h}})
    for name, plain in UNKNOWN_VALUES.items():
        h = cbor.encode(plain).hex()
        g.vector(CAT, f"decode-{name}", "format.md 18.5: an application type the reader does "
                 "not know decodes to its name and payload", ["value-decode", "{file:input}"],
                 {"output": tagged(plain), "compare": "json"}, ["cbor", "typed-values"],
                 {"input": {"hex": h}})
        g.vector(CAT, f"raw-{name}", "format.md 18.5: returned raw when the caller asks, and "
                 "written back byte for byte", ["typed-roundtrip-raw", "{file:input}"],
                 {"output": h, "compare": "text"}, ["typed-values"], {"input": {"hex": h}})
    h = _tuples(84)  # 84 x 3 = 252 levels around the 0: inside the limit
    g.vector(CAT, "decode-deep-252", "format.md 18.1: a tag and its array are two levels; "
             "84 nested one-item tuples are 252 deep and MUST be accepted",
             ["typed-roundtrip", "{file:input}"], {"output": h, "compare": "text"},
             ["typed-values"], {"input": {"hex": h}})
    for name, (hx, category) in REJECT.items():
        op = "value-decode" if category == "corrupt" else "typed-roundtrip"
        g.vector(CAT, f"reject-{name}", f"format.md 18: MUST be rejected as {category}",
                 [op, "{file:input}"], {"error": category}, ["typed-values"],
                 {"input": {"hex": hx}})
    g.vector(CAT, "reject-in-manifest-cbor", "format.md 5.3: tag 27 is a user-value tag only; "
             "in config, manifest or record CBOR it is corrupt", ["cbor-decode", "{file:input}"],
             {"error": "corrupt"}, ["cbor"],
             {"input": {"hex": cbor2.dumps(typed("date", "2024-01-01")).hex()}})
