"""LangGraph values as ``ckptfs cat`` shows them: ``{"__lg__": "msgpack", "data": bytes}`` (how
CkptfsSaver stores what LangGraph's serializer made) decoded to plain data, each serialized
object as ``{"$lg": "module.Name", "data": fields}``. Nothing is constructed or imported: the
msgpack is read as data (with ormsgpack, which LangGraph installs; without it values stay as
stored)."""

from __future__ import annotations

from typing import Any

import attrs

#: the LangGraph marker key (ckptfs.integrations.langgraph.layout.TAG)
TAG = "__lg__"
#: nesting this renderer follows inside one msgpack value
MAX_DEPTH = 64


def decode_lg(value: Any, depth: int = 0) -> Any:
    """``value`` with every LangGraph msgpack map decoded (lists and dicts walked)."""
    if depth > MAX_DEPTH:
        return value
    if type(value) is dict:
        if value.get(TAG) == "msgpack" and type(value.get("data")) is bytes and len(value) == 2:
            decoded = _msgpack(value["data"])
            return value if decoded is _FAILED else decoded
        return {k: decode_lg(x, depth + 1) for k, x in value.items()}
    if type(value) is list:
        return [decode_lg(x, depth + 1) for x in value]
    return value


_FAILED = object()


@attrs.frozen
class LgObject:
    """One object LangGraph's serializer wrote: its class's name and its fields (as data).
    ``to_json_value`` shows it as ``{"$lg": name, "data": ..., "method"?: ...}``."""

    name: str
    data: Any
    method: Any = None

    def to_json(self, render: Any) -> dict[str, Any]:
        out = {"$lg": self.name, "data": render(self.data)}
        if self.method is not None:
            out["method"] = render(self.method)
        return out


def _msgpack(data: bytes) -> Any:
    try:
        import ormsgpack
    except ImportError:  # pragma: no cover - LangGraph not installed
        return _FAILED

    def ext(code: int, payload: bytes, depth: list[int] = [0]) -> Any:  # noqa: B006
        depth[0] += 1
        try:
            if depth[0] > MAX_DEPTH:
                raise ValueError("too deep")
            tup = ormsgpack.unpackb(payload, ext_hook=ext, option=ormsgpack.OPT_NON_STR_KEYS)
        finally:
            depth[0] -= 1
        if isinstance(tup, (list, tuple)) and len(tup) >= 3 and all(
                isinstance(x, str) for x in tup[:2]):
            return LgObject(f"{tup[0]}.{tup[1]}", _plain(tup[2]),
                            _plain(tup[3]) if len(tup) > 3 else None)
        return LgObject(f"ext-{code}", _plain(tup))

    try:
        return _plain(ormsgpack.unpackb(data, ext_hook=ext, option=ormsgpack.OPT_NON_STR_KEYS))
    except Exception:  # not LangGraph msgpack after all: show it as stored
        return _FAILED


def _plain(v: Any, depth: int = 0) -> Any:
    """JSON-friendly: tuples as lists, map keys as text."""
    if depth > MAX_DEPTH:
        return None
    if isinstance(v, (list, tuple)):
        return [_plain(x, depth + 1) for x in v]
    if isinstance(v, dict):
        return {k if isinstance(k, str) else str(k): _plain(x, depth + 1) for k, x in v.items()}
    return v
