"""The invalid version 2 stores (``store-invalid/v2-*``): a base store damaged one rule of
spec/v2.md at a time (``INVALID``: containers, compressed headers, the body table, run records,
reading a chunk, forwards), a store with packs (``PACK_INVALID``) and one after gc left
forwards (``FORWARD_INVALID``), each with the error category a reader must report.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cbor2
import zstandard

from ckptfs.format import cbor, framing
from ckptfs.format.cbor_parts import array_head, map_bytes
from ckptfs.format import containers as ct
from ckptfs.format.names import forward_path
from ckptfs_conformance.gen_v2_containers import body_at, edit, flip, join, split
from ckptfs_conformance.gen_v2_stores import (
    P, REC1, REC2, V2, base, chain, forwards, pack_base, packs)


def _noncanonical(m: dict[str, Any]) -> bytes:
    items = sorted(m.items(), key=lambda kv: cbor.encode(kv[0]), reverse=True)
    return bytes([0xa0 + len(items)]) + b"".join(cbor.encode(k) + cbor.encode(v)
                                                 for k, v in items)


def _gap(h: dict[str, Any], area: bytes) -> bytes:
    """One pad byte after body 0; later bodies and body_length shifted: readable, but a gap."""
    b0 = h["bodies"][0]
    for b in h["bodies"][1:]:
        b[1] += 1
    h["body_length"] += 1
    cut = b0[1] + b0[2]
    return area[:cut] + b"\x00" + area[cut:]


def _duplicate(h: dict[str, Any], area: bytes) -> bytes:
    """Body 0 again at the end of the area, with its own row: the same digest twice."""
    b0 = h["bodies"][0]
    h["bodies"].append([b0[0], h["body_length"], b0[2], b0[3]])
    h["body_length"] += b0[2]
    return area + area[b0[1]:b0[1] + b0[2]]


def _overlap(h: dict[str, Any], area: bytes) -> None:
    h["bodies"][1][1] -= 1


def _padded(h: dict[str, Any], area: bytes) -> bytes:
    h["body_length"] += 1
    return area + b"\x00"


def _stored_one(h: dict[str, Any], area: bytes) -> bytes:
    last = h["bodies"][-1]
    cut = last[2] - 1
    last[2] = 1
    h["body_length"] -= cut
    return area[:len(area) - cut]


def _stored_over_max(h: dict[str, Any], area: bytes) -> bytes:
    last = h["bodies"][-1]
    extra = ct.MAX_STORED_SIZE + 1 - last[2]
    last[2] += extra
    h["body_length"] += extra
    return area + bytes(extra)


def _manifest_flip(h: dict[str, Any], area: bytes) -> None:
    m = bytearray(h["manifest"])
    at = bytes(m).index(b"ckptfs-conformance") + 7
    m[at] ^= 1
    h["manifest"] = bytes(m)


INVALID: dict[str, tuple[str, str, Callable[[Path], Any]]] = {
    # name: (category, description, damage of the base store); spec/v2.md 3.1
    "record-bad-magic": ("corrupt", "the head record's magic has one byte changed",
                         lambda p: flip(p / REC2, 1)),
    "record-form-4": ("corrupt", "container form byte 0x04 (only 0x02 and 0x03 exist)",
                      lambda p: (p / REC2).write_bytes(
                          (p / REC2).read_bytes()[:8] + b"\x04" + (p / REC2).read_bytes()[9:])),
    "record-hlen-zero": ("corrupt", "hlen 0 (out of range 1..83886080)",
                         lambda p: _hlen(p, 0)),
    "record-hlen-over-max": ("corrupt", "hlen 83886081 (out of range)",
                             lambda p: _hlen(p, 83886081)),
    "record-hlen-past-end": ("corrupt", "hlen in range but past the end of the file",
                             lambda p: _hlen(p, (p / REC2).stat().st_size + 100)),
    "record-header-digest": ("corrupt", "a byte of the header digest flipped",
                             lambda p: flip(p / REC2, 13 + _hl(p) + 5)),
    "record-header-flipped": ("corrupt", "the head record rewritten with its header as is "
                              "(form 0x02), then a byte of the nonce flipped, digest not "
                              "updated (a damaged header is never interpreted)",
                              lambda p: _flip_nonce(p)),
    "record-noncanonical": ("non-canonical", "the header's keys out of canonical order (its "
                            "digest matches those bytes)",
                            lambda p: (p / REC2).write_bytes(join(_noncanonical(split(
                                (p / REC2).read_bytes())[0]), split((p / REC2).read_bytes())[1]))),
    # 3.1 compressed headers (form 0x03; the header digest matches the stored bytes each time)
    "zheader-digest-stale": ("corrupt", "a form 0x03 header whose nonce was changed and "
                             "compressed again, the digest of the old stored bytes kept (never "
                             "inflated: the digest covers the stored bytes)",
                             lambda p: _zheader(p, lambda raw, h: framing.deflate(cbor.encode(
                                 {**h, "nonce": bytes(16)})), digest_of=True)),
    "zheader-noncanonical": ("non-canonical", "a form 0x03 header whose zstd frame inflates to "
                             "a map with its keys out of canonical order",
                             lambda p: _zheader(p, lambda raw, h: framing.deflate(
                                 _noncanonical(h)))),
    "zheader-not-zstd": ("corrupt", "form byte 0x03 before a header stored as plain CBOR (not a "
                         "zstd frame)", lambda p: _zheader(p, lambda raw, h: raw)),
    "zheader-no-content-size": ("corrupt", "a form 0x03 header whose zstd frame does not "
                                "declare its content size", lambda p: _zheader(
                                    p, lambda raw, h: zstandard.ZstdCompressor(
                                        write_content_size=False).compress(raw))),
    "zheader-trailing-bytes": ("corrupt", "one byte after the header's zstd frame (inside hlen)",
                               lambda p: _zheader(p, lambda raw, h: framing.deflate(raw)
                                                  + b"\x00")),
    "zheader-bomb": ("corrupt", "a form 0x03 header of a few KiB whose frame declares (and "
                     "holds) a valid header padded past the 80 MiB limit by an unknown key of "
                     "zeros: never inflated", lambda p: _zheader(p, lambda raw, h: framing.deflate(
                         _padded_header(h, ct.MAX_HEADER_SIZE + 1)))),
    "zheader-item-bomb": ("corrupt", "a form 0x03 header of a few KiB whose unknown key "
                          "x-ignored holds 4,194,304 empty arrays: with the header's own items, "
                          "more than the 4,194,304 data items a header may hold (format.md 5.3; "
                          "refused before they are built)", lambda p: _zheader(
                              p, lambda raw, h: framing.deflate(_item_bomb(h)))),
    "zheader-empty": ("corrupt", "a form 0x03 header whose frame declares 0 bytes",
                      lambda p: _zheader(p, lambda raw, h: framing.deflate(b""))),
    "record-kind-unknown": ("corrupt", "header kind 'future'",
                            lambda p: edit(p / REC2, lambda h, a: h.update(kind="future"))),
    "record-kind-pack": ("corrupt", "a run record path holding a header of kind 'pack'",
                         lambda p: edit(p / REC2, lambda h, a: h.update(kind="pack"))),
    "record-torn": ("corrupt", "the head record cut 5 bytes short of body_start + body_length "
                    "(no fallback to seq 1)", lambda p: (p / REC2).write_bytes(
                        (p / REC2).read_bytes()[:-5])),
    "record-appended": ("corrupt", "one byte appended to the head record",
                        lambda p: (p / REC2).write_bytes((p / REC2).read_bytes() + b"\x00")),
    # 3.2 the body table
    "bodies-gap": ("corrupt", "a pad byte between bodies 0 and 1 (offsets and body_length "
                   "shifted to match: readable, but not back to back)",
                   lambda p: edit(p / REC2, _gap)),
    "bodies-overlap": ("corrupt", "body 1 starts one byte before body 0 ends",
                       lambda p: edit(p / REC2, _overlap)),
    "bodies-duplicate-digest": ("corrupt", "body 0 twice in one container (its bytes repeated at "
                                "the end, body_length matching)",
                                lambda p: edit(p / REC2, _duplicate)),
    "bodies-size-zero": ("corrupt", "a body of size 0 (range 1..16777216)",
                         lambda p: edit(p / REC2, lambda h, a: h["bodies"][0].__setitem__(3, 0))),
    "bodies-stored-one": ("corrupt", "the last body stored in 1 byte (range 2..16908289; "
                          "body_length and the file cut to match)",
                          lambda p: edit(p / REC2, _stored_one)),
    "bodies-stored-over-max": ("corrupt", "a body stored in 16908290 bytes (over the limit; the "
                               "file and body_length match)", lambda p: edit(p / REC2,
                                                                            _stored_over_max)),
    "body-length-lies": ("corrupt", "body_length one past the last body, one byte appended to "
                         "match", lambda p: edit(p / REC2, _padded)),
    # 3.3 run records
    "record-run-mismatch": ("corrupt", "runs/r1/<2> whose header names run r2",
                            lambda p: edit(p / REC2, lambda h, a: h.update(run="r2"))),
    "record-seq-mismatch": ("corrupt", "runs/r1/<2> whose header names seq 3",
                            lambda p: edit(p / REC2, lambda h, a: h.update(seq=3))),
    "record-size-lies": ("corrupt", "size is one more than the manifest's length",
                         lambda p: edit(p / REC2, lambda h, a: h.update(size=h["size"] + 1))),
    "record-manifest-not-snapshot": ("corrupt", "one bit of the carried manifest flipped (still "
                                     "canonical CBOR; not the bytes the snapshot id names)",
                                     lambda p: edit(p / REC2, _manifest_flip)),
    "record-snapshot-lies": ("corrupt", "snapshot names seq 1's id, the manifest is seq 2's",
                             lambda p: edit(p / REC2, lambda h, a: h.update(
                                 snapshot=split((p / REC1).read_bytes())[0]["snapshot"]))),
    # 6 reading a chunk
    "body-flipped": ("corrupt", "a bit of a body of the head record flipped; no other copy "
                     "(found, but never with the right digest)",
                     lambda p: flip(p / REC2, sum(body_at(p / REC2, 0)) - 1)),
    "locator-container-absent": ("missing", "r1@1, which holds the bodies r1@2 locates, is "
                                 "gone: no forward, no loose object", lambda p: _unlink(p / REC1)),
    "locator-index-out-of-range": ("corrupt", "a locator whose container index is past the "
                                   "container list", lambda p: edit(p / REC2, lambda h, a: h[
                                       "locators"]["chunks"][0].__setitem__(1, len(
                                           h["locators"]["containers"])))),
    "locator-prefix-short": ("corrupt", "a locator prefix of 7 bytes (must be 8)",
                             lambda p: edit(p / REC2, lambda h, a: h["locators"]["chunks"][
                                 0].__setitem__(0, h["locators"]["chunks"][0][0][:7]))),
    # 8 forwards
    "forward-damaged": ("missing", "r1@1 is gone and its forward is damaged (treated as absent), "
                        "no loose object: nothing holds the chunk",
                        lambda p: _torn_forward(p)),
}


def _zheader(p: Path, stored: Callable[[bytes, dict[str, Any]], bytes], *,
             digest_of: bool = False) -> None:
    """Replace the head record's header by ``stored(canonical header bytes, header map)`` in
    form 0x03, with the header digest of those stored bytes (only the compression is wrong);
    ``digest_of``: keep the digest of the bytes stored before instead."""
    data = (p / REC2).read_bytes()
    h, area = split(data)
    old = data[13 + _hl(p):13 + _hl(p) + 32]
    out = join(stored(cbor.encode(h), h), area, digest=old if digest_of else None)
    (p / REC2).write_bytes(out[:8] + bytes([ct.CONTAINER_COMPRESSED]) + out[9:])


def _padded_header(h: dict[str, Any], size: int) -> bytes:
    """``h`` with an unknown key ``x-pad`` of zeros, canonical, ``size`` bytes or a few more."""
    raw = cbor.encode({**h, "x-pad": b""})
    return cbor.encode({**h, "x-pad": bytes(size - len(raw))})


def _item_bomb(h: dict[str, Any]) -> bytes:
    """``h`` with an unknown key ``x-ignored`` holding MAX_ITEMS empty arrays, canonical (built
    as bytes: the arrays are never Python lists)."""
    parts = {k: cbor.encode(v) for k, v in h.items()}
    parts["x-ignored"] = array_head(cbor.MAX_ITEMS) + b"\x80" * cbor.MAX_ITEMS
    return map_bytes(parts)


def _flip_nonce(p: Path) -> None:
    h, area = split((p / REC2).read_bytes())
    (p / REC2).write_bytes(join(h, area))  # form 0x02
    flip(p / REC2, 13 + (p / REC2).read_bytes()[13:13 + _hl(p)].index(b"nonce") + 7)


def _torn_forward(p: Path) -> None:
    (p / REC1).unlink()
    f = p / forward_path(REC1)
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_bytes(b"\xa1\x66bodies")


def _unlink(f: Path) -> None:
    f.unlink()


def _unlink_all(fs: list[Path]) -> None:
    for f in fs:
        f.unlink()


def _hl(p: Path) -> int:
    return int.from_bytes((p / REC2).read_bytes()[9:13], "big")


def _hlen(p: Path, n: int) -> None:
    data = (p / REC2).read_bytes()
    (p / REC2).write_bytes(data[:9] + n.to_bytes(4, "big") + data[13:])


def _first_pack_of(p: Path) -> Path:
    """The pack r1@1's record locates first."""
    h, _ = split((p / REC1).read_bytes())
    name = bytes(h["locators"]["containers"][0]).hex()
    return p / "packs" / name[:2] / name


