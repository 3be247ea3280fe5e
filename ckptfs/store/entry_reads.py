"""Reading captured entries (spec/format.md 6.1): their verified content in one batch, the
size check before anything is assembled in memory, the value decode and the effect ledger."""

from __future__ import annotations

from typing import Any

from ckptfs.errors import CorruptSnapshot, FormatError
from ckptfs.format import cbor
from ckptfs.format.digest import Digest
from ckptfs.format.ledger import Ledger, LedgerRef
from ckptfs.format.limits import MAX_VALUE_SIZE
from ckptfs.format.models import Captured
from ckptfs.store.objects import ObjectStore


def read_content(objects: ObjectStore, entry: Captured, *, where: str) -> bytes:
    """The verified content of a captured entry, read in one batch."""
    if entry.inline is not None:
        return entry.inline  # verified against its digest when the manifest was parsed
    check_assembled_size(entry.size, where=where)
    content = b"".join(objects.get_chunks(entry.chunks, where=where))
    if Digest.of(content) != entry.digest:
        raise CorruptSnapshot(f"{where}: content does not match the entry digest {entry.digest}")
    return content


def check_assembled_size(size: int, *, where: str) -> None:
    """Refuse, before reading a chunk, content that would be assembled in memory (a value, a
    ledger) and is larger than MAX_VALUE_SIZE: a small manifest that lists one 16 MiB chunk
    hundreds of times names gigabytes."""
    if size > MAX_VALUE_SIZE:
        raise CorruptSnapshot(
            f"{where}: declares {size} bytes of content, more than a value or ledger may hold "
            f"({MAX_VALUE_SIZE} bytes, spec/format.md 'Limits'); it is not read. The snapshot "
            "was not written by a conforming writer: restore the run from a copy of the store.")


def decode_value(entry: Captured, content: bytes, *, where: str) -> Any:
    if entry.encoding == "cbor-seq":
        return cbor.decode_sequence(content, what=where)
    return cbor.decode(content, what=where, allow_bignum=True, check_canonical=False)


def read_ledger(objects: ObjectStore, field: Any, *, where: str
                ) -> tuple[Ledger, Captured, bytes, list[Any]]:
    """A manifest's ``ledger`` field read, verified and folded: the ledger, its content entry,
    the content and the decoded records (CorruptSnapshot if the records break the rules)."""
    ref = LedgerRef.from_cbor(field, what=where)
    entry = ref.as_entry()
    content = read_content(objects, entry, where=where)
    items = decode_value(entry, content, where=where)
    if len(items) != ref.count:
        raise CorruptSnapshot(f"{where}: holds {len(items)} records, count says {ref.count}")
    try:
        return Ledger.from_cbor(items, what=where), entry, content, items
    except FormatError as e:
        raise CorruptSnapshot(str(e)) from e
