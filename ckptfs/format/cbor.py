"""Canonical CBOR (RFC 8949 section 4.2.1) with ckptfs's restrictions.

Rules (spec section "Canonical CBOR"): definite lengths; shortest integer, length and float
forms; map keys are text strings only, sorted by their encoded bytes (for text keys this equals
cbor2's length-first order); no duplicate keys; no tags except 2 and 3 (bignums) inside user
values; no undefined or simple values other than false, true and null. User values may also
hold typed values, tag 27 around ``[type name, payload]`` (spec/format.md 18, ckptfs.format.typed).
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import blake3
import cbor2

from ckptfs.errors import FormatError, InvalidArgument, NonCanonical
from ckptfs.format.typed import TYPED_TAG, is_tagged

#: The nesting limit of every decoded item (spec/format.md 5.3). Depth counts every array, map
#: and tag on the way down, the outermost included: a scalar is 0 deep, ``[]`` 1, ``[[1]]`` 2, a
#: bignum (tag 2 or 3 around its bytes) 1. This is what cbor2's ``max_depth`` enforces on read.
MAX_DEPTH = 256
#: an item of a ``cbor-seq`` value: the value is the array, which takes one level
SEQ_ITEM_DEPTH = MAX_DEPTH - 1
#: an effect result or approval request: it sits in a record map inside the ledger's
#: ``cbor-seq`` array, which take two levels (inline or not: one rule for both)
LEDGER_VALUE_DEPTH = MAX_DEPTH - 2
#: The most data items one decoded object of the format's own structure may hold (spec/format.md
#: 1, "Limits"): config, run records and container headers, manifests, forwards, head hints and
#: control objects. Every array, map, map key, map value, tag and scalar counts one; a string
#: counts one whatever its length. cbor2 builds every item it decodes as a Python object (an
#: empty array is one byte of CBOR and about 60 bytes of Python), so a few KiB of zstd that
#: inflate to tens of MB of empty arrays made readers allocate gigabytes. The largest
#: legitimate object is a record header locating the chunks of a large blob: 5 items per
#: located chunk and per body, so a 10 GiB blob of the default 64 KiB chunks (160 k chunks) is
#: about 0.8 M items, and the budget covers about 830 k located chunks (a writer refuses a
#: header over it, ``containers.encode_bytes``). Value content (a user's value, an effect
#: result, a ledger) is not bounded by it: a writer takes any plain value up to 64 MiB.
MAX_ITEMS = 1 << 22
#: integers that need a bignum tag (counted as one level)
_U64 = 2 ** 64 - 1
_ALLOWED_SCALARS = (str, bytes, int, float, bool, type(None))


def _no_tag(value: Any, immutable: bool = False) -> Any:
    raise ValueError("CBOR tags are not allowed here")


def _unknown_tag(tag: Any, immutable: bool = False) -> Any:
    if tag.tag == TYPED_TAG:  # only reached where the decoder leaves tag 27 out (user values)
        # cbor2 decodes a tag's content as immutable (tuples, frozendicts): back to plain data
        typed = cbor2.CBORTag(TYPED_TAG, _thaw(tag.value))
        if not is_tagged(typed):
            raise ValueError("a typed value (tag 27) must be an array of a type name (text) and "
                             "one payload item")
        return typed
    raise ValueError(f"unknown CBOR tag {tag.tag}")


def _thaw(v: Any) -> Any:
    """Arrays and maps as list and dict (depth is bounded by the decoder's max_depth)."""
    if type(v) is tuple:
        return [_thaw(x) for x in v]
    if isinstance(v, cbor2.frozendict):
        return {k: _thaw(x) for k, x in v.items()}
    return v


class _Refused(Mapping[int, Callable[..., Any]]):
    """Tag numbers 0 to 65535 but ``allowed``, each mapped to ``_no_tag``: what cbor2 is given
    as ``semantic_decoders``, so that none of the tags it would decode by itself is decoded.
    The same mapping as a dict of 65,536 entries, without building one at import (two of them
    cost ~10-30 ms of every process's start); cbor2 only looks tags up in it."""

    __slots__ = ("_allowed",)

    def __init__(self, allowed: frozenset[int] = frozenset()) -> None:
        self._allowed = allowed

    def __getitem__(self, tag: int) -> Callable[..., Any]:
        if type(tag) is int and 0 <= tag < 65536 and tag not in self._allowed:
            return _no_tag
        raise KeyError(tag)

    def __iter__(self) -> Iterator[int]:
        return (t for t in range(65536) if t not in self._allowed)

    def __len__(self) -> int:
        return 65536 - len(self._allowed)


# cbor2 decodes many tags into Python objects by itself; every one of them is refused.
_NO_TAGS = _Refused()
#: user values: bignums, decoded by cbor2, and typed values, kept as CBORTag (_unknown_tag)
_BIGNUM_ONLY = _Refused(frozenset((2, 3, TYPED_TAG)))


def _decoder(buf: io.BytesIO, allow_bignum: bool) -> cbor2.CBORDecoder:
    """A strict decoder: no indefinite lengths, no duplicate keys, tags by allow-list only."""
    return cbor2.CBORDecoder(
        buf,
        semantic_decoders=_BIGNUM_ONLY if allow_bignum else _NO_TAGS,
        tag_hook=_unknown_tag,
        allow_indefinite=False,
        allow_duplicate_keys=False,
        max_depth=MAX_DEPTH,
    )


def _why(e: BaseException) -> str:
    """cbor2's message, with the cause it wraps (a tag hook's own reason)."""
    cause = e.__cause__
    return f"{e}: {cause}" if isinstance(cause, ValueError) and str(cause) not in str(e) else str(e)


_UINT = rb"(?:[\x00-\x17]|\x18.|\x19.{2}|\x1a.{4}|\x1b.{8})"
#: runs that one regular-expression match counts at C speed, each (one element of a run, its
#: items, its longest encoding): the rows of the format's long tables, matched whole (a row's
#: width is fixed by its heads) -- a chunk list's ``[digest, size]``, a body ``[digest,
#: offset, stored, size]``, a locator ``[prefix, index, start, stored]`` -- and one-byte items
#: (small integers, empty strings, arrays and maps, false, true, null). A legitimate object's
#: large parts are tables, and the bomb of issue 30 is 60 million empty arrays: neither is
#: walked item by item.
_FAST = ((rb"\x82\x58\x20.{32}" + _UINT, 3, 44),
         (rb"\x84(?:\x58\x20.{32}|\x48.{8})" + _UINT * 3, 5, 62))
_RUNS = tuple((re.compile(rb"(?:" + p + rb")++", re.DOTALL), re.compile(p, re.DOTALL), k, w)
              for p, k, w in _FAST)
_ONE_BYTE_RUN = re.compile(rb"[\x00-\x17\x20-\x37\x40\x60\x80\xa0\xf4-\xf6]++")


def _run(mv: bytes, pos: int, n: int, budget: int) -> tuple[int, int, int]:
    """``(elements, items, end)`` of the longest run of one kind (``_FAST``, or one-byte
    items) at ``pos``, the first ``n`` items of an array or map (no more than ``n`` elements,
    or nothing is counted), scanning no further than ``budget`` more items could reach.
    (0, 0, pos) when none starts there."""
    m = _ONE_BYTE_RUN.match(mv, pos, pos + min(n, budget + 1))
    if m:
        got = m.end() - pos
        return got, got, m.end()
    for whole, one, k, w in _RUNS:
        m = whole.match(mv, pos, pos + min(n, budget // k + 1) * w)
        if m:
            got = one.subn(b"", mv[pos:m.end()])[1]
            if got <= n:
                return got, got * k, m.end()
    return 0, 0, pos


def _leaf_size(ib: int) -> int:
    """The encoded length of an item that starts with byte ``ib`` when its head alone says it
    (an integer, a float, false, true, null, a string under 24 bytes, an empty array or map:
    nothing below it to count), else 0."""
    major, ai = ib >> 5, ib & 31
    if (major < 2 or major == 7 and ai > 24) and ai < 28:
        return 1 if ai < 24 else 1 + (1 << (ai - 24))
    if major in (2, 3) and ai < 24:
        return 1 + ai
    return 1 if ib in (0x80, 0xa0, 0xf4, 0xf5, 0xf6) else 0


_LEAF = tuple(_leaf_size(i) for i in range(256))
#: the item budgets a reader refused (by BLAKE3 of the object): the entry points that read one
#: object several times (a listing, then a read) walk a hostile one once. Bounded.
_REFUSED: dict[bytes, str] = {}


def count_items(data: bytes | memoryview, *, what: str, budget: int = MAX_ITEMS) -> int:
    """The number of data items in the one CBOR item ``data`` holds, read from the heads alone
    (nothing is built: a string is skipped by its length), refusing with FormatError once it
    passes ``budget``, or when the item is nested deeper than MAX_DEPTH, uses an indefinite
    length, a reserved head or a simple value other than false, true and null, is cut short or
    followed by other bytes. O(min(items, budget)) steps (a long run of one-byte items or of
    table rows is one C call, ``_FAST``), O(MAX_DEPTH) memory.

    Items are at least one byte each, so ``decode`` calls this only for objects longer than
    their budget: a smaller object cannot pass it, and the common path pays nothing."""
    mv = data if isinstance(data, bytes) else bytes(data)
    key = blake3.blake3(mv).digest() + budget.to_bytes(8, "big")
    why = _REFUSED.get(key)
    if why is None:
        try:
            return _count(mv, budget)
        except _Bad as e:
            why = str(e)
            if len(_REFUSED) >= 64:
                _REFUSED.clear()
            _REFUSED[key] = why
    raise FormatError(f"{what}: {why}")


class _Bad(Exception):
    """Why ``_count`` refused (FormatError names the object)."""


def _count(mv: bytes, budget: int) -> int:
    end = len(mv)
    leaf = _LEAF
    pos = 0
    items = 0
    left = 1  # items still to read at the innermost open level (the top level holds one)
    stack: list[int] = []  # ``left`` of each enclosing level
    deep = f"not valid ckptfs CBOR (nesting deeper than {MAX_DEPTH} levels)"
    try:
        while True:
            if not left:
                if not stack:
                    break
                left = stack.pop()
                continue
            left -= 1
            items += 1
            if items > budget:
                raise _Bad(f"holds more than {budget} CBOR data items (format.md 1, \"Limits\"); "
                           "no conforming writer writes that, and it is not decoded")
            ib = mv[pos]
            size = leaf[ib]
            if size:
                pos += size
                continue
            pos += 1
            ai = ib & 31
            if ai < 24:
                arg = ai
            elif ai < 28:
                w = 1 << (ai - 24)
                arg = int.from_bytes(mv[pos:pos + w], "big")
                pos += w
            elif ib == 0xff or ai == 31:
                raise _Bad(f"not valid ckptfs CBOR (indefinite length at byte {pos - 1})")
            else:
                raise _Bad(f"not valid ckptfs CBOR (reserved head 0x{ib:02x} at byte {pos - 1})")
            major = ib >> 5
            if major < 4:  # a string of 24 bytes or more
                pos += arg
                if pos > end:
                    break
                continue
            if major == 7:
                raise _Bad(f"not valid ckptfs CBOR (simple value at byte {pos - 1}: only false, "
                           "true and null are allowed)")
            n = arg if major == 4 else 2 * arg if major == 5 else 1
            if n > end - pos:  # every item takes at least one byte
                pos = end + 1
                break
            if len(stack) >= MAX_DEPTH:
                raise _Bad(deep)
            stack.append(left)
            left = n
            if n > 16 and major < 6:  # a long array or map: its items may be a run
                got, k, after = _run(mv, pos, n, budget - items)
                if got:
                    if k > got and len(stack) >= MAX_DEPTH:  # rows: arrays one level down
                        raise _Bad(deep)
                    items += k
                    left -= got
                    pos = after
                    if items > budget:
                        left, items = 1, budget  # the next round refuses it
    except IndexError:
        pos = end + 1
    if pos > end:
        raise _Bad("not valid ckptfs CBOR (truncated)")
    if pos != end:
        raise _Bad(f"{end - pos} byte(s) after the CBOR item (truncated or damaged); exactly "
                   "one item is allowed")
    return items


def check_items(data: bytes, *, what: str) -> bytes:
    """A writer's side of MAX_ITEMS: ``data`` (the canonical bytes of a structural object it is
    about to write) when it holds no more items than readers accept, else FormatError saying
    what to do. Costs nothing below MAX_ITEMS bytes."""
    if len(data) > MAX_ITEMS:
        try:
            count_items(data, what=what)
        except FormatError as e:
            raise FormatError(
                f"{what} would hold more than {MAX_ITEMS} CBOR data items, which readers refuse "
                "(format.md 1, \"Limits\"): a snapshot names or locates too many chunks. Store "
                "large data with a larger chunker average (fewer chunks), or split it across "
                f"snapshots ({e})") from e
    return data


def encode(value: Any) -> bytes:
    """Encode ``value`` canonically. The value must already be plain data (see check_plain)."""
    try:
        return cbor2.dumps(value, canonical=True)
    except (cbor2.CBOREncodeError, TypeError, ValueError) as e:
        raise FormatError(f"cannot encode value as CBOR: {e}") from e


def decode(data: bytes | memoryview, *, what: str, allow_bignum: bool = False,
           check_canonical: bool = True, max_items: int | None = None) -> Any:
    """Strictly decode one CBOR item; raise FormatError/NonCanonical naming ``what``.
    ``max_items``: refuse an item of more data items than this before building any; by
    default MAX_ITEMS for the format's own objects, and no budget for value content (what
    ``allow_bignum`` decodes: a user's value, bounded by its size alone)."""
    budget = max_items if max_items is not None else None if allow_bignum else MAX_ITEMS
    if budget is not None and len(data) > budget:
        count_items(data, what=what, budget=budget)
    buf = io.BytesIO(data)
    try:
        value = _decoder(buf, allow_bignum).decode()
    except (cbor2.CBORDecodeError, ValueError, TypeError, RecursionError, MemoryError) as e:
        raise FormatError(f"{what}: not valid ckptfs CBOR ({_why(e)})") from e
    if buf.tell() != len(data):
        raise FormatError(f"{what}: {len(data) - buf.tell()} byte(s) after the CBOR item "
                          "(truncated or damaged); exactly one item is allowed")
    check_plain(value, what=what, decoded=True)
    if check_canonical and cbor2.dumps(value, canonical=True) != bytes(data):
        raise NonCanonical(
            f"{what}: CBOR is valid but not canonical (key order, integer/length/float width, or "
            "trailing bytes); it was not written by a conforming writer"
        )
    return value


def decode_sequence(data: bytes | memoryview, *, what: str) -> list[Any]:
    """Decode a CBOR sequence (RFC 8742) of plain items, as written for list entries."""
    buf = io.BytesIO(data)
    end = len(data)
    out: list[Any] = []
    try:
        dec = _decoder(buf, True)
        while buf.tell() < end:
            out.append(dec.decode())
    except (cbor2.CBORDecodeError, ValueError, TypeError, RecursionError, MemoryError, EOFError) as e:
        raise FormatError(f"{what}: not a valid CBOR sequence ({_why(e)})") from e
    check_plain(out, what=what, decoded=True)  # the array counts: items are SEQ_ITEM_DEPTH deep
    return out


_SCALARS = frozenset(_ALLOWED_SCALARS)


def _is_plain(v: Any, limit: int, depth: int = 0, tags: bool = True) -> bool:
    """Fast yes/no version of check_plain (recursive; about 2x faster than the explaining walk).
    ``depth`` is the number of containers around ``v``; ``limit`` the deepest level allowed.
    ``tags=False``: a typed value in tagged form is not plain either (an application's value,
    whose typed values must be seen, so that the manifest requires ``typed-values``)."""
    tv = type(v)
    if tv is cbor2.CBORTag:
        # a typed value: the tag and its array are two levels around the payload
        return tags and is_tagged(v) and depth + 1 < limit and _is_plain(
            v.value[1], limit, depth + 2)
    if tv is dict:
        if depth >= limit:
            return False
        for k, x in v.items():
            if type(k) is not str:
                return False
            tx = type(x)
            if tx is dict or tx is list or tx is cbor2.CBORTag:
                if not _is_plain(x, limit, depth + 1, tags):
                    return False
            elif tx is int:
                if (x > _U64 or x < -_U64 - 1) and depth + 1 >= limit:
                    return False
            elif tx not in _SCALARS:
                return False
        return True
    if tv is list:
        if depth >= limit:
            return False
        for x in v:
            tx = type(x)
            if tx is dict or tx is list or tx is cbor2.CBORTag:
                if not _is_plain(x, limit, depth + 1, tags):
                    return False
            elif tx is int:
                if (x > _U64 or x < -_U64 - 1) and depth + 1 >= limit:
                    return False
            elif tx not in _SCALARS:
                return False
        return True
    if tv is int:
        return not ((v > _U64 or v < -_U64 - 1) and depth >= limit)
    return tv in _SCALARS


def check_plain(value: Any, *, what: str = "value", decoded: bool = False,
                max_depth: int = MAX_DEPTH) -> None:
    """Raise TypeError (FormatError when ``decoded``) naming the path of the first value that
    is not plain data: None, bool, int, float, str, bytes, list, dict with str keys, at most
    ``max_depth`` levels deep as MAX_DEPTH counts them (a value placed inside other structure
    passes the levels left to it: SEQ_ITEM_DEPTH, LEDGER_VALUE_DEPTH)."""
    try:
        if _is_plain(value, max_depth):
            return
    except RecursionError:
        pass
    deep = f"nesting deeper than {max_depth} levels"
    stack: list[tuple[Any, str, int]] = [(value, "", 0)]
    while stack:
        v, path, depth = stack.pop()
        t = type(v)
        if t is dict:
            if depth >= max_depth:
                _bad(what, path, deep, decoded)
            for k, item in v.items():
                if type(k) is not str:
                    _bad(what, path, f"map key {k!r:.60} of type {type(k).__name__} "
                         "(only str keys are allowed)", decoded)
                stack.append((item, f"{path}[{k!r}]", depth + 1))
        elif t is list:
            if depth >= max_depth:
                _bad(what, path, deep, decoded)
            for i, item in enumerate(v):
                stack.append((item, f"{path}[{i}]", depth + 1))
        elif t is cbor2.CBORTag and is_tagged(v):
            if depth + 1 >= max_depth:
                _bad(what, path, deep, decoded)
            stack.append((v.value[1], f"{path}<{v.value[0]}>", depth + 2))
        elif t is int and (v > _U64 or v < -_U64 - 1) and depth >= max_depth:
            _bad(what, path, f"{deep} (an integer outside 64 bits is a CBOR tag, one level)",
                 decoded)
        elif t in _ALLOWED_SCALARS:
            continue
        else:
            _bad(what, path, f"value of type {t.__module__}.{t.__qualname__}", decoded)


def _bad(what: str, path: str, why: str, decoded: bool) -> None:
    where = f"{what}{path}" if path else what
    if decoded:
        raise FormatError(f"{where}: {why} is not allowed in ckptfs CBOR")
    raise InvalidArgument(  # a TypeError too, as callers expect
        f"{where}: cannot checkpoint a {why}. ckptfs stores plain data (None, bool, int, "
        "float, str, bytes, list, dict with str keys) and the types registered with the "
        "store's ckptfs.Codecs (built in: datetime, date, time, timedelta, UUID, Decimal, "
        "tuple, set, frozenset, paths; your own classes with codecs.register(Cls, "
        "name='myapp.Name')); wrap raw bytes or files in ckptfs.Blob, external data in "
        "ckptfs.Ref, and convert anything else yourself (nothing is converted silently)."
    )
