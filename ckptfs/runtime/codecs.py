"""The codec registry: application types in state, stored as typed values, never pickled.

::

    codecs = ckptfs.Codecs()                      # datetime, UUID, Decimal, tuple, ... built in
    codecs.register(Order, name="shop.Order")     # a dataclass, attrs class, pydantic model, Enum
    codecs.register(Money, name="shop.Money", encode=lambda m: [m.cents, m.currency],
                    decode=lambda p: Money(*p))
    store = ckptfs.open_store(url, codecs=codecs)

A value of a registered type is stored as tag 27 around ``[name, payload]`` (spec/format.md
18): the name is the one given here, stable across renames of the Python class, and the payload
is plain data. Restoring builds only registered types, by name; a name the application has not
registered is an UnknownType error, or, with ``unknown="raw"``, a ``TypedValue`` holding the
name and payload (checkpointing it writes it back unchanged). The registry runs no code but the
encoders and decoders registered with it (the built-ins' and the adapters').
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Literal, TypeVar

import attrs
import cbor2

from ckptfs.errors import TypedValueError, UnknownType, UnregisteredType
from ckptfs.format import cbor
from ckptfs.format.typed import TypedValue, check_type_name, is_tagged, may_hold_typed, tagged
from ckptfs.format.values import Blob, Ref, StoredBlob
from ckptfs.runtime import codecs_builtin, codecs_classes

T = TypeVar("T", bound=type)
Unknown = Literal["error", "raw"]
_PLAIN = (str, bytes, int, float, bool, type(None))
#: how many containers (and typed values, two levels each) the walks follow before giving up
_MAX_WALK = cbor.MAX_DEPTH + 2


@attrs.frozen
class Codec:
    """One registered type: ``encode(instance) -> payload`` and ``decode(payload) -> instance``.

    The payload may hold values of other registered types (they become typed values of their
    own); a decoder receives its payload with those already restored. ``unordered`` payloads
    (sets) are arrays the registry sorts by encoded bytes, so equal sets encode identically."""

    name: str
    cls: type
    encode: Callable[[Any], Any]
    decode: Callable[[Any], Any]
    unordered: bool = False


class _TooDeep(Exception):
    pass


class _Unregistered(Exception):
    """Raised up the walk, collecting the path; ``why`` is a codec's own refusal."""

    def __init__(self, cls: type, path: list[str], why: str | None = None) -> None:
        self.cls, self.path, self.why = cls, path, why


