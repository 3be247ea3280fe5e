"""Validate a store's config, manifests and run records against the CDDL with pycddl."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Any

from ckptfs.format import framing
from ckptfs.format.names import RUN_ID, parse_seq_name

CDDL = Path(__file__).resolve().parent / "vectors" / "ckptfs.cddl"
ROOTS = ("store-config", "manifest", "run-record")
_OBJECT = re.compile(r"snapshots/([0-9a-f]{2})/\1[0-9a-f]{62}")


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


def store_files(store: Path) -> list[tuple[str, str, Path]]:
    """(root rule, relative path, file) of every config, manifest and run record in a store."""
    out = []
    for f in sorted(store.rglob("*")):
        rel = f.relative_to(store).as_posix()
        if not f.is_file():
            continue
        if rel == "ckptfs.cbor":
            out.append(("store-config", rel, f))
        elif _OBJECT.fullmatch(rel):
            out.append(("manifest", rel, f))
        elif rel.startswith("runs/") and rel.count("/") == 2:
            _, run, name = rel.split("/")
            if RUN_ID.match(run) and not run.endswith(".") and parse_seq_name(name):
                out.append(("run-record", rel, f))
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
