"""What the bytes of a CkptfsSaver store are: every file of a format v2 store split into the
parts of a container (spec/v2.md), per snapshot kind (``lg.kind``: checkpoint, writes, ...).

Parts of a run record: the fixed prefix and header digest; in the header, the manifest's
canonical bytes (split further into the channel entries' chunk lists, inline values, labels
and the rest), the body table, the locators (where the chunks the manifest names but the
record does not carry are) and the other header fields; then the body area (the chunk bodies
the commit added, framed and usually compressed). Packs and other files are counted whole.
The header parts are the sizes of their canonical CBOR; in a record whose header is stored
compressed (form 0x03, feature ``compressed-headers``) a negative row says what zstd saved.

    python bench/lg_store_parts.py STORE_DIR [LABEL]   (LABEL: the kind label, lg.kind)
"""

from __future__ import annotations

import collections
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import cbor2

from ckptfs.format import cbor
from ckptfs.format import containers as ct


def _len(x: Any) -> int:
    return len(cbor.encode(x))


def manifest_parts(manifest: bytes) -> dict[str, int]:
    """The manifest's bytes split into chunk lists, inline values, labels and the rest."""
    raw = cbor2.loads(manifest)
    chunks = inline = writes = 0
    for name, entry in (raw.get("entries") or {}).items():
        if isinstance(entry, dict):
            chunks += _len(entry["chunks"]) if entry.get("chunks") else 0
            n = _len(entry["inline"]) if entry.get("inline") is not None else 0
            if name == "writes":
                writes += n
            else:
                inline += n
    labels = _len(raw.get("labels") or {})
    out = {"manifest: chunk lists": chunks, "manifest: inline values": inline,
           "manifest: labels": labels,
           "manifest: rest": len(manifest) - chunks - inline - writes - labels}
    if writes:  # the writes rows (a writes snapshot's, or folded into a checkpoint's)
        out["manifest: writes (inline)"] = writes
    return out


#: how a record's header is stored, by its form byte (spec/v2.md 3.1)
HEADER_FORMS = {2: "whole", 3: "zstd, form 0x03", 4: "by reference, form 0x04"}


def records(root: Path, parts: collections.Counter[str],
            decode: Callable[[str, bytes], ct.Container] | None = None
            ) -> Iterator[tuple[bytes, ct.Container, ct.RecordHeader]]:
    """(bytes, container, header) of every run record under ``root``; every other file is
    counted whole into ``parts`` (packs, and config, markers and hints). ``decode(rel,
    data)`` decodes a container (default ``ct.decode``; a form 0x04 record needs its base's)."""
    for p in sorted(root.rglob("*")):
        if not p.is_file():
            continue
        data = p.read_bytes()
        if not ct.is_container(data):
            parts["other files (config, markers, hints)"] += len(data)
            continue
        rel = p.relative_to(root).as_posix()
        c = decode(rel, data) if decode is not None else ct.decode(data, what=str(p))
        if not isinstance(c.header, ct.RecordHeader):
            parts["packs"] += len(data)
            continue
        yield data, c, c.header


def record_parts(data: bytes, c: ct.Container, h: ct.RecordHeader) -> dict[str, int]:
    """One run record's bytes by part. ``header compression (FORM)`` is what storing the
    header as FORM saved against its canonical CBOR (negative; 0 for a whole header)."""
    header = h.to_cbor()
    header_len = _len(header)
    manifest = _len(h.manifest)
    bodies = _len(header["bodies"])
    locators = _len(header["locators"])
    stored = c.body_start - ct.PREFIX_LEN - 32  # the header as stored
    out = {"prefix + header digest": ct.PREFIX_LEN + 32,
           f"header compression ({HEADER_FORMS[data[8]]})": stored - header_len}
    out.update(manifest_parts(h.manifest))
    out.update({"manifest: cbor head": manifest - len(h.manifest), "body table": bodies,
                "locators": locators,
                "other header fields": header_len - manifest - bodies - locators,
                "body area (new chunks)": len(data) - c.body_start})
    return out


def store_parts(root: Path, label: str = "lg.kind"
                ) -> tuple[dict[str, int], collections.Counter[str]]:
    """(part name -> bytes, snapshot kind -> record count) over every file under ``root``; a
    record's kind is its label ``label`` (the agent adapters: ``ag.op``), else ``other``."""
    parts: collections.Counter[str] = collections.Counter()
    kinds: collections.Counter[str] = collections.Counter()
    for data, c, h in records(root, parts):
        kind = str(cbor2.loads(h.manifest).get("labels", {}).get(label, "other"))
        kinds[kind] += 1
        for name, n in record_parts(data, c, h).items():
            if n or not name.startswith("header compression"):  # a whole header saved none
                parts[f"{kind}: {name}"] += n
    return dict(parts), kinds


def parts_md(root: Path, label: str = "lg.kind") -> list[str]:
    """A Markdown table of ``store_parts``."""
    parts, kinds = store_parts(root, label)
    total = sum(parts.values()) or 1
    lines = [f"Store bytes by part ({sum(kinds.values())} records: "
             + ", ".join(f"{n} {k}" for k, n in sorted(kinds.items())) + f"; {total:,} bytes):",
             "", "| part | bytes | share | per record of its kind |", "|---|---|---|---|"]
    for name, n in sorted(parts.items(), key=lambda kv: -kv[1]):
        per = kinds.get(name.split(":")[0], 0)
        lines.append(f"| {name} | {n:,} | {n / total * 100:.1f} % | "
                     f"{n / per:,.0f} |" if per else f"| {name} | {n:,} | "
                     f"{n / total * 100:.1f} % | |")
    return lines


if __name__ == "__main__":
    print("\n".join(parts_md(Path(sys.argv[1]), *sys.argv[2:3])))
