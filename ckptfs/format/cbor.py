"""Canonical CBOR (RFC 8949 section 4.2.1) with ckptfs's restrictions.

Rules (spec section "Canonical CBOR"): definite lengths; shortest integer, length and float
forms; map keys are text strings only, sorted by their encoded bytes (for text keys this equals
cbor2's length-first order); no duplicate keys; no tags except 2 and 3 (bignums) inside user
values; no undefined or simple values other than false, true and null. User values may also
hold typed values, tag 27 around ``[type name, payload]`` (spec/format.md 18, ckptfs.format.typed).
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import cbor2

from ckptfs.errors import FormatError, NonCanonical
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


def encode(value: Any) -> bytes:
    """Encode ``value`` canonically. The value must already be plain data (see check_plain)."""
    try:
        return cbor2.dumps(value, canonical=True)
    except (cbor2.CBOREncodeError, TypeError, ValueError) as e:
        raise FormatError(f"cannot encode value as CBOR: {e}") from e


def decode(data: bytes | memoryview, *, what: str, allow_bignum: bool = False,
           check_canonical: bool = True) -> Any:
    """Strictly decode one CBOR item; raise FormatError/NonCanonical naming ``what``."""
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


def _is_plain(v: Any, limit: int, depth: int = 0) -> bool:
    """Fast yes/no version of check_plain (recursive; about 2x faster than the explaining walk).
    ``depth`` is the number of containers around ``v``; ``limit`` the deepest level allowed."""
    tv = type(v)
    if tv is cbor2.CBORTag:
        # a typed value: the tag and its array are two levels around the payload
        return is_tagged(v) and depth + 1 < limit and _is_plain(v.value[1], limit, depth + 2)
    if tv is dict:
        if depth >= limit:
            return False
        for k, x in v.items():
            if type(k) is not str:
                return False
            tx = type(x)
            if tx is dict or tx is list or tx is cbor2.CBORTag:
                if not _is_plain(x, limit, depth + 1):
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
                if not _is_plain(x, limit, depth + 1):
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
    raise TypeError(
        f"{where}: cannot checkpoint a {why}. ckptfs stores plain data only (None, bool, int, "
        "float, str, bytes, list, dict with str keys); wrap raw bytes or files in ckptfs.Blob, "
        "external data in ckptfs.Ref, and convert other types yourself (nothing is converted "
        "silently)."
    )
