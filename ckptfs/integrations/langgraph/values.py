"""How CkptfsSaver stores LangGraph values: plain data as it is, values of registered types as
ckptfs typed values (spec/format.md 18), anything else through LangGraph's serializer, never
as a pickle.

Order of preference, per value (a list channel: per item):

1. plain data (None, bool, int, float, str, bytes, list, dict with str keys): stored as it is;
2. values the store's ``ckptfs.Codecs`` can encode all the way down (the built-ins: datetime,
   date, time, timedelta, UUID, Decimal, tuple, set, frozenset, paths; plus every class given in
   ``allowed_types`` or registered on the codecs): stored as typed values, readable by any
   ckptfs reader, restored as their own types by name and only if registered;
3. anything else: LangGraph's ``dumps_typed`` (msgpack with its allow-list; LangChain messages
   and LangGraph's own types go this way), kept as ``{"__lg__": type, "data": bytes}``. A
   ``pickle`` type is refused both ways.
"""

from __future__ import annotations

from typing import Any

import cbor2
from langgraph.checkpoint.serde.base import SerializerProtocol

from ckptfs.errors import CorruptSnapshot
from ckptfs.format.cbor import check_plain
from ckptfs.integrations.langgraph.layout import TAG
from ckptfs.runtime.codecs import Codecs


class Packer:
    """Packs and unpacks values for one saver (its serializer and its store's codecs)."""

    def __init__(self, serde: SerializerProtocol, codecs: Codecs) -> None:
        self.serde = serde
        self.codecs = codecs

    def pack(self, value: Any) -> tuple[Any, bool]:
        """The stored form of ``value`` and whether it holds typed values."""
        if not (type(value) is dict and TAG in value):
            try:
                encoded = self.codecs.encode(value)
                check_plain(encoded)  # map keys, depth: what the codecs leave to the store
                return encoded, encoded is not value
            except TypeError:
                pass
        typ, data = self.serde.dumps_typed(value)
        if typ == "pickle":
            raise TypeError(f"CkptfsSaver refuses to pickle a {type(value).__qualname__}; "
                            "register it (CkptfsSaver(..., allowed_types=[cls]) for a dataclass, "
                            "attrs class, pydantic model or Enum; codecs.register(cls, encode=, "
                            "decode=) for others) or make it msgpack-serialisable")
        return {TAG: typ, "data": data}, False

    def pack_channel(self, value: Any) -> tuple[Any, bool]:
        """A channel value: a list item by item (a message history stays an appendable list)."""
        if type(value) is not list:
            return self.pack(value)
        out = []
        typed = False
        for x in value:
            packed, t = self.pack(x)
            out.append(packed)
            typed = typed or t
        return out, typed

    def unpack(self, data: Any, *, what: str = "value", decoded: bool = False) -> Any:
        """The value ``pack`` stored: typed values built by the codecs (only registered types;
        ``decoded``: the store's read already built them), serializer output through the
        serializer (never a pickle)."""
        if type(data) is dict and TAG in data:
            typ, payload = data[TAG], data.get("data")
            if typ == "pickle" or not isinstance(typ, str) or not isinstance(payload, bytes):
                raise CorruptSnapshot(f"refusing to load a value stored as {typ!r}: ckptfs never "
                                      "loads pickles or malformed serializer output")
            return self.serde.loads_typed((typ, payload))
        if not decoded and (type(data) is cbor2.CBORTag or type(data) in (list, dict)):
            return self.codecs.decode(data, what=what)
        return data

    def unpack_channel(self, data: Any, *, what: str = "value", decoded: bool = False) -> Any:
        if type(data) is list:
            return [self.unpack(x, what=what, decoded=decoded) for x in data]
        return self.unpack(data, what=what, decoded=decoded)
