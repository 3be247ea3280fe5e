"""O(change) packing of list channels (issue 14): a message history that grew by a message or
two is packed by packing the new messages only, and the entry writer then appends their bytes.

``CkptfsSaver`` keeps, per list channel of a run, what it last packed (``ListMemo``): the items
LangGraph held (references), a shallow picture of each (the objects its fields hold), and the
packed list it gave the entry writer. A new value is taken as "the old one plus new items" only
when the saver can *see* that it is:

* it is a ``list`` at least as long as the last one;
* every old position holds the very same object (``is``): a message replaced (an edit through
  ``add_messages`` with the same id), removed (``RemoveMessage``) or reordered fails this;
* every old item's fields still hold the very same objects (``vars(item)`` and a pydantic
  model's extra fields, or a dict's items): an attribute assigned in place
  (``msg.content = "edited"``, ``msg.foo = 1``) fails this.

Anything else (another type, a shorter list, an item with no ``__dict__`` that is not an
immutable scalar) takes the full path: every item packed again, the writer comparing bytes. The
one change this cannot see is one made in place *inside* a field of a committed item (appending
to ``msg.additional_kwargs``, say); LangGraph's reducers never do that, and a saver built with
``appends=False`` packs everything every step.
"""

from __future__ import annotations

import operator
from itertools import chain, repeat
from typing import Any

import attrs

from ckptfs.integrations.langgraph.values import Packer

_SCALARS = (str, int, float, bool, bytes, type(None))
_NONE: dict[Any, Any] = {}


@attrs.define
class ListMemo:
    """What was last packed for one list channel."""

    items: list[Any]
    #: ``_picture(items)``: lists that each grow by an append (items' field counts, names and
    #: values; then the same of their pydantic extra fields)
    picture: list[list[Any]]
    #: the stored form: the object the entry writer last encoded, grown in place by appends
    packed: list[Any]
    typed: bool


def _flat(dicts: list[dict[Any, Any]]) -> list[list[Any]]:
    return [list(map(len, dicts)), list(chain.from_iterable(dicts)),
            list(chain.from_iterable(map(dict.values, dicts)))]


def _dicts(items: list[Any]) -> list[dict[Any, Any]] | None:
    """Each item's fields: ``vars(item)``, a dict item itself, nothing for an immutable
    scalar (None: an item whose fields the saver cannot see)."""
    try:
        return list(map(vars, items))
    except TypeError:  # a dict, a scalar, an object without __dict__
        dicts: list[dict[Any, Any]] = []
        for x in items:
            if type(x) is dict:
                dicts.append(x)
            elif type(x) in _SCALARS:
                dicts.append(_NONE)
            elif type(getattr(x, "__dict__", None)) is dict:
                dicts.append(x.__dict__)
            else:
                return None
        return dicts


def _extras(items: list[Any]) -> list[dict[Any, Any]]:
    """A pydantic model's extra fields (``msg.foo = 1`` on a message live outside __dict__)."""
    return [e if type(e := getattr(x, "__pydantic_extra__", None)) is dict else _NONE
            for x in items]


def _picture(items: list[Any]) -> list[list[Any]] | None:
    """What an item's fields hold, flattened over ``items`` into lists that an append only
    extends: per item its number of fields, then all field names, then all field values, and
    the same for pydantic extra fields (None: an item whose fields the saver cannot see)."""
    dicts = _dicts(items)
    if dicts is None:
        return None
    try:
        return _flat(dicts) + _flat(_extras(items))
    except TypeError:  # vars() of a class: a mappingproxy
        return None


def _unchanged(items: list[Any], picture: list[list[Any]]) -> bool:
    """``_seen(_picture(items), picture)`` without building the new picture: the fields'
    counts compared as lists, names and values object by object as they are walked (the
    O(n) part of a step, issue 14: about half the cost of the old way at n = 1000)."""
    dicts = _dicts(items)
    if dicts is None or list(map(len, dicts)) != picture[0]:
        return False
    try:  # equal counts: the walks below have the lengths of picture[1] and picture[2]
        if any(map(operator.is_not, chain.from_iterable(dicts), picture[1])) or any(
                map(operator.is_not, chain.from_iterable(map(dict.values, dicts)),
                    picture[2])):
            return False
    except TypeError:  # vars() of a class: a mappingproxy
        return False
    extras = list(map(getattr, items, repeat("__pydantic_extra__"), repeat(None)))
    if not any(extras):  # none has an extra field (no dict, or empty ones): the usual case
        return not any(picture[3]) and len(picture[3]) == len(items)
    return _seen(_flat(dicts) + _flat(_extras(items)), picture)


def _seen(a: list[list[Any]] | None, b: list[list[Any]]) -> bool:
    """Two pictures are of the same fields holding the same objects."""
    return (a is not None and a[0] == b[0] and a[3] == b[3]
            and all(_same(x, y) for x, y in zip(a, b)))


def _same(a: list[Any], b: list[Any]) -> bool:
    return len(a) == len(b) and all(map(operator.is_, a, b))


def pack_list(memos: dict[str, ListMemo], name: str, value: list[Any], packer: Packer,
              look_inside: bool = True) -> tuple[list[Any], bool]:
    """The stored form of list ``value`` for entry ``name`` and whether it holds typed values;
    packs only the items past the last packed prefix when that prefix is visibly unchanged.
    ``look_inside`` False (``CkptfsSaver(appends="identity")``): the prefix is unchanged when
    it holds the very same objects; their fields are not looked at (an attribute assigned in
    place on a committed item is not seen), so a step costs O(new items), not O(all items)."""
    memo = memos.get(name)
    k = len(memo.items) if memo is not None else -1
    if memo is not None and len(value) >= k and _same(memo.items, value[:k]):
        new = value[k:]
        new_pic = _picture(new) if look_inside else []
        if new_pic is not None and (not look_inside or _unchanged(memo.items, memo.picture)):
            fresh = [packer.pack(x) for x in new]  # all packed before the memo changes
            memo.packed.extend(p for p, _ in fresh)
            memo.typed = memo.typed or any(t for _, t in fresh)
            memo.items.extend(new)
            for part, more in zip(memo.picture, new_pic):
                part.extend(more)
            return memo.packed, memo.typed
    packed_all, typed = packer.pack_channel(value)
    pic = _picture(value) if look_inside else []
    if pic is None:
        memos.pop(name, None)
    else:
        memos[name] = ListMemo(list(value), pic, packed_all, typed)
    return packed_all, typed
