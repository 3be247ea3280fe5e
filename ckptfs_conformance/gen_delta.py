"""Vectors of headers by reference (spec/v2.md 3.1.2, store feature ``delta-headers``,
capability ``delta-headers``): a store whose records are stored against their parents' headers
renders like any other; a chain of exactly 64 form 0x04 records reads, 65 do not; a base that
is gone or damaged, a reference to the wrong base or to a later record, and form 0x04 records
in a store whose config does not require the feature are ``corrupt``.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import blake3

from ckptfs.format import cbor, framing
from ckptfs.format import containers as ct
from ckptfs.format.names import CONFIG_PATH, record_path
from ckptfs.format.models import DELTA_HEADERS, StoreConfig

P = "v2-delta-"
NEEDS = ["reader", "v2", "delta-headers"]


@contextmanager
def _chain(n: int) -> Iterator[None]:
    """Writers store up to ``n`` records of a chain by reference (the default is 16)."""
    from ckptfs.store import commits

    old = commits.DELTA_CHAIN
    commits.DELTA_CHAIN = n
    try:
        yield
    finally:
        commits.DELTA_CHAIN = old


def _grow(p: Path, new_store: Any, prng: Any, n: int, *, run: str = "r1",
          resume_at: int | None = None) -> None:
    s, c = new_store(p)
    s.init(delta_headers=True)
    r = s.start_run(run)
    r.checkpoint({"log": [prng("d0", 60).hex()], "n": 0}, "start")
    for i in range(1, n):
        c.tick()
        if resume_at is not None and i == resume_at:
            s.close()
            s, c = new_store(p)
            r = s.resume(run)
        r.append("log", prng(f"d{i}", 60).hex())
    s.close()


def _rec(p: Path, seq: int, run: str = "r1") -> Path:
    return p / record_path(run, seq)


def _store(stored: bytes, data: bytes, form: int = ct.CONTAINER_BY_BASE) -> bytes:
    """``data`` (a container) with its stored header replaced by ``stored`` (digest redone)."""
    hlen = int.from_bytes(data[9:13], "big")
    body = data[ct.PREFIX_LEN + hlen + 32:]
    return b"".join([ct.MAGIC, bytes([form]), len(stored).to_bytes(4, "big"), stored,
                     blake3.blake3(stored).digest(), body])


def _plain(p: Path, seq: int) -> bytes:
    def base(s: int, depth: int) -> bytes:
        return ct.plain_header(_rec(p, s).read_bytes(), what=str(s), base=base, depth=depth)[0]
    return base(seq, 0)


def _rebase(p: Path, seq: int, new_base: int) -> None:
    """Record ``seq``'s header stored against record ``new_base`` instead of its parent."""
    data = _rec(p, seq).read_bytes()
    plain = _plain(p, seq)
    against = _plain(p, new_base) if new_base < seq else plain
    _rec(p, seq).write_bytes(_store(cbor.encode([new_base, framing.deflate_with(plain, against)]),
                                    data))


def _wrong_base(p: Path) -> None:
    """The head's frame compressed against record 2's header but naming record 3."""
    data = _rec(p, 5).read_bytes()
    frame = framing.deflate_with(_plain(p, 5), _plain(p, 2))
    _rec(p, 5).write_bytes(_store(cbor.encode([3, frame]), data))


def _flip_stored(f: Path) -> None:
    raw = bytearray(f.read_bytes())
    raw[ct.PREFIX_LEN + 4] ^= 1
    f.write_bytes(bytes(raw))


def _without_feature(p: Path) -> None:
    cfg = StoreConfig.from_bytes((p / CONFIG_PATH).read_bytes())
    import attrs

    (p / CONFIG_PATH).write_bytes(attrs.evolve(cfg, required=tuple(
        f for f in cfg.required if f != DELTA_HEADERS)).to_bytes())


