"""The decoded-item budget (issue 30, defect 5; spec/format.md 1, "Limits").

A form 0x03 record header of 2 KiB inflates, within the 80 MiB header bound, to 60,000,000
empty CBOR arrays in a key readers ignore, and cbor2 builds 60 million lists: one read took
98 s and 4.3 GB; under a 3 GiB cap a MemoryError, then a panic in an extension, then a
deadlock. Readers now count the items of every structural object from the CBOR heads before
building any (``cbor.count_items``), refusing more than ``cbor.MAX_ITEMS`` as ``corrupt``.

Here: every structural decoder refuses each kind of bomb with bounded memory (tracemalloc, in
a child process under an RLIMIT_AS cap, so that a regression cannot take the machine down);
the pre-pass counts exactly what cbor2 decodes; writers refuse what readers would. The bombs
in whole stores (in a visible record's header, in a manifest, in an orphan pack's header, an
8 MiB forward, 60 million nested arrays, a map of 8 million entries) run through every entry
point in the hostile-store corpus (tests/hostile_corpus.py, tests/test_hostile_stores.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hst

from ckptfs.errors import FormatError
from ckptfs.format import cbor
from tests import hostile_corpus as hc

# -- the pre-pass counts what cbor2 decodes -------------------------------------------------------
def ref_count(v: Any) -> int:
    """Data items of a decoded value: every array, map, key, value and scalar; a bignum is a
    tag around a string (2)."""
    if isinstance(v, list):
        return 1 + sum(ref_count(x) for x in v)
    if isinstance(v, dict):
        return 1 + sum(1 + ref_count(x) for x in v.values())
    if isinstance(v, int) and not isinstance(v, bool) and not -2 ** 64 <= v < 2 ** 64:
        return 2
    return 1


_scalars = (hst.none() | hst.booleans() | hst.integers(-2 ** 70, 2 ** 70) | hst.floats()
            | hst.text(max_size=40) | hst.binary(max_size=40))
_rows = hst.lists(hst.tuples(hst.binary(min_size=32, max_size=32),
                             hst.integers(0, 2 ** 64 - 1)).map(list), min_size=17, max_size=40)
_locs = hst.lists(hst.tuples(hst.binary(min_size=8, max_size=8), hst.integers(0, 2 ** 20),
                             hst.integers(0, 2 ** 40), hst.integers(0, 2 ** 64 - 1)).map(list),
                  min_size=17, max_size=40)
_values = hst.recursive(_scalars | _rows | _locs,
                        lambda kids: hst.lists(kids, max_size=30)
                        | hst.dictionaries(hst.text(max_size=30), kids, max_size=30),
                        max_leaves=200)


@settings(max_examples=300, deadline=None)
@given(_values)
def test_count_items_counts_what_cbor2_decodes(v: Any) -> None:
    """Exactly ``ref_count`` of the decoded value, through every fast path (one-byte runs,
    chunk-list rows, body and locator rows, mixed with other items); every strict prefix is
    refused as truncated, and a byte after the item as trailing."""
    data = cbor.encode(v)
    n = cbor.count_items(data, what="v", budget=1 << 40)
    assert n == ref_count(cbor.decode(data, what="v", allow_bignum=True))
    with pytest.raises(FormatError, match="more than"):
        cbor.count_items(data, what="v", budget=n - 1)
    for cut in sorted({0, 1, len(data) // 2, len(data) - 1}):
        if cut < len(data):
            with pytest.raises(FormatError, match="truncated"):
                cbor.count_items(data[:cut], what="v", budget=1 << 40)
    with pytest.raises(FormatError, match="after the CBOR item"):
        cbor.count_items(data + b"\x00", what="v", budget=1 << 40)


BOMBS = {
    "empty-arrays": lambda n: hc.empty_arrays(n),
    "empty-maps": lambda n: cbor_parts_array(n, b"\xa0"),
    "nested-pairs": lambda n: cbor_parts_array(n // 2, b"\x81\x80"),
    "text-keyed-map": lambda n: hc.big_map(n // 2),
    "small-ints": lambda n: cbor_parts_array(n, b"\x18\x64"),
}


#: just over the budget (the literal: this module's bombs also run against code without one)
BOMB_N = getattr(cbor, "MAX_ITEMS", 1 << 22) + 64


def cbor_parts_array(n: int, item: bytes) -> bytes:
    from ckptfs.format.cbor_parts import array_head

    return array_head(n) + item * n


@pytest.mark.parametrize("shape", sorted(BOMBS))
def test_the_budget_is_exact(shape: str) -> None:
    """At a small budget, each bomb shape is counted exactly: the budget passes an object of
    exactly that many items and refuses one more (decode too, before building)."""
    data = BOMBS[shape](300)
    n = cbor.count_items(data, what="b", budget=1 << 20)
    assert n == ref_count(cbor.decode(data, what="b", check_canonical=False))
    assert cbor.count_items(data, what="b", budget=n) == n
    with pytest.raises(FormatError, match=f"more than {n - 1} CBOR data items"):
        cbor.decode(data, what="b", max_items=n - 1, check_canonical=False)


def test_depth_is_refused_by_the_pre_pass_as_by_the_decoder() -> None:
    ok = b"\x81" * 256 + b"\x00"
    assert cbor.count_items(ok, what="d", budget=1 << 20) == 257
    with pytest.raises(FormatError, match="deeper than 256"):
        cbor.count_items(b"\x81" * 257 + b"\x00", what="d", budget=1 << 20)
    with pytest.raises(FormatError, match="deeper than 256"):
        cbor.count_items(b"\x81" * 60_000_000 + b"\x80", what="d")


def test_value_content_has_no_item_budget() -> None:
    """A user's value may hold more items than MAX_ITEMS (a writer takes any plain value up to
    64 MiB): value decoding (``allow_bignum``) does not count them."""
    data = cbor_parts_array(cbor.MAX_ITEMS + 1, b"\x01")
    assert len(cbor.decode(data, what="value", allow_bignum=True, check_canonical=False)) \
        == cbor.MAX_ITEMS + 1
    with pytest.raises(FormatError, match="more than"):
        cbor.decode(data, what="manifest")


def test_writers_refuse_what_readers_refuse() -> None:
    """A container header over the budget is refused at encoding, saying what to do."""
    from ckptfs.format import containers as ct

    header = cbor.encode({"kind": "pack", "x": [0] * (cbor.MAX_ITEMS + 1)})
    with pytest.raises(FormatError, match="larger chunker average"):
        ct.encode_bytes(header, b"")


# -- every structural decoder, each bomb shape: refused with bounded memory -----------------------
def _decoders() -> dict[str, Any]:
    import blake3

    from ckptfs.format import containers as ct
    from ckptfs.format import lifecycle, models
    from ckptfs.format.cbor_parts import map_bytes

    def header(kind: str, form: int) -> Any:
        def make(bomb: bytes) -> Any:
            h = map_bytes({"kind": cbor.encode(kind), "x-ignored": bomb})
            stored = hc.framing.deflate(h) if form == 3 else h
            data = b"".join([ct.MAGIC, bytes([form]), len(stored).to_bytes(4, "big"), stored,
                             blake3.blake3(stored).digest()])
            return data, lambda: ct.decode(data, what="container", whole=False)
        return make

    def plain(parse: Any) -> Any:
        def make(bomb: bytes) -> Any:
            data = map_bytes({"x-ignored": bomb})
            return data, lambda: parse(data)
        return make

    return {
        "record-header-0x03": header("record", 3),
        "record-header-0x02": header("record", 2),
        "pack-header-0x03": header("pack", 3),
        "forward": plain(lambda d: ct.Forward.from_bytes(d, what="forward")),
        "manifest": plain(lambda d: models.Manifest.from_bytes(d, what="manifest")),
        "tombstone": plain(lambda d: lifecycle.Tombstone.from_bytes(d, what="tombstone")),
        "lease": plain(lambda d: lifecycle.Lease.from_bytes(d, what="lease")),
        "retired": plain(lambda d: lifecycle.Retired.from_bytes(d, what="retired")),
        "expiry": plain(lambda d: lifecycle.Expiry.from_bytes(d, what="expiry")),
    }


def _child(out: str) -> None:
    """In a child process under a 2 GiB RLIMIT_AS: each decoder on each bomb just over the
    budget (a forward's up to its 8 MiB limit); one JSON line per pair with the outcome and the
    tracemalloc peak beyond the bomb's own bytes."""
    import signal
    import tracemalloc

    from tests.hostile_child import _alarm, cap_memory, outcome

    cap_memory(2 << 30)
    signal.signal(signal.SIGALRM, _alarm)
    with open(out, "w") as f:
        for dname, shape in PAIRS:
            bomb = BOMBS[shape](BOMB_N)
            data, call = _decoders()[dname](bomb)
            size = max(len(data), len(bomb))  # a compressed header: its inflated size
            tracemalloc.start()
            res = outcome(call, 300)
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            f.write(json.dumps({"decoder": dname, "shape": shape, "outcome": res, "peak": peak,
                                "size": size}) + "\n")
            f.flush()
            del data, call, bomb


#: every decoder on the shapes counted at C speed; two of them (a compressed header and a plain
#: object) on every shape (the slow ones walk 4 million items under tracemalloc)
PAIRS = ([(d, s) for d in _decoders() for s in ("empty-arrays", "empty-maps")]
         + [(d, s) for d in ("record-header-0x03", "forward") for s in BOMBS
            if s not in ("empty-arrays", "empty-maps")])


@pytest.mark.timeout(1800)
def test_every_structural_decoder_refuses_every_bomb_in_bounded_memory(tmp_path: Any) -> None:
    """9 decoders (record and pack headers in both forms, forward, manifest, the four control
    objects) x the bomb shapes, each of MAX_ITEMS + 64 items (4-25 MB of CBOR): refused
    ``corrupt`` with at most twice the object's bytes (a header's copy and its inflated form)
    plus 1 MiB traced. Before the fix cbor2 built every item: hundreds of MB each."""
    out = str(tmp_path / "out.jsonl")
    p = subprocess.run([sys.executable, "-c",
                        f"from tests.test_item_budget import _child; _child({out!r})"],
                       env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
                       capture_output=True, text=True, timeout=1500)
    rows = [json.loads(line) for line in open(out)] if os.path.exists(out) else []
    assert len(rows) == len(PAIRS), (p.returncode, p.stderr[-2000:], rows)
    # a compressed header is copied once and inflated once; nothing is built
    wrong = [r for r in rows if r["outcome"] != "error:corrupt"
             or r["peak"] > 2 * r["size"] + (1 << 20)]
    assert not wrong, wrong
