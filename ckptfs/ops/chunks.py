"""Which chunks a snapshot needs: its entries', its effect ledger's, and those of the large
effect results the ledger's records hold (``result_content``). Copy, verify, gc and erase walk
this; they pass one LedgerScanner for all their snapshots so that long ledgers are read once."""

from __future__ import annotations

from ckptfs.format.ledger import LedgerRef
from ckptfs.format.models import Captured, ChunkRef
from ckptfs.store.ledgers import LedgerScanner
from ckptfs.store.repository import Repository, Snapshot


def snapshot_chunks(repo: Repository, snap: Snapshot, *, results: bool = True,
                    ledgers: LedgerScanner | None = None) -> list[tuple[str, ChunkRef]]:
    """``(what needs it, chunk)`` pairs in first-use order, each chunk once. ``results`` reads
    the ledger (verified, through ``ledgers`` when given) to find result chunks; without it the
    ledger is not read."""
    named: list[tuple[str, Captured]] = [
        (f"entry {name!r}", e) for name, e in snap.manifest.entries.items()
        if isinstance(e, Captured)]
    if snap.manifest.ledger is not None:  # validated when the manifest was parsed
        named.append(("(ledger)", LedgerRef.from_cbor(snap.manifest.ledger).as_entry()))
        if results:
            scanner = ledgers or LedgerScanner(repo.objects)
            named += [(f"(ledger result {key!r})", rc) for key, rc in scanner.results(snap)]
    out: dict[object, tuple[str, ChunkRef]] = {}
    for what, e in named:
        for c in e.chunks:
            out.setdefault(c.digest, (what, c))
    return list(out.values())