INVALID: dict[str, tuple[str, str, Callable[[Path], Any]]] = {
    # name: (category, description, damage of a 5-record delta store r1@1..5, 2-5 by reference)
    "without-feature": ("corrupt", "form 0x04 records in a store whose config does not require "
                        "delta-headers: there only forms 0x02 and 0x03 exist (spec/v2.md 2)",
                        _without_feature),
    "base-gone": ("corrupt", "r1@3, a base of the head's header, deleted: the head cannot be "
                  "decoded (corrupt, not missing: spec/v2.md 3.1.2)",
                  lambda p: _rec(p, 3).unlink()),
    "base-damaged": ("corrupt", "a byte of r1@4's stored header flipped: the head, stored "
                     "against it, cannot be decoded", lambda p: _flip_stored(_rec(p, 4))),
    "wrong-base": ("corrupt", "the head's frame was compressed against r1@2's header but names "
                   "r1@3 as its base: it does not decode (its content checksum disagrees)",
                   _wrong_base),
    "base-not-earlier": ("corrupt", "the head names itself (seq 5) as its base: a base is an "
                         "earlier record of the run", lambda p: _rebase(p, 5, 5)),
    "base-zero": ("corrupt", "the head's reference names base 0",
                  lambda p: _rec(p, 5).write_bytes(_store(
                      cbor.encode([0, framing.deflate_with(_plain(p, 5), _plain(p, 4))]),
                      _rec(p, 5).read_bytes()))),
    "not-an-array": ("corrupt", "the head's stored header (form 0x04) is the zstd frame alone, "
                     "without [base, frame] around it",
                     lambda p: _rec(p, 5).write_bytes(_store(
                         framing.deflate_with(_plain(p, 5), _plain(p, 4)),
                         _rec(p, 5).read_bytes()))),
    "pack-form": ("corrupt", "the head's header rewritten as a pack's (kind 'pack') stored by "
                  "reference: only a record's header is",
                  lambda p: _rec(p, 5).write_bytes(_store(cbor.encode([4, framing.deflate_with(
                      cbor.encode({"kind": "pack", "created": 1, "writer": "x",
                                   "bodies": [[bytes(32), 0, 2, 1]], "body_length": 2}),
                      _plain(p, 4))]), _rec(p, 5).read_bytes()))),
}


def vectors(g: Any, new_store: Any, prng: Any, invalid_stores: Any, render_store: Any,
            now: int) -> None:
    def valid(name: str, desc: str, build: Callable[[Path], Any]) -> None:
        d = g.store_dir("store-valid", P + name)
        build(d)
        g.vector("store-valid", P + name, desc, ["read", "{store}", str(now)],
                 {"output": render_store(str(d), now), "compare": "json"}, NEEDS,
                 store=f"{P}{name}.store")

    valid("headers", "A store that requires delta-headers: a run of 20 commits by run.append, "
          "resumed at 12 (the first commit after a resume is stored whole), every 16th record "
          "of a chain whole, the others stored against their parent's header (form 0x04, "
          "spec/v2.md 3.1.2)", lambda p: _grow(p, new_store, prng, 20, resume_at=12))
    with _chain(100):
        valid("chain-64", "r1@65 is the 64th form 0x04 record of a chain that starts at the "
              "whole r1@1: a reader follows 64 (spec/v2.md 3.1.2)",
              lambda p: _grow(p, new_store, prng, 65))
        tmp = g.out / "_deltachain"
        _grow(tmp, new_store, prng, 66)
        invalid_stores(g, tmp, {"chain-65": (
            "corrupt", "r1@66 is the 65th form 0x04 record of its chain: past the 64 a reader "
            "follows (spec/v2.md 3.1.2)", lambda p: None)}, prefix=P, requires=NEEDS)
        shutil.rmtree(tmp)
    tmp = g.out / "_deltabase"
    _grow(tmp, new_store, prng, 5)
    assert [f.read_bytes()[8] for f in sorted((tmp / "runs" / "r1").iterdir())
            if f.name.isdigit()] == [3, 4, 4, 4, 4]
    without = {k: v for k, v in INVALID.items() if k == "without-feature"}
    invalid_stores(g, tmp, without, prefix=P, requires=["reader", "v2"])
    invalid_stores(g, tmp, {k: v for k, v in INVALID.items() if k not in without}, prefix=P,
                   requires=NEEDS)
    shutil.rmtree(tmp)
