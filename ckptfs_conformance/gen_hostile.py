"""Vectors for the reader rules issue 13 made precise ("Hostile stores": values and names).

- Depth (spec/format.md 5.3): arrays, maps and tags each count one level; a top-level item
  may be 256 deep, an item of a ``cbor-seq`` value 255 (the value is the array).
- ``RUN@SEQ`` (spec/format.md 3.3): SEQ is ``0|[1-9][0-9]*`` in ASCII digits, at most 2^64-1.

Called from generate.py; kept in its own module so that the shared generator only gains calls.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import cbor2

from ckptfs_conformance.render import render_store, tagged

BIGNUM = "c249010000000000000000"  # 2^64: tag 2 around 9 bytes


def depth_vectors(g: Any) -> None:
    """Decoding at and just past the depth limit, bignum tags counted."""
    ok = {"depth-256": "81" * 256 + "00", "depth-256-maps": "a16161" * 255 + "a0"}
    for name, h in ok.items():
        g.vector("cbor", f"decode-{name}", "format.md 5.3: exactly 256 levels decode",
                 ["cbor-decode", "{file:input}"],
                 {"output": tagged(cbor2.loads(bytes.fromhex(h))), "compare": "json"},
                 ["cbor"], {"input": {"hex": h}})
    g.vector("cbor", "value-bignum-depth-256", "format.md 5.3: a bignum is one level (tag); "
             "inside 255 arrays it makes 256: allowed", ["value-decode", "{file:input}"],
             {"output": tagged(cbor2.loads(bytes.fromhex("81" * 255 + BIGNUM))),
              "compare": "json"}, ["cbor"], {"input": {"hex": "81" * 255 + BIGNUM}})
    bad = {"bignum-depth-257": ("81" * 256 + BIGNUM,
                                "a bignum inside 256 arrays is 257 levels: reject"),
           "depth-257-maps": ("a16161" * 256 + "a0", "257 nested maps: reject")}
    for name, (h, desc) in bad.items():
        g.vector("cbor", f"value-reject-{name}", f"format.md 5.3: {desc} (corrupt)",
                 ["value-decode", "{file:input}"], {"error": "corrupt"}, ["cbor"],
                 {"input": {"hex": h}})


def depth_invalid_cases(content_entry: Callable[..., dict[str, Any]],
                        manifest_map: Callable[..., dict[str, Any]],
                        commit_raw: Callable[..., Any]
                        ) -> dict[str, tuple[str, str, Callable[[Path], Any]]]:
    """store-invalid cases: a run r3 whose only value is one level too deep."""

    def add(content: bytes, encoding: str) -> Callable[[Path], Any]:
        def damage(p: Path) -> None:
            entry = content_entry(p, "value", content, encoding=encoding)
            commit_raw(p, manifest_map("r3", 1, {"v": entry}))
        return damage

    item_256 = bytes.fromhex("81" * 256 + "00")
    return {
        "value-depth-257": ("corrupt", "format.md 5.3: a cbor value 257 levels deep",
                            add(bytes.fromhex("81" * 257 + "00"), "cbor")),
        "seq-item-depth-256": ("corrupt", "format.md 5.3: a cbor-seq item 256 deep makes the "
                               "value (the array) 257 deep", add(b"\x01" + item_256, "cbor-seq")),
        "value-bignum-depth-257": ("corrupt", "format.md 5.3: a bignum inside 256 arrays",
                                   add(bytes.fromhex("81" * 256 + BIGNUM), "cbor")),
    }


def depth_valid_store(g: Any, content_entry: Callable[..., dict[str, Any]],
                      manifest_map: Callable[..., dict[str, Any]],
                      commit_raw: Callable[..., Any], init_store: Callable[..., Any],
                      now: int) -> None:
    """A store at every depth limit: reads back exactly."""
    d = g.store_dir("store-valid", "depth-limits")
    init_store(d)
    item_255 = bytes.fromhex("81" * 255 + "00")
    entries = {"cbor-256": content_entry(d, "value", bytes.fromhex("81" * 256 + "00"),
                                         encoding="cbor"),
               "seq-items-255": content_entry(d, "value", b"\x01" + item_255, encoding="cbor-seq"),
               "bignum-256": content_entry(d, "value", bytes.fromhex("81" * 255 + BIGNUM),
                                           encoding="cbor")}
    commit_raw(d, manifest_map("r1", 1, entries))
    g.vector("store-valid", "depth-limits", "format.md 5.3: values at exactly the depth limit "
             "(256; 255 for a cbor-seq item; bignum tags counted) read back",
             ["read", "{store}", str(now)],
             {"output": render_store(str(d), now), "compare": "json"}, ["reader"],
             store="depth-limits.store", beyond_cddl=[])


SEQ_BAD = {"seq-superscript": ("r1@\u00b2", "a superscript two is not a decimal digit"),
           "seq-arabic-indic": ("r1@\u0663", "Arabic-Indic three: ASCII digits only"),
           "seq-fullwidth": ("r1@\uff11", "a fullwidth one: ASCII digits only"),
           "seq-leading-zero": ("r1@01", "no leading zeros"),
           "seq-plus": ("r1@+1", "no sign"),
           "seq-space": ("r1@ 1", "no spaces"),
           "seq-underscore": ("r1@1_0", "no digit separators"),
           "seq-over-u64": ("r1@18446744073709551616", "above 2^64-1")}


def seq_lookup_vectors(g: Any, now: int) -> None:
    """RUN@SEQ grammar, against the lookup store lookup_vectors built."""
    if not (g.store_dir("lookup", "store")).is_dir():
        raise AssertionError("seq_lookup_vectors runs after lookup_vectors")
    for name, (ref, desc) in SEQ_BAD.items():
        g.vector("lookup", name, f"format.md 3.3: {ref!r}: {desc} (path)",
                 ["snapshot", "{store}", str(now), ref], {"error": "path"}, ["reader"],
                 store="store.store")
    for name, ref in {"seq-zero": "r1@0", "seq-u64-max": "r1@18446744073709551615"}.items():
        g.vector("lookup", name, f"format.md 3.3: {ref!r} is well-formed and names no "
                 "snapshot (not-found)", ["snapshot", "{store}", str(now), ref],
                 {"error": "not-found"}, ["reader"], store="store.store")


__all__ = ["depth_vectors", "depth_invalid_cases", "depth_valid_store", "seq_lookup_vectors"]