class Codecs:
    """A registry of named types (``register``), with the built-ins unless ``builtins=False``.

    ``unknown``: what a restore does with a stored type name nobody registered, ``"error"``
    (UnknownType) or ``"raw"`` (a ``TypedValue``). ``aliases`` on ``register`` name the type's
    former names: a stored ``old.Order`` restores as the class now registered as ``shop.Order``.
    """

    def __init__(self, *, builtins: bool = True, unknown: Unknown = "error") -> None:
        if unknown not in ("error", "raw"):
            raise ValueError(f"unknown= takes 'error' or 'raw', not {unknown!r}")
        self.unknown: Unknown = unknown
        self._by_type: dict[type, Codec] = {}
        self._by_name: dict[str, Codec] = {}
        #: the cattrs converter of dataclass and attrs adapters, made by the first such
        #: registration (cattrs costs a process that never registers one ~15 ms to import)
        self._converter: Any = None
        if builtins:
            for name, cls, enc, dec, unordered in codecs_builtin.BUILTINS:
                self._add(Codec(check_type_name(name, builtin=True), cls, enc, dec, unordered))

    # -- registering ---------------------------------------------------------------------------
    def register(self, cls: T, *, name: str | None = None,
                 encode: Callable[[Any], Any] | None = None,
                 decode: Callable[[Any], Any] | None = None,
                 aliases: Iterable[str] = ()) -> T:
        """Register ``cls`` under ``name`` (default ``module.QualName``: give a stable name if
        the class may move). Enums, dataclasses, attrs classes and pydantic v2 models need no
        ``encode``/``decode``; any other class needs both. Returns ``cls`` (usable as a
        decorator: ``codecs.typed(name)``)."""
        if not isinstance(cls, type):
            raise TypeError(f"register takes a class, not {type(cls).__name__}")
        name = check_type_name(name or f"{cls.__module__}.{cls.__qualname__}".replace("<", "_")
                               .replace(">", "_"))
        if cls in self._by_type:
            raise ValueError(f"{cls.__qualname__} is already registered as "
                             f"{self._by_type[cls].name!r}")
        if (encode is None) != (decode is None):
            raise TypeError(f"register {cls.__qualname__}: give both encode and decode, or neither")
        if encode is None or decode is None:
            kind = codecs_classes.kind_of(cls)
            if kind is None:
                raise TypeError(
                    f"register {cls.__qualname__}: not an Enum, dataclass, attrs class or pydantic "
                    "model, so ckptfs cannot tell its fields; pass encode= (instance -> plain "
                    "data) and decode= (plain data -> instance)")
            if self._converter is None and kind in ("attrs", "dataclass"):
                self._converter = codecs_classes.converter(lambda t: t in self._by_type)
            encode, decode = codecs_classes.adapter(cls, kind, self._converter)
        codec = Codec(name, cls, encode, decode)
        self._add(codec)
        for alias in aliases:
            check_type_name(alias)
            if alias in self._by_name:
                raise ValueError(f"type name {alias!r} is already registered")
            self._by_name[alias] = codec
        return cls

    def typed(self, name: str, **kw: Any) -> Callable[[T], T]:
        """Decorator form: ``@codecs.typed("shop.Order")`` above the class."""
        def deco(cls: T) -> T:
            return self.register(cls, name=name, **kw)
        return deco

    def _add(self, codec: Codec) -> None:
        if codec.name in self._by_name:
            raise ValueError(f"type name {codec.name!r} is already registered "
                             f"(for {self._by_name[codec.name].cls.__qualname__})")
        if codec.cls in self._by_type:
            raise ValueError(f"{codec.cls.__qualname__} is already registered as "
                             f"{self._by_type[codec.cls].name!r}")
        self._by_type[codec.cls] = codec
        self._by_name[codec.name] = codec

    def names(self) -> list[str]:
        """Every name a restore maps to a type (aliases included)."""
        return sorted(self._by_name)

    def registered_types(self) -> frozenset[type]:
        """The classes with a codec (built-ins included)."""
        return frozenset(self._by_type)

    def knows(self, value: Any) -> bool:
        """Whether ``value``'s exact type is registered (subclasses are not: a restore must
        build the same type it was given)."""
        return type(value) in self._by_type

    # -- writing -------------------------------------------------------------------------------
    def encode(self, value: Any, *, what: str = "value") -> Any:
        """``value`` with every registered-type value replaced by its tagged form (plain data
        is returned as it is, not copied). UnregisteredType names the path of a value of a type
        nobody registered."""
        try:
            if cbor._is_plain(value, cbor.MAX_DEPTH, tags=False):
                return value
        except RecursionError:
            pass
        try:
            return self._enc(value, 0)
        except _Unregistered as e:
            t = e.cls
            path = "".join(reversed(e.path))
            if e.why is not None:
                raise UnregisteredType(f"{what}{path}: {e.why}. Nothing was written.") from None
            hint = (" (ckptfs.Blob and ckptfs.Ref are whole entries, not parts of a value)"
                    if t in (Blob, Ref, StoredBlob) else "")
            raise UnregisteredType(
                f"{what}{path}: cannot checkpoint a value of type {t.__module__}.{t.__qualname__}"
                f"{hint}: no codec is registered for it. Register it (codecs.register({t.__name__}, "
                "name='myapp.Name') for an Enum, dataclass, attrs class or pydantic model; with "
                "encode= and decode= for any other class) on the ckptfs.Codecs the store was "
                "opened with, or convert it to plain data yourself. Nothing was written.") from None
        except _TooDeep:
            raise UnregisteredType(f"{what}: nesting deeper than {cbor.MAX_DEPTH} levels cannot "
                                   "be checkpointed") from None

    def _enc(self, v: Any, depth: int) -> Any:
        t = type(v)
        if t in _PLAIN:
            return v
        if depth > _MAX_WALK:
            raise _TooDeep
        if t is list:
            out = []
            for i, x in enumerate(v):
                try:
                    out.append(self._enc(x, depth + 1))
                except _Unregistered as e:  # the path is built only on the way out of an error
                    e.path.append(f"[{i}]")
                    raise
            return out
        if t is dict:
            mapped = {}
            for k, x in v.items():
                try:
                    mapped[k] = self._enc(x, depth + 1)
                except _Unregistered as e:
                    e.path.append(f"[{k!r}]")
                    raise
            return mapped
        if t is TypedValue:
            return tagged(v.name, self._enc(v.payload, depth + 2))
        if t is cbor2.CBORTag and is_tagged(v):  # given in its stored form: a typed value too
            return tagged(v.value[0], self._enc(v.value[1], depth + 2))
        codec = self._by_type.get(t)
        if codec is None:
            raise _Unregistered(t, [])
        try:
            try:
                raw = codec.encode(v)
            except UnregisteredType as refused:  # a built-in refusing one value (a tzinfo, ...)
                raise _Unregistered(t, [], str(refused)) from None
            payload = self._enc(raw, depth + 2)
        except _Unregistered as e:
            e.path.append(f"<{codec.name}>")
            raise
        if codec.unordered:
            payload.sort(key=cbor.encode)
        return tagged(codec.name, payload)

    # -- reading -------------------------------------------------------------------------------
    def decode(self, value: Any, *, what: str = "value", unknown: Unknown | None = None,
               content: bytes | None = None) -> Any:
        """A decoded CBOR value with its typed values turned into registered types (bottom-up:
        a decoder sees its payload already restored). ``content``, the value's encoded bytes,
        lets a value without any tag 27 skip the walk."""
        if content is not None and not may_hold_typed(content):
            return value
        return self._dec(value, what, unknown or self.unknown)

    def _dec(self, v: Any, what: str, unknown: Unknown) -> Any:
        t = type(v)
        if t is list:
            return [self._dec(x, what, unknown) for x in v]
        if t is dict:
            return {k: self._dec(x, what, unknown) for k, x in v.items()}
        if t is not cbor2.CBORTag:
            return v
        if not is_tagged(v):
            raise TypedValueError(f"{what}: a typed value (tag 27) must be [type name, payload]")
        name, payload = v.value
        return self._build(name, self._dec(payload, what, unknown), what, unknown)

    def _build(self, name: str, payload: Any, what: str, unknown: Unknown) -> Any:
        codec = self._by_name.get(name)
        if codec is None:
            if unknown == "raw":
                return TypedValue(name, payload)
            raise UnknownType(
                f"{what}: holds a value of type {name!r:.140}, which this application has not "
                f"registered (it knows {len(self._by_name)} type names). Register the class "
                f"under that name (codecs.register(cls, name={name!r:.140}), or aliases= if it "
                "was renamed), map it in a schema migration, or open the store with "
                "Codecs(unknown='raw') to get it as a ckptfs.TypedValue. Nothing was built.")
        try:
            return codec.decode(payload)
        except TypedValueError as e:
            raise TypedValueError(f"{what}: {e}") from None
        except Exception as e:  # a decoder refusing its payload: any exception it raises
            raise TypedValueError(
                f"{what}: the stored {name!r} payload is not what its codec reads "
                f"({type(e).__name__}: {str(e)[:300]}); the snapshot was written by other code "
                "or a different version of the class: migrate it (schema migrations see the "
                "value with Codecs(unknown='raw')) or restore with the matching code.") from None

    def resolve(self, value: Any, *, what: str = "value", unknown: Unknown | None = None,
                _depth: int = 0) -> Any:
        """``value`` (state after a migration) with every ``TypedValue`` whose name is
        registered turned into its type; others stay or raise as ``unknown`` says."""
        mode = unknown or self.unknown
        t = type(value)
        if _depth > _MAX_WALK:
            return value
        if t is TypedValue:
            return self._build(value.name, self.resolve(value.payload, what=what, unknown=mode,
                                                        _depth=_depth + 2), what, mode)
        if t is list:
            return [self.resolve(x, what=what, unknown=mode, _depth=_depth + 1) for x in value]
        if t is dict:
            return {k: self.resolve(x, what=what, unknown=mode, _depth=_depth + 1)
                    for k, x in value.items()}
        return value

    def __repr__(self) -> str:
        return f"<ckptfs.Codecs {len(self._by_type)} types, unknown={self.unknown!r}>"


#: the registry a store uses when it is given none: the built-ins only
def default_codecs() -> Codecs:
    return Codecs()
