"""Which chunks a snapshot needs: its entries', its effect ledger's, and those of the large
effect results the ledger's records hold (``result_content``). Copy and verify both walk this."""

from __future__ import annotations

from ckptfs.format.ledger import LedgerRef
from ckptfs.format.models import Captured, ChunkRef
from ckptfs.store.repository import Repository, Snapshot


def snapshot_chunks(repo: Repository, snap: Snapshot, *, results: bool = True
                    ) -> list[tuple[str, ChunkRef]]:
    """``(what needs it, chunk)`` pairs in first-use order, each chunk once. ``results`` reads
    the ledger (verified) to find result chunks; without it the ledger is not read."""
    named: list[tuple[str, Captured]] = [
        (f"entry {name!r}", e) for name, e in snap.manifest.entries.items()
        if isinstance(e, Captured)]
    if snap.manifest.ledger is not None:  # validated when the manifest was parsed
        named.append(("(ledger)", LedgerRef.from_cbor(snap.manifest.ledger).as_entry()))
        if results:
            from ckptfs.runtime.store import Store

            for r in Store(repo.storage).ledger(snap).records:
                if r.result_content is not None:
                    named.append((f"(ledger result {r.key!r})", r.result_content))
    out: dict[object, tuple[str, ChunkRef]] = {}
    for what, e in named:
        for c in e.chunks:
            out.setdefault(c.digest, (what, c))
    return list(out.values())
