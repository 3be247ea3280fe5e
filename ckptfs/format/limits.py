"""How large a stored file or an assembled value may be (spec/format.md section 1, "Limits").

A reader checks a file's size before reading it (a sparse 6 GiB file in place of a record must
fail at once, not exhaust memory), and a value's declared size before assembling its chunks (a
chunk list that repeats one 16 MiB chunk can name gigabytes with a small manifest).
"""

from __future__ import annotations

from ckptfs.format.lifecycle import MAX_CONTROL_SIZE
from ckptfs.format.models import MAX_CHUNK_SIZE, MAX_CONFIG_SIZE, MAX_MANIFEST_SIZE
from ckptfs.format.containers import MAX_FORWARD_SIZE, MAX_PACK_FILE, MAX_RECORD_FILE
from ckptfs.format.names import CHUNKS, CONFIG_PATH, MOVED, PACKS, RUNS, SNAPSHOTS, parse_seq_name

#: the content of a value entry (``cbor``/``cbor-seq``) or of a ledger, assembled in memory to be
#: decoded. Larger data is a Blob, which readers stream chunk by chunk.
MAX_VALUE_SIZE = 64 * 1024 * 1024
#: what framing may add to a chunk or manifest file: the codec byte, and zstd's worst case
#: (a writer keeps zstd only when it shrinks the object, but a reader allows any valid frame)
FRAMING_MARGIN = 1024 * 1024
MAX_CHUNK_FILE = MAX_CHUNK_SIZE + FRAMING_MARGIN
MAX_MANIFEST_FILE = MAX_MANIFEST_SIZE + FRAMING_MARGIN
#: v2 containers at a run record's path, under packs/ and forwards under moved/ have bounds of
#: their own (ckptfs.format.containers; spec/v2.md 3): a v1 record's 64 KiB is enforced when a
#: file is parsed as one (``RunRecord.from_bytes``), since the path does not say the layout


def stored_size_limit(path: str) -> int:
    """The largest file a reader accepts at store path ``path``, by what the path holds:
    the config, a run record, a framed chunk or manifest, or a control object (retired marker,
    expiry override, tombstone, lease, or any other small file)."""
    parts = path.split("/")
    if path == CONFIG_PATH:
        return MAX_CONFIG_SIZE
    if parts[0] == CHUNKS:
        return MAX_CHUNK_FILE
    if parts[0] == SNAPSHOTS:
        return MAX_MANIFEST_FILE
    if parts[0] == RUNS and len(parts) == 3 and parse_seq_name(parts[2]) is not None:
        # a v2 record carries its manifest and bodies (a v1 record's 64 KiB limit is checked
        # when it is parsed as one)
        return MAX_RECORD_FILE
    if parts[0] == PACKS:
        return MAX_PACK_FILE
    if parts[0] == MOVED:
        return MAX_FORWARD_SIZE
    return MAX_CONTROL_SIZE


def kind_of(path: str) -> str:
    """What the file at ``path`` is, for messages."""
    parts = path.split("/")
    if path == CONFIG_PATH:
        return "store config"
    if parts[0] in (CHUNKS, SNAPSHOTS):
        return {CHUNKS: "chunk", SNAPSHOTS: "manifest"}[parts[0]]
    if parts[0] == RUNS and len(parts) == 3 and parse_seq_name(parts[2]) is not None:
        return "run record"
    if parts[0] in (PACKS, MOVED):
        return {PACKS: "pack", MOVED: "forward"}[parts[0]]
    return "control object"
