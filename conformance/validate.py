"""Validate a store's config, manifests, run records and retention control objects (retired
markers, expiry overrides, tombstones, leases) against the CDDL with pycddl."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Any

from ckptfs.format import framing
from ckptfs.format.names import RUN_ID, parse_seq_name

CDDL = Path(__file__).resolve().parent / "vectors" / "ckptfs.cddl"
ROOTS = ("store-config", "manifest", "run-record", "retention-retired", "retention-expiry",
         "retention-tombstone", "retention-lease")
_OBJECT = re.compile(r"snapshots/([0-9a-f]{2})/\1[0-9a-f]{62}")
_SEQ = r"[0-9]{20}"
_CONTROLS = {  # spec/retention.md 1; the run-id part is checked by RUN_ID below
    "retention-retired": re.compile(rf"runs/([^/]+)/retired/{_SEQ}"),
    "retention-expiry": re.compile(rf"runs/([^/]+)/expiry(-{_SEQ})?"),
    "retention-tombstone": re.compile(rf"tombstones/([^/]+?)(\.cbor|/{_SEQ}\.cbor)"),
    "retention-lease": re.compile(rf"leases/maintenance/()(){_SEQ}"),
}


@cache
def schema(root: str) -> Any:
    """The pycddl schema with ``root`` as its first rule (pycddl validates the first rule)."""
    try:
        import pycddl
    except ImportError:
        raise RuntimeError("checking written stores needs pycddl: pip install 'ckptfs[conformance]'") from None
    return pycddl.Schema(f"conformance-root = {root}\n{CDDL.read_text()}")


def check(root: str, data: bytes) -> str | None:
    """None if ``data`` (one CBOR item) matches rule ``root``, else why not."""
    try:
        schema(root).validate_cbor(data)
    except Exception as e:  # pycddl.ValidationError is a plain Exception
        return str(e).strip().splitlines()[0][:300] if str(e).strip() else type(e).__name__
    return None


def root_of(rel: str) -> str | None:
    """The CDDL rule of the store file at ``rel``, or None when it is not a structure."""
    if rel == "ckptfs.cbor":
        return "store-config"
    if _OBJECT.fullmatch(rel):
        return "manifest"
    parts = rel.split("/")
    if (len(parts) == 3 and parts[0] == "runs" and RUN_ID.match(parts[1])
            and not parts[1].endswith(".") and parse_seq_name(parts[2])):
        return "run-record"
    for root, pattern in _CONTROLS.items():
        m = pattern.fullmatch(rel)
        if m and (not m.group(1) or RUN_ID.match(m.group(1))):
            return root
    return None


def store_files(store: Path) -> list[tuple[str, str, Path]]:
    """(root rule, relative path, file) of every structure in a store."""
    out = []
    for f in sorted(store.rglob("*")):
        rel = f.relative_to(store).as_posix()
        root = root_of(rel) if f.is_file() else None
        if root is not None:
            out.append((root, rel, f))
    return out


def _cbor_bytes(root: str, rel: str, f: Path) -> bytes:
    """The CBOR item of a file: manifests are framed, the rest raw."""
    data = f.read_bytes()
    if root != "manifest":
        return data
    if data[:1] == b"\x01":
        import zstandard

        return framing.unframe(data, zstandard.frame_content_size(data[1:]), what=rel)
    return framing.unframe(data, len(data) - 1, what=rel)


def validate_store(store: Path, skip: frozenset[str] = frozenset()) -> list[str]:
    """Problems ("path: why") of every structure in ``store`` not listed in ``skip``."""
    problems = []
    for root, rel, f in store_files(store):
        if rel in skip:
            continue
        try:
            why = check(root, _cbor_bytes(root, rel, f))
        except Exception as e:  # an object that cannot even be unframed
            why = f"cannot unframe: {e}"
        if why is not None:
            problems.append(f"{rel} ({root}): {why}")
    return problems
