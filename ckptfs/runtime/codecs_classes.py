"""Codecs for the application's own classes: Enum, dataclasses and attrs (through cattrs),
pydantic v2 models (``model_dump``/``model_validate``).

Each adapter turns an instance into its fields as plain data and back. Field values of types
the registry knows (a ``datetime``, another registered class) are left to the registry, which
stores them as typed values of their own; fields of unregistered attrs or dataclass types are
structured by cattrs from the field's annotation, as the registered class declares them.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs

if TYPE_CHECKING:
    import cattrs

Encoder = Callable[[Any], Any]
Decoder = Callable[[Any], Any]


def _pydantic_base() -> type | None:
    try:
        import pydantic
    except ImportError:  # pragma: no cover - depends on the environment
        return None
    return pydantic.BaseModel


def kind_of(cls: type) -> str | None:
    """Which adapter fits ``cls``: ``enum``, ``attrs``, ``dataclass``, ``pydantic`` or None."""
    if isinstance(cls, type) and issubclass(cls, enum.Enum):
        return "enum"
    if attrs.has(cls):
        return "attrs"
    if dataclasses.is_dataclass(cls):
        return "dataclass"
    base = _pydantic_base()
    if base is not None and isinstance(cls, type) and issubclass(cls, base):
        return "pydantic"
    return None


def converter(known: Callable[[type], bool]) -> cattrs.Converter:
    """A cattrs converter that leaves values of ``known`` types as they are both ways (the
    registry encodes and decodes them as typed values of their own). cattrs is imported here,
    by the first registration that needs it: a process that only reads plain state never
    pays for it."""
    import cattrs

    conv = cattrs.Converter()

    def is_known(t: Any) -> bool:
        return isinstance(t, type) and known(t)

    def keep(v: Any, t: type) -> Any:
        if type(v) is not t:
            raise TypeError(f"expected a {t.__qualname__}, got {type(v).__qualname__}")
        return v

    conv.register_unstructure_hook_func(is_known, lambda v: v)
    conv.register_structure_hook_func(is_known, keep)
    return conv


def adapter(cls: type, kind: str, conv: cattrs.Converter) -> tuple[Encoder, Decoder]:
    """The (encode, decode) pair for ``cls`` of the given kind."""
    if kind == "enum":
        def enc_enum(v: Any) -> Any:
            return v.value

        def dec_enum(p: Any) -> Any:
            return cls(p)
        return enc_enum, dec_enum
    if kind in ("attrs", "dataclass"):
        import cattrs.gen

        unstructure: Callable[[Any], Any] = cattrs.gen.make_dict_unstructure_fn(cls, conv)
        structure: Callable[[Any, type], Any] = cattrs.gen.make_dict_structure_fn(
            cls, conv, _cattrs_forbid_extra_keys=True)

        def dec_fields(p: Any) -> Any:
            if type(p) is not dict:
                raise TypeError(f"payload must be a map of fields, got {type(p).__name__}")
            return structure(p, cls)
        return unstructure, dec_fields
    if kind == "pydantic":
        def enc_model(v: Any) -> Any:
            return v.model_dump(mode="python", round_trip=True)

        def dec_model(p: Any) -> Any:
            if type(p) is not dict:
                raise TypeError(f"payload must be a map of fields, got {type(p).__name__}")
            return cls.model_validate(p)  # type: ignore[attr-defined]
        return enc_model, dec_model
    raise ValueError(f"no adapter of kind {kind!r}")
