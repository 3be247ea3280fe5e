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
         "retention-tombstone", "retention-lease", "v2-record-header", "v2-pack-header",
         "v2-head-hint", "v2-forward")
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
    v2 = _v2_root(rel)
    if v2 is not None:
        return v2
    parts = rel.split("/")
    if (len(parts) == 3 and parts[0] == "runs" and RUN_ID.match(parts[1])
            and not parts[1].endswith(".") and parse_seq_name(parts[2])):
        return "run-record"
    for root, pattern in _CONTROLS.items():
        m = pattern.fullmatch(rel)
        if m and (not m.group(1) or RUN_ID.match(m.group(1))):
            return root
    return None


_PACK = re.compile(r"packs/([0-9a-f]{2})/\1[0-9a-f]{62}")
_HINT = re.compile(r"runs/([^/]+)/head")


def _v2_root(rel: str) -> str | None:
    """spec/v2.md objects named by their path: packs, head hints, forwards (a v2 run record is
    told from a v1 one by its first bytes, in ``_cbor_bytes``)."""
    if _PACK.fullmatch(rel):
        return "v2-pack-header"
    m = _HINT.fullmatch(rel)
    if m and RUN_ID.match(m.group(1)):
        return "v2-head-hint"
    if rel.startswith("moved/") and _container_path(rel[len("moved/"):]):
        return "v2-forward"
    return None  # any other name is no object (spec/v2.md 2, "Names that are not objects")


def _container_path(rel: str) -> bool:
    """Whether ``rel`` is a pack's or a run record's path (what a forward may stand for)."""
    return bool(_PACK.fullmatch(rel)) or root_of(rel) == "run-record"


def container_header(data: bytes, run_dir: Path | None = None) -> bytes:
    """The header bytes of a v2 container (spec/v2.md 3.1), inflated when its form is 0x03,
    or (form 0x04, 3.1.2) decoded against its base records, read from ``run_dir`` (the
    record's folder); unchecked otherwise (the CDDL validates the map)."""
    from ckptfs.format import containers as ct
    from ckptfs.format import framing

    hlen = int.from_bytes(data[len(ct.MAGIC) + 1:ct.PREFIX_LEN], "big")
    stored = data[ct.PREFIX_LEN:ct.PREFIX_LEN + hlen]
    if data[len(ct.MAGIC)] == ct.CONTAINER_BY_BASE and run_dir is not None:
        def base(seq: int, depth: int) -> bytes:
            got = (run_dir / f"{seq:020d}").read_bytes()
            return ct.plain_header(got, what=str(seq), base=base, depth=depth)[0]

        return ct.plain_header(data, what="record", base=base)[0]
    if data[len(ct.MAGIC)] == ct.CONTAINER_COMPRESSED:
        return framing.inflate_declared(memoryview(stored), ct.MAX_HEADER_SIZE, what="header")
    return stored


def _base_skipped(rel: str, f: Path, skip: frozenset[str] | set[str]) -> bool:
    """Whether ``rel`` is a record stored by reference (spec/v2.md 3.1.2) whose base chain
    holds a file of ``skip`` (damaged on purpose): its header cannot be decoded either."""
    from ckptfs.format import containers as ct

    parts = rel.split("/")
    seen = 0
    while len(parts) == 3 and parts[0] == "runs" and seen <= ct.MAX_BASE_DEPTH:
        try:
            base = ct.peek_base(f.read_bytes()[:ct.PEEK_BASE])
        except OSError:
            return False
        if base is None:
            return False
        rel = f"runs/{parts[1]}/{base:020d}"
        if rel in skip:
            return True
        f = f.parent / f"{base:020d}"
        seen += 1
    return False


def store_files(store: Path) -> list[tuple[str, str, Path]]:
    """(root rule, relative path, file) of every structure in a store."""
    out = []
    for f in sorted(store.rglob("*")):
        rel = f.relative_to(store).as_posix()
        root = root_of(rel) if f.is_file() else None
        if root == "run-record" and f.read_bytes()[:1] == b"\x89":  # spec/v2.md 3.1
            root = "v2-record-header"
        if root is not None:
            out.append((root, rel, f))
    return out


def _cbor_bytes(root: str, rel: str, f: Path) -> bytes:
    """The CBOR item of a file: manifests are framed, the rest raw."""
    data = f.read_bytes()
    if root in ("v2-pack-header", "v2-record-header"):
        return container_header(data, f.parent)
    if root == "v2-head-hint":
        from ckptfs.format.containers import HINT_CHECK

        return data[:-HINT_CHECK]
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
        if rel in skip or _base_skipped(rel, f, skip):
            continue
        try:
            why = check(root, _cbor_bytes(root, rel, f))
        except Exception as e:  # an object that cannot even be unframed
            if root == "v2-record-header" and f.read_bytes()[8:9] == b"\x04":
                continue  # stored by reference, its chain broken on purpose (3.1.2): the
                #           reader vectors judge it; its own bytes are checked with its base
            why = f"cannot unframe: {e}"
        if why is not None:
            problems.append(f"{rel} ({root}): {why}")
    return problems
