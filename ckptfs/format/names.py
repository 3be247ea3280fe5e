"""Naming rules for run ids, entry names and labels, and the store's path layout.

Names never become paths outside the store root: run ids are one path segment from a small
alphabet; entry names are keys inside a manifest and never become store paths at all, but are
restricted anyway so that exporting an entry to a file is safe.
"""

from __future__ import annotations

import re

from ckptfs.errors import InvalidName
from ckptfs.format.digest import Digest

RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")
ENTRY_SEGMENT = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}\Z")
LABEL_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}\Z")
BOUNDARY = re.compile(r"^[a-z][a-z0-9_.-]{0,63}\Z")
MAX_ENTRY_NAME = 255
SEQ_WIDTH = 20
MAX_U64 = 2 ** 64 - 1
#: a decimal number as people type it: ASCII digits, no sign, no leading zeros except "0"
DECIMAL = re.compile(r"(?:0|[1-9][0-9]{0,19})\Z")

CONFIG_PATH = "ckptfs.cbor"
CHUNKS = "chunks"
SNAPSHOTS = "snapshots"
RUNS = "runs"
TMP = "tmp"


def check_run_id(run_id: object) -> str:
    if not isinstance(run_id, str) or not RUN_ID.match(run_id) or run_id.endswith("."):
        raise InvalidName(
            f"invalid run id {run_id!r:.140}: use 1-128 characters from A-Z a-z 0-9 . _ -, "
            "starting with a letter or digit and not ending with '.'"
        )
    return run_id


def check_entry_name(name: object) -> str:
    if not isinstance(name, str) or not name or len(name.encode()) > MAX_ENTRY_NAME:
        raise InvalidName(f"invalid entry name {name!r:.140}: 1-255 bytes required")
    for seg in name.split("/"):
        if not ENTRY_SEGMENT.match(seg) or seg in (".", ".."):
            raise InvalidName(
                f"invalid entry name {name!r:.140}: segments separated by '/' must each be "
                "1-128 characters from A-Z a-z 0-9 . _ -, not start with '.' or '-', "
                "and not be empty (no leading '/', no '..')"
            )
    return name


def check_label_key(key: object) -> str:
    if not isinstance(key, str) or not LABEL_KEY.match(key):
        raise InvalidName(f"invalid label key {key!r:.140}: 1-128 of A-Z a-z 0-9 . _ / -")
    return key


def check_boundary(name: object) -> str:
    if not isinstance(name, str) or not BOUNDARY.match(name):
        raise InvalidName(
            f"invalid boundary {name!r:.80}: lowercase letters, digits, '_', '.', '-', "
            "starting with a letter, at most 64 characters"
        )
    return name


def parse_uint(text: object, *, what: str, maximum: int = MAX_U64) -> int:
    """A non-negative integer written in text the one way ckptfs accepts it: ASCII digits 0-9
    only (``str.isdigit`` and ``int()`` also take other scripts' digits and superscripts), no
    sign, space or ``_``, no leading zeros except ``0`` itself, at most ``maximum``
    (default 2^64-1). InvalidName (category ``path``) otherwise, naming ``what``."""
    if isinstance(text, str) and DECIMAL.match(text):
        n = int(text)
        if n <= maximum:
            return n
    raise InvalidName(f"{what}: {text!r:.60} is not a decimal number from 0 to {maximum} "
                      "(ASCII digits 0-9, no sign and no leading zeros)")


def seq_name(seq: int) -> str:
    return f"{seq:0{SEQ_WIDTH}d}"


def parse_seq_name(name: str) -> int | None:
    """The sequence number a run-record file name stands for, or None if it is not one."""
    if len(name) == SEQ_WIDTH and name.isascii() and name.isdigit() and int(name) < 1 << 64:
        return int(name)
    return None  # 20 digits above 2^64-1 stand for no seq (spec/format.md 3.1, issue 16)


def chunk_path(d: Digest) -> str:
    h = d.hex
    return f"{CHUNKS}/{h[:2]}/{h}"


def snapshot_path(d: Digest) -> str:
    h = d.hex
    return f"{SNAPSHOTS}/{h[:2]}/{h}"


def run_dir(run_id: str) -> str:
    return f"{RUNS}/{check_run_id(run_id)}"


def record_path(run_id: str, seq: int) -> str:
    return f"{run_dir(run_id)}/{seq_name(seq)}"


# -- retention layer (spec/retention.md) --------------------------------------------------------
TOMBSTONES = "tombstones"
LEASES = "leases"
RETIRED = "retired"
EXPIRY = "expiry"


def retired_dir(run_id: str) -> str:
    return f"{run_dir(run_id)}/{RETIRED}"


def expiry_path(run_id: str, seq: int | None = None) -> str:
    """The expiry override of a whole run (``seq`` None) or of one of its snapshots."""
    return f"{run_dir(run_id)}/{EXPIRY}" + ("" if seq is None else f"-{seq_name(seq)}")


def tombstone_path(run_id: str, seq: int | None = None) -> str:
    check_run_id(run_id)
    if seq is None:
        return f"{TOMBSTONES}/{run_id}.cbor"
    return f"{TOMBSTONES}/{run_id}/{seq_name(seq)}.cbor"


# -- format v2 (spec/v2.md) ----------------------------------------------------------------------
PACKS = "packs"
MOVED = "moved"
HEAD_HINT = "head"


def pack_path(d: Digest) -> str:
    h = d.hex
    return f"{PACKS}/{h[:2]}/{h}"


def head_hint_path(run_id: str) -> str:
    return f"{run_dir(run_id)}/{HEAD_HINT}"


def forward_path(container_path: str) -> str:
    """Where maintenance says the live bodies of the (deleted) container at a path went."""
    return f"{MOVED}/{container_path}"
