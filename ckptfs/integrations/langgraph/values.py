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

import logging
import threading
import warnings
from typing import Any

import cbor2
from langgraph.checkpoint.serde.base import SerializerProtocol

from ckptfs.errors import CorruptSnapshot
from ckptfs.format.cbor import check_plain
from ckptfs.format.typed import TypedValue
from ckptfs.integrations.langgraph.layout import TAG
from ckptfs.runtime.codecs import Codecs

log = logging.getLogger("ckptfs.integrations.langgraph")

#: the (module, name) pairs LangGraph's serializer refused to build on this thread, while a
#: Packer listens (``_serde_events``); None when nobody listens
_heard = threading.local()


def _listen(event: Any) -> None:
    """LangGraph's serde event hook: note a class its allow-list kept from being built."""
    got = getattr(_heard, "names", None)
    if got is not None and event.get("kind") == "msgpack_blocked":
        got.add(f"{event.get('module')}.{event.get('name')}")


try:  # LangGraph >= 1.0: an event per class its strict allow-list refused
    from langgraph.checkpoint.serde.event_hooks import register_serde_event_listener

    register_serde_event_listener(_listen)
except ImportError:  # pragma: no cover - older LangGraph: only its own log line
    pass


def raw_type_names(value: Any, found: set[str] | None = None, depth: int = 0) -> set[str]:
    """The type names of the ``TypedValue`` objects in a restored value (unregistered types)."""
    found = set() if found is None else found
    if depth > 200:
        return found
    if type(value) is TypedValue:
        found.add(value.name)
        raw_type_names(value.payload, found, depth + 1)
    elif type(value) in (list, tuple):
        for x in value:
            raw_type_names(x, found, depth + 1)
    elif type(value) is dict:
        for x in value.values():
            raw_type_names(x, found, depth + 1)
    return found


class Packer:
    """Packs and unpacks values for one saver (its serializer and its store's codecs)."""

    def __init__(self, serde: SerializerProtocol, codecs: Codecs) -> None:
        self.serde = serde
        self.codecs = codecs
        #: type names already reported as not restored (each is said once per saver)
        self._reported: set[str] = set()
        self._report_lock = threading.Lock()

    def report(self, names: set[str], how: str) -> None:
        """Say, once per type and saver, that values of these classes did not come back as
        themselves, and which saver argument makes them: ``allowed_types``."""
        with self._report_lock:
            new = sorted(names - self._reported)
            self._reported.update(new)
        for name in new:
            cls = name.rpartition(".")[2] or name
            msg = (f"CkptfsSaver: a checkpoint value of class {name} was restored {how}, not "
                   f"as a {cls}: this saver does not know the class. Pass it as "
                   f"CkptfsSaver(..., allowed_types=[{cls}]) (the class itself, from its "
                   "module) to restore it as itself.")
            log.warning(msg)
            warnings.warn(msg, UserWarning, stacklevel=4)

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

    def report_raw(self, value: Any) -> None:
        """``report`` the unregistered classes whose values ``value`` holds in stored form
        (not when the codecs ask for raw values: the caller wants them so)."""
        if self.codecs.unknown != "raw":
            names = raw_type_names(value)
            if names:
                self.report(names, "as a ckptfs.TypedValue (its stored form)")

    def unpack(self, data: Any, *, what: str = "value", decoded: bool = False) -> Any:
        """The value ``pack`` stored: typed values built by the codecs (only registered types;
        ``decoded``: the store's read already built them), serializer output through the
        serializer (never a pickle)."""
        if type(data) is dict and TAG in data:
            typ, payload = data[TAG], data.get("data")
            if typ == "pickle" or not isinstance(typ, str) or not isinstance(payload, bytes):
                raise CorruptSnapshot(f"refusing to load a value stored as {typ!r}: ckptfs never "
                                      "loads pickles or malformed serializer output")
            return self._loads(typ, payload)
        if not decoded and (type(data) is cbor2.CBORTag or type(data) in (list, dict)):
            # a class this saver does not know comes back in its stored form (TypedValue),
            # so that listing and inspecting work without the application's classes
            value = self.codecs.decode(data, what=what, unknown="raw")
            self.report_raw(value)
            return value
        return data

    def _loads(self, typ: str, payload: bytes) -> Any:
        """LangGraph's serializer, listening for classes its allow-list refuses to build (it
        returns their fields as a dict; ``report`` names the saver argument that fixes it)."""
        outer = getattr(_heard, "names", None)
        heard: set[str] = set()
        _heard.names = heard
        try:
            value = self.serde.loads_typed((typ, payload))
        finally:
            _heard.names = outer
        if heard:
            self.report(heard, "as a dict of its fields")
        return value

    def unpack_channel(self, data: Any, *, what: str = "value", decoded: bool = False) -> Any:
        if type(data) is list:
            return [self.unpack(x, what=what, decoded=decoded) for x in data]
        return self.unpack(data, what=what, decoded=decoded)
