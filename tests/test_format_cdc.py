"""FastCDC 2020: the pure-Python reference and pyfastcdc cut alike; parameters validate."""

from __future__ import annotations

import io
import os
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ckptfs.errors import FormatError, UnsupportedFeature
from ckptfs.format import cdc
from ckptfs.format.cdc import ChunkerParams, cut_lengths, cut_lengths_py, iter_chunks

PARAMS = [
    ChunkerParams(min_size=64, avg_size=256, max_size=1024, normalization=1),
    ChunkerParams(min_size=64, avg_size=256, max_size=1024, normalization=0),
    ChunkerParams(min_size=256, avg_size=1024, max_size=4096, normalization=2),
    ChunkerParams(min_size=100, avg_size=300, max_size=1500, normalization=3),  # odd sizes
    ChunkerParams(min_size=1024, avg_size=4096, max_size=16384, normalization=1),
]


def _data(seed: int, n: int, kind: int) -> bytes:
    rnd = random.Random(seed)
    if kind == 0:
        return rnd.randbytes(n)
    if kind == 1:  # low entropy: long runs hit the max size
        return bytes(rnd.choice(b"ab\x00") for _ in range(n // 64)) * 64
    words = [rnd.randbytes(rnd.randint(1, 12)) for _ in range(50)]  # text-like
    return b" ".join(rnd.choice(words) for _ in range(n // 6))[:n]


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32), st.integers(0, 40_000), st.integers(0, 2), st.sampled_from(PARAMS))
def test_python_and_native_cut_alike(seed: int, n: int, kind: int, p: ChunkerParams) -> None:
    data = _data(seed, n, kind)
    lengths = cut_lengths_py(data, p)
    assert lengths == cut_lengths(data, p)
    assert sum(lengths) == len(data)
    assert all(p.min_size <= x <= p.max_size for x in lengths[:-1])
    assert not lengths or 0 < lengths[-1] <= p.max_size


def test_default_parameters_agree_on_a_larger_input() -> None:
    p = ChunkerParams()
    data = _data(7, 700_000, 2) + os.urandom(300_000)
    lengths = cut_lengths_py(data, p)
    assert lengths == cut_lengths(data, p) and len(lengths) > 5


@pytest.mark.parametrize("native", [True, False])
def test_streaming_cuts_equal_whole_buffer_cuts(native: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cdc, "HAVE_NATIVE", native and cdc.HAVE_NATIVE)
    p = PARAMS[2]
    data = _data(3, 3 << 20, 0)[: (3 << 20) - 17]
    chunks = list(iter_chunks(io.BytesIO(data), p))
    assert b"".join(chunks) == data
    assert [len(c) for c in chunks] == cut_lengths_py(data, p)


def test_empty_input_has_no_chunks() -> None:
    assert cut_lengths_py(b"", ChunkerParams()) == [] == cut_lengths(b"", ChunkerParams())
    assert list(iter_chunks(io.BytesIO(b""), ChunkerParams())) == []


def test_a_local_edit_changes_only_nearby_chunks() -> None:
    p = PARAMS[2]
    data = _data(11, 200_000, 0)
    edited = data[:100_000] + b"inserted!" + data[100_000:]
    before, after = cut_lengths(data, p), cut_lengths(edited, p)

    def pieces(d: bytes, ls: list[int]) -> set[bytes]:
        out, pos = set(), 0
        for n in ls:
            out.add(d[pos:pos + n])
            pos += n
        return out

    assert len(pieces(data, before) - pieces(edited, after)) <= 3


def test_gear_and_masks_tables() -> None:
    assert len(cdc.GEAR) == 256 and len(set(cdc.GEAR)) == 256
    assert all(0 <= g < 1 << 64 for g in cdc.GEAR)
    assert cdc.GEAR[0] == 0x3B5D3C7D207E37DC and cdc.GEAR[255] == 0xAABD2B2A451504E1
    assert len(cdc.MASKS) == 26 and cdc.MASKS[0] == 0
    assert all(bin(m).count("1") == i for i, m in enumerate(cdc.MASKS) if i >= 5)


@pytest.mark.parametrize("kw", [
    {"min_size": 63}, {"min_size": (1 << 20) + 1}, {"avg_size": 255}, {"avg_size": (1 << 22) + 1},
    {"max_size": 1023}, {"max_size": (1 << 24) + 1},
    {"min_size": 5000, "avg_size": 4096}, {"avg_size": 300_000, "max_size": 262_144},
    {"normalization": 4}, {"normalization": -1},
])
def test_parameters_out_of_range(kw: dict[str, int]) -> None:
    with pytest.raises(FormatError):
        ChunkerParams(**kw)


def test_unknown_algorithm_is_an_unsupported_feature() -> None:
    with pytest.raises(UnsupportedFeature):
        ChunkerParams(algorithm="fastcdc-2016")


def test_params_cbor_round_trip_and_strictness() -> None:
    p = PARAMS[3]
    m = p.to_cbor()
    assert m == {"algorithm": "fastcdc-2020", "min": 100, "avg": 300, "max": 1500,
                 "normalization": 3}
    assert ChunkerParams.from_cbor(m) == p
    for bad in ({**m, "extra": 1}, {k: v for k, v in m.items() if k != "avg"}, {**m, "min": "64"},
                {**m, "min": True}, [1, 2]):
        with pytest.raises(FormatError):
            ChunkerParams.from_cbor(bad)


def test_spec_appendix_lists_the_tables_in_use() -> None:
    import re
    from pathlib import Path

    text = (Path(__file__).parent.parent / "spec" / "format.md").read_text()
    appendix = text[text.index("## Appendix A"):]
    blocks = re.findall(r"```\n(.*?)```", appendix, re.S)
    gear, masks = ([int(w, 16) for w in b.split()] for b in blocks[:2])
    assert tuple(gear) == cdc.GEAR and tuple(masks) == cdc.MASKS


@pytest.mark.parametrize("avg", [256, 300, 362, 363, 1000, 1448, 1449, 65536, 92681, 92682,
                                 4194304, 2965820, 2965821])
def test_spec_integer_rounding_of_log2_avg(avg: int) -> None:
    bits = avg.bit_length() - 1
    if avg * avg >= 1 << (2 * bits + 1):
        bits += 1
    p = ChunkerParams(min_size=64, avg_size=avg, max_size=1 << 24, normalization=1)
    assert cdc._masks(p) == (cdc.MASKS[bits + 1], cdc.MASKS[bits - 1])
