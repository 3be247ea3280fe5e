"""The built-in codecs: standard-library types every ckptfs reader maps the same way.

Names and payload shapes are normative (spec/format.md 18.3), so that a reader in another
language turns ``27(["datetime", {...}])`` into its own date-time type. Every encoder gives one
payload per value (canonical: equal fields, equal bytes); every decoder checks the payload's
shape and refuses anything else with TypedValueError rather than guessing.
"""

from __future__ import annotations

import datetime as dt
import decimal
import pathlib
import re
import uuid
import zoneinfo
from collections.abc import Callable
from typing import Any

from ckptfs.errors import TypedValueError, UnregisteredType

#: IANA time-zone keys as stored: letters, digits and ``_+-/``, no ``..`` (ZoneInfo checks too)
_ZONE = re.compile(r"[A-Za-z0-9_+\-]+(?:/[A-Za-z0-9_+\-]+)*")
_DAY_US = 86_400 * 1_000_000


def _bad(name: str, why: str) -> TypedValueError:
    return TypedValueError(f"stored {name!r} value: {why}")


def _offset(name: str, tz: dt.tzinfo | None, when: dt.datetime | None) -> int | None:
    off = None if tz is None else tz.utcoffset(when)
    if off is None:
        return None
    if off.microseconds:
        raise UnregisteredType(f"cannot checkpoint a {name} whose UTC offset {off} has a "
                               "fraction of a second; ckptfs stores offsets in whole seconds")
    return off.days * 86_400 + off.seconds


def _check_tz(name: str, tz: dt.tzinfo | None, zone_ok: bool) -> None:
    if tz is None or type(tz) is dt.timezone or (zone_ok and type(tz) is zoneinfo.ZoneInfo):
        return
    raise UnregisteredType(
        f"cannot checkpoint a {name} with tzinfo {type(tz).__module__}.{type(tz).__qualname__}: "
        "ckptfs keeps datetime.timezone offsets and zoneinfo.ZoneInfo zones"
        f"{'' if zone_ok else ' (a time of day takes offsets only)'}; convert it to one of "
        "those (nothing is converted silently)")


def _wall(name: str, text: Any, parse: Callable[[str], Any]) -> Any:
    if type(text) is not str or len(text) > 40:
        raise _bad(name, "'wall' must be ISO 8601 text")
    try:
        value = parse(text)
    except ValueError as e:
        raise _bad(name, f"'wall' {text!r} is not ISO 8601 ({e})") from None
    if value.isoformat() != text:  # one spelling per value: canonical, so dedup holds
        raise _bad(name, f"'wall' {text!r} is not in the canonical form {value.isoformat()!r}")
    return value


def _fields(name: str, p: Any, required: set[str], optional: set[str]) -> dict[str, Any]:
    if type(p) is not dict or not required <= p.keys() or not p.keys() <= required | optional:
        raise _bad(name, f"payload must be a map with keys {sorted(required)} "
                         f"(optional {sorted(optional)}), got {_shape(p)}")
    if "fold" in p and p["fold"] != 1:
        raise _bad(name, "'fold' is 1 when present")
    if p["offset"] is not None and (type(p["offset"]) is not int or abs(p["offset"]) >= 86_400):
        raise _bad(name, "'offset' must be null or whole seconds, less than a day")
    return p


def _shape(p: Any) -> str:
    return f"keys {sorted(map(str, p))}" if type(p) is dict else type(p).__name__


def _fixed(offset: int | None) -> dt.timezone | None:
    return None if offset is None else dt.timezone(dt.timedelta(seconds=offset))


# -- datetime, date, time, timedelta -----------------------------------------------------------
def enc_datetime(v: dt.datetime) -> dict[str, Any]:
    _check_tz("datetime", v.tzinfo, True)
    out: dict[str, Any] = {"wall": v.replace(tzinfo=None, fold=0).isoformat(),
                           "offset": _offset("datetime", v.tzinfo, v)}
    if type(v.tzinfo) is zoneinfo.ZoneInfo:
        if v.tzinfo.key is None:
            raise UnregisteredType("cannot checkpoint a datetime in a ZoneInfo made from a file "
                                   "(it has no key); use zoneinfo.ZoneInfo(key)")
        out["zone"] = v.tzinfo.key
    if v.fold:
        out["fold"] = 1
    return out


def dec_datetime(p: Any) -> dt.datetime:
    p = _fields("datetime", p, {"wall", "offset"}, {"zone", "fold"})
    wall: dt.datetime = _wall("datetime", p["wall"], dt.datetime.fromisoformat)
    if wall.tzinfo is not None:
        raise _bad("datetime", "'wall' is local time, without an offset")
    tz: dt.tzinfo | None = _fixed(p["offset"])
    if "zone" in p:
        zone = p["zone"]
        if type(zone) is not str or len(zone) > 64 or not _ZONE.fullmatch(zone) or p["offset"] is None:
            raise _bad("datetime", "'zone' must be an IANA zone key, with an offset")
        try:
            tz = zoneinfo.ZoneInfo(zone)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError) as e:
            raise _bad("datetime", f"time zone {zone!r} is not known on this machine ({e}); "
                                   "install tzdata") from None
    value = wall.replace(tzinfo=tz, fold=p.get("fold", 0))
    if "zone" in p and _offset("datetime", tz, value) != p["offset"]:
        # one value, one encoding: an offset that is not the zone's would be rewritten
        raise _bad("datetime", f"'offset' {p['offset']} is not the offset of zone {p['zone']!r} "
                               f"at {p['wall']} (fold {p.get('fold', 0)})")
    return value


