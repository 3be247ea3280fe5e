"""A C-speed stand-in for walking a list entry to learn that it is plain data and unchanged.

``run.checkpoint(state)`` (the exact path) must look at every item of a list entry at every
commit: whether each is still plain data (a registered type would need a tag, anything else is
refused) and whether the committed items are still what was stored. A Python walk
(``cbor._is_plain``) and cbor2's encoder take several milliseconds for 1,000 chat messages.
ormsgpack (a C extension, in the venv through LangGraph) encodes the same list in a fraction
of that, and with every pass-through option set it refuses, by calling ``default``, every
value that is not one of the exact types dict (str keys only), list, str, int within 64 bits,
float, bool, None, bytes; nesting deeper than 255 containers fails too, inside every ckptfs
limit (spec/format.md 5.3). Three other types it encodes natively: ``bytearray`` and
``memoryview`` (as msgpack bin, like bytes) and ``ormsgpack.Ext`` (msgpack ext, which no plain
value produces). So ``strict_pack_items(v)`` succeeding means: ``v`` is plain data except
perhaps for those three. A writer rules them out by knowing that the items committed last time
were *pure* (``impure`` is false for each: no byte string, no integer outside 64 bits, no
other type; an exact walk, run on new items only): bytes equal to pure items' bytes contain no
msgpack bin and no ext, so no bytearray, memoryview or Ext either.

Encodings of distinct plain values differ (types are tagged, floats are their 64 bits, maps
keep their order), and each item's encoding is self-delimiting: when the items' bytes start
with the bytes of the items committed last time, those items are equal, value for value and
type for type, to what was committed, and so are their canonical CBOR encodings. None of this
is written anywhere: the bytes only ever meet other bytes of this module.
"""

from __future__ import annotations

from typing import Any

import cbor2

try:
    import ormsgpack
except ImportError:  # pragma: no cover - the exact Python walk and cbor2 are used instead
    ormsgpack = None  # type: ignore[assignment]

#: every pass-through: tuples, subclasses, enums, dataclasses, datetimes, UUIDs and integers
#: outside 64 bits all go to ``default`` (which refuses) instead of being encoded natively
_STRICT = 0 if ormsgpack is None else (
    ormsgpack.OPT_PASSTHROUGH_BIG_INT | ormsgpack.OPT_PASSTHROUGH_DATACLASS
    | ormsgpack.OPT_PASSTHROUGH_DATETIME | ormsgpack.OPT_PASSTHROUGH_ENUM
    | ormsgpack.OPT_PASSTHROUGH_SUBCLASS | ormsgpack.OPT_PASSTHROUGH_TUPLE
    | ormsgpack.OPT_PASSTHROUGH_UUID)
#: whether the fast form is available at all
AVAILABLE = ormsgpack is not None


def _refuse(value: Any) -> Any:
    raise TypeError(type(value).__name__)


#: a fast form: bytes and the offset where the items' encodings start (the list's msgpack
#: head is skipped, not sliced off: a copy of a megabyte costs as much as the comparison)
Form = tuple[bytes, int]


def strict_pack_items(items: list[Any]) -> Form | None:
    """The msgpack encoding of ``items`` (a list) and where its items start, when every part
    of every item is of an exact plain type or bytearray/memoryview/Ext (see the module
    docstring) and no item nests more than 254 containers; None otherwise (walk them)."""
    if ormsgpack is None or type(items) is not list:
        return None
    try:
        b = ormsgpack.packb(items, option=_STRICT, default=_refuse)
    except (TypeError, ValueError, OverflowError, RecursionError):
        return None
    # the array's head: fixarray (1 byte), array 16 (3) or array 32 (5)
    return b, 1 if b[0] < 0xDC else 3 if b[0] == 0xDC else 5


def extends(form: Form, prefix: bytes | bytearray, at: int = 0) -> bool:
    """Whether ``form``'s items start with the items ``prefix[at:]`` (no copy of either)."""
    b, start = form
    if at:
        with memoryview(prefix) as v, v[at:] as tail:
            return b.startswith(tail, start)
    return b.startswith(prefix, start)


def fast_items(items: list[Any]) -> Form:
    """The fast form of a list entry's items, joined: each item's strict msgpack encoding, or
    (an item that has none: a typed value, an integer outside 64 bits) msgpack ext 1 around
    cbor2's (non-canonical) encoding of it; without ormsgpack, cbor2's encodings. Raises what
    cbor2 raises for a value it cannot encode."""
    if ormsgpack is None:
        return b"".join([cbor2.dumps(x) for x in items]), 0
    got = strict_pack_items(items)
    if got is not None:
        return got
    return b"".join([_one(x) for x in items]), 0


def _one(x: Any) -> bytes:
    got = strict_pack_items([x])
    return got[0][got[1]:] if got is not None else _wrapped(x)


def _wrapped(x: Any) -> bytes:
    return bytes(ormsgpack.packb(ormsgpack.Ext(1, cbor2.dumps(x))))


def impure(v: Any) -> bool:
    """Whether ``v`` holds anything whose fast form could be matched by a value that is not
    the same plain data: a byte string (bytes, bytearray and memoryview all pack as msgpack
    bin), an integer outside 64 bits or a value of another type (both fast-packed as an ext,
    which an ``ormsgpack.Ext`` object could forge). An exact walk; callers run it on new items
    only."""
    stack = [v]
    while stack:
        x = stack.pop()
        t = type(x)
        if t is dict:
            stack.extend(x.values())
        elif t is list:
            stack.extend(x)
        elif t is int:
            if x >= _U64_END or x < _I64_MIN:
                return True
        elif t is not str and t is not float and t is not bool and x is not None:
            return True
    return False


_U64_END = 1 << 64
_I64_MIN = -(1 << 63)


__all__ = ["AVAILABLE", "Form", "extends", "fast_items", "impure", "strict_pack_items"]
