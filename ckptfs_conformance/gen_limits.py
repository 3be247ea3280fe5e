"""Conformance vectors for the size limits of spec/format.md section 1 (issue 13, "Hostile
stores"): a value or ledger whose chunk list names more than 64 MiB of content must be refused
(``corrupt``) before it is assembled, although every chunk it names is valid. The chunk is one
16 MiB chunk of zeros listed several times: its zstd frame is a few hundred bytes on disk."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ckptfs.format import framing
from ckptfs.format.digest import Digest
from ckptfs.format.limits import MAX_VALUE_SIZE
from ckptfs.format.models import MAX_CHUNK_SIZE
from ckptfs.format.names import chunk_path

#: how many times the 16 MiB chunk is listed: 80 MiB, just over the 64 MiB limit
REPEAT = MAX_VALUE_SIZE // MAX_CHUNK_SIZE + 1


def _zero_chunk(p: Path) -> Digest:
    from ckptfs_conformance.generate import put_file

    zeros = bytes(MAX_CHUNK_SIZE)
    d = Digest.of(zeros)
    put_file(p, chunk_path(d), framing.frame(zeros))
    return d


def _oversized(p: Path) -> dict[str, Any]:
    """A content map naming REPEAT x 16 MiB: size and chunks agree, the digest cannot (it is
    never checked: the size alone is refused)."""
    d = _zero_chunk(p)
    return {"size": REPEAT * MAX_CHUNK_SIZE, "digest": Digest.of(b"oversized").raw,
            "chunks": [[d.raw, MAX_CHUNK_SIZE]] * REPEAT}


def _value_over_limit(p: Path) -> None:
    from ckptfs_conformance.generate import _with_entry

    _with_entry(p, "huge", {"kind": "value", "type": "application/cbor-seq",
                            "encoding": "cbor-seq", **_oversized(p)})


def _ledger_over_limit(p: Path) -> None:
    from ckptfs_conformance.generate import _head_manifest, _recommit

    _, m, _ = _head_manifest(p)
    m["ledger"] = {"count": 1, **_oversized(p)}
    _recommit(p, m)


LIMITS_INVALID: dict[str, tuple[str, str, Callable[[Path], Any]]] = {
    "value-over-64mib": ("corrupt", f"a value entry whose chunks name {REPEAT} x 16 MiB (one "
                         "valid chunk listed again and again): over the 64 MiB a value may "
                         "hold, refused before it is assembled", _value_over_limit),
    "ledger-over-64mib": ("corrupt", f"a ledger whose chunks name {REPEAT} x 16 MiB: over the "
                          "64 MiB a ledger may hold, refused before it is assembled",
                          _ledger_over_limit),
}