def enc_date(v: dt.date) -> str:
    return v.isoformat()


def dec_date(p: Any) -> dt.date:
    value: dt.date = _wall("date", p, dt.date.fromisoformat)
    return value


def enc_time(v: dt.time) -> dict[str, Any]:
    _check_tz("time", v.tzinfo, False)
    out: dict[str, Any] = {"wall": v.replace(tzinfo=None, fold=0).isoformat(),
                           "offset": _offset("time", v.tzinfo, None)}
    if v.fold:
        out["fold"] = 1
    return out


def dec_time(p: Any) -> dt.time:
    p = _fields("time", p, {"wall", "offset"}, {"fold"})
    wall: dt.time = _wall("time", p["wall"], dt.time.fromisoformat)
    if wall.tzinfo is not None:
        raise _bad("time", "'wall' is local time, without an offset")
    return wall.replace(tzinfo=_fixed(p["offset"]), fold=p.get("fold", 0))


def enc_timedelta(v: dt.timedelta) -> int:
    return (v.days * 86_400 + v.seconds) * 1_000_000 + v.microseconds


def dec_timedelta(p: Any) -> dt.timedelta:
    if type(p) is not int:
        raise _bad("timedelta", f"payload must be an integer of microseconds, got {_shape(p)}")
    try:
        return dt.timedelta(microseconds=p)
    except OverflowError:
        raise _bad("timedelta", f"{p} microseconds is out of range") from None


# -- uuid, decimal, paths ----------------------------------------------------------------------
def enc_uuid(v: uuid.UUID) -> bytes:
    return v.bytes


def dec_uuid(p: Any) -> uuid.UUID:
    if type(p) is not bytes or len(p) != 16:
        raise _bad("uuid", "payload must be 16 bytes")
    return uuid.UUID(bytes=p)


def enc_decimal(v: decimal.Decimal) -> str:
    return str(v)


def dec_decimal(p: Any) -> decimal.Decimal:
    if type(p) is not str or len(p) > 1024:
        raise _bad("decimal", "payload must be decimal text of at most 1024 characters")
    try:
        value = decimal.Decimal(p)
    except decimal.InvalidOperation:
        raise _bad("decimal", f"{p[:60]!r} is not a decimal number") from None
    if str(value) != p:
        raise _bad("decimal", f"{p[:60]!r} is not in the canonical form {str(value)[:60]!r}")
    return value


def _path_decoder(name: str, cls: Callable[[str], Any]) -> Callable[[Any], Any]:
    def dec(p: Any) -> Any:
        if type(p) is not str or "\x00" in p:
            raise _bad(name, "payload must be the path as text")
        value = cls(p)
        if str(value) != p:  # one spelling per value (format.md 18.3): canonical
            raise _bad(name, f"{p[:60]!r} is not in the canonical form {str(value)[:60]!r}")
        return value
    return dec


# -- tuple, set, frozenset ---------------------------------------------------------------------
def dec_tuple(p: Any) -> tuple[Any, ...]:
    if type(p) is not list:
        raise _bad("tuple", f"payload must be an array, got {_shape(p)}")
    return tuple(p)


def _set_decoder(name: str, cls: Callable[[list[Any]], Any]) -> Callable[[Any], Any]:
    def dec(p: Any) -> Any:
        if type(p) is not list:
            raise _bad(name, f"payload must be an array, got {_shape(p)}")
        try:
            out = cls(p)
        except TypeError as e:
            raise _bad(name, f"an item cannot be a member of a set ({e})") from None
        # every NaN is one value (format.md 5.1), though Python's NaN objects differ
        if len(out) != len(p) or sum(type(x) is float and x != x for x in p) > 1:
            raise _bad(name, "the array holds the same item twice")
        return out
    return dec


#: (name, class, encoder, decoder, unordered): the spec's table, in its order
BUILTINS: tuple[tuple[str, type, Callable[[Any], Any], Callable[[Any], Any], bool], ...] = (
    ("datetime", dt.datetime, enc_datetime, dec_datetime, False),
    ("date", dt.date, enc_date, dec_date, False),
    ("time", dt.time, enc_time, dec_time, False),
    ("timedelta", dt.timedelta, enc_timedelta, dec_timedelta, False),
    ("uuid", uuid.UUID, enc_uuid, dec_uuid, False),
    ("decimal", decimal.Decimal, enc_decimal, dec_decimal, False),
    ("tuple", tuple, list, dec_tuple, False),
    ("set", set, list, _set_decoder("set", set), True),
    ("frozenset", frozenset, list, _set_decoder("frozenset", frozenset), True),
    ("path", type(pathlib.Path()), str, _path_decoder("path", pathlib.Path), False),
    ("pure-posix-path", pathlib.PurePosixPath, str,
     _path_decoder("pure-posix-path", pathlib.PurePosixPath), False),
    ("pure-windows-path", pathlib.PureWindowsPath, str,
     _path_decoder("pure-windows-path", pathlib.PureWindowsPath), False),
)