PACK_INVALID: dict[str, tuple[str, str, Callable[[Path], Any]]] = {
    "pack-body-flipped": ("corrupt", "a bit of a pack body flipped (no other copy)",
                          lambda p: flip(_first_pack_of(p), sum(body_at(_first_pack_of(p))) - 1)),
    "pack-absent": ("missing", "a pack the records locate is gone (no forward, no loose object)",
                    lambda p: _unlink(_first_pack_of(p))),
    "pack-truncated": ("corrupt", "a pack cut inside its first body (found, but short)",
                       lambda p: _first_pack_of(p).write_bytes(_first_pack_of(p).read_bytes()[
                           :sum(body_at(_first_pack_of(p))) - 10])),
}


FORWARD_INVALID: dict[str, tuple[str, str, Callable[[Path], Any]]] = {
    "forward-five-hops": ("missing", "a chain of 5 forwards to the pack that holds the bodies: "
                          "a reader follows at most 4 (spec/v2.md 8)", lambda p: chain(p, 5)),
    "forward-to-absent": ("missing", "the forward names a pack that is gone",
                          lambda p: _unlink_all(packs(p))),
    "forward-wrong-bytes": ("corrupt", "the forward's rows point one byte off in the pack "
                            "(found, never with the right digest)",
                            lambda p: _shift_forward(p)),
}


def _shift_forward(p: Path) -> None:
    f = p / forward_path(REC1)
    m = cbor2.loads(f.read_bytes())
    for row in m["bodies"]:
        row[2] += 1
    f.write_bytes(cbor.encode(m))


def invalid(g: Any, new_store: Any, prng: Any, invalid_stores: Any, t0: int) -> None:
    builds: list[tuple[Callable[[Path], Any], dict[str, Any]]] = [
        (lambda p: base(p, new_store, prng), INVALID),
        (lambda p: pack_base(p, new_store, prng), PACK_INVALID),
        (lambda p: forwards(p, new_store, prng, t0), FORWARD_INVALID)]
    for build, cases in builds:
        tmp = g.out / "_v2base"
        build(tmp)
        invalid_stores(g, tmp, cases, prefix=P, requires=V2)
        shutil.rmtree(tmp)
