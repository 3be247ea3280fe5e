"""The conformance adapter for ckptfs itself: the protocol of ckptfs_conformance/README.md over argv
and stdout, or many requests at once with ``batch`` (one JSON request per stdin line).

``--break RULE`` makes a deliberately broken reader or writer (the suite must catch it); the
rules and what each breaks are in ``breaks`` (the catalogue ``BREAKS`` and the first reader
rules), ``breaks_v2`` (``v2-*``: spec/v2.md's layout), ``breaks_spec16`` (issue 16, one rule per
check it pinned: skip that check, or apply the other reading of a point the spec used to leave
open), ``spec32_breaks`` and ``spec32_writer`` (issue 32). Writer cases (``write``) are carried
out by ``case_writer``.
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from ckptfs.errors import CkptfsError
from ckptfs.format import cbor, framing
from ckptfs.format.cdc import ChunkerParams, cut_lengths
from ckptfs.format.digest import Digest
from ckptfs.format.lifecycle import Lease
from ckptfs.runtime.codecs import Codecs
from ckptfs_conformance import render
from ckptfs_conformance.adapters import breaks_spec16, maintenance, spec32_writer
from ckptfs_conformance.adapters.breaks import BREAKS, apply_break
from ckptfs_conformance.adapters.breaks_spec16 import SPEC16_BREAKS
from ckptfs_conformance.adapters.case_writer import write_case
from ckptfs_conformance.adapters.enc_ops import ENC_OPS
from ckptfs_conformance.render import canonical_json, render_ref, render_store, untagged

#: what other modules take from here (tests/test_conformance.py lists the issue-16 rules)
__all__ = ["BREAKS", "OPS", "SPEC16_BREAKS", "apply_break", "handle", "main", "write_case"]


def _read(path: str) -> bytes:
    return Path(path).read_bytes()


def _lease(data: bytes, now: int) -> str:
    """``blocks`` or ``free``: does this lease object exclude other maintenance at ``now``
    (retention.md 6; an unparseable lease blocks nobody)."""
    try:
        lease = Lease.from_bytes(data, what="lease")
    except CkptfsError:
        return "free"
    return "blocks" if lease.blocks(now) else "free"


def _typed_roundtrip(data: bytes, unknown: Literal["error", "raw"]) -> str:
    """Value content decoded into Python types with the built-in codecs (format.md 18.3) and
    encoded again, as hex; ``unknown`` as ckptfs.Codecs takes it."""
    codecs = Codecs(unknown=unknown)
    value = codecs.decode(cbor.decode(data, what="value", allow_bignum=True,
                                      check_canonical=False), what="value")
    return cbor.encode(codecs.encode(value)).hex()


OPS: dict[str, Callable[..., str]] = {
    "write-v2": lambda case, store: spec32_writer.write_v2(case, store),  # issue 32
    "digest": lambda f: Digest.of(_read(f)).text,
    "parse-digest": lambda text: Digest.parse(text).text,
    "cbor-decode": lambda f: canonical_json(render.tagged(cbor.decode(_read(f), what="input"))),
    "value-decode": lambda f: canonical_json(render.tagged(cbor.decode(
        _read(f), what="value", allow_bignum=True, check_canonical=False))),
    "cbor-encode": lambda f: cbor.encode(untagged(json.loads(_read(f)))).hex(),
    "typed-roundtrip": lambda f: _typed_roundtrip(_read(f), "error"),
    "typed-roundtrip-raw": lambda f: _typed_roundtrip(_read(f), "raw"),
    "unframe": lambda f, size: framing.unframe(_read(f), int(size), what="object").hex(),
    "cut": lambda mn, avg, mx, nc, f: json.dumps(cut_lengths(_read(f), ChunkerParams(
        min_size=int(mn), avg_size=int(avg), max_size=int(mx), normalization=int(nc)))),
    "read": lambda store, now: (breaks_spec16.EXPIRED.update(clock=int(now)),
                                canonical_json(render_store(store, int(now))))[1],
    "snapshot": lambda store, now, ref: canonical_json(render_ref(store, ref, int(now))),
    "write": write_case,
    "lease": lambda f, now: _lease(_read(f), int(now)),
    "gc-named": lambda store: _gc_named(store),
    # spec32c: maintenance (capability maintenance)
    "copy": lambda src, dst, now, run: maintenance.do_copy(src, dst, int(now), run),
    "erase": lambda store, now, run, reason: maintenance.do_erase(store, int(now), run, reason),
}


OPS.update(ENC_OPS)  # capability encryption (spec/encryption.md)


def _gc_named(store: str) -> str:
    """``gc-named STORE``: the stray records and packs gc must read and judge (spec/v2.md
    9.2, complete locators), as a JSON array of paths."""
    from ckptfs.ops.gc_locators import applies, named_containers

    import ckptfs

    repo = ckptfs.open_store(store).repo
    if not applies(repo):  # no complete-locators: gc reads every old stray and pack (spec32c)
        return json.dumps(maintenance.every_container(repo))
    return json.dumps(named_containers(repo))


def handle(argv: list[str]) -> str:
    """One request: the stdout text of the protocol (a result or ``error: <category>``)."""
    op, *args = argv
    try:
        return OPS[op](*args)
    except CkptfsError as e:
        return f"error: {e.category}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="ckptfs_adapter", description=__doc__)
    p.add_argument("--break", dest="broken", choices=BREAKS, action="append", default=[])
    p.add_argument("request", nargs=argparse.REMAINDER)
    a = p.parse_args(argv)
    for rule in a.broken:
        apply_break(rule)
    if a.request == ["batch"]:
        for line in sys.stdin:
            try:
                out = {"out": handle(json.loads(line)["argv"])}
            except Exception:  # report, keep serving: the runner marks this vector Error
                out = {"crash": traceback.format_exc()}
            sys.stdout.write(json.dumps(out) + "\n")
            sys.stdout.flush()
        return 0
    if not a.request or a.request[0] not in OPS:
        p.error(f"expected one of: batch, {', '.join(OPS)}")
    print(handle(a.request))
    return 0


if __name__ == "__main__":
    sys.exit(main())
