"""verify, gc and copy read a long effect ledger once, not once per snapshot: every ledger
chunk is read at most once, and the large results found match a full read of each ledger."""

from __future__ import annotations

from collections import Counter
from pathlib import Path


import ckptfs
from ckptfs.format.ledger import LedgerRef
from ckptfs.ops.copy import copy_runs
from ckptfs.ops.gc import gc
from ckptfs.ops.verify import verify
from ckptfs.storage.local import LocalStorage
from ckptfs.store.ledgers import LedgerScanner
from ckptfs.store.repository import Repository

class CountingStorage(LocalStorage):
    """Local storage counting reads: whole objects by path, ranged reads by (path, start,
    length); a v2 ledger chunk is a body read by range from the record or pack holding it."""

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self.reads: Counter[tuple[str | int, ...]] = Counter()

    def read(self, path: str) -> bytes:
        self.reads[(path,)] += 1
        return super().read(path)

    def read_range(self, path: str, start: int, length: int) -> bytes:
        self.reads[(path, start, length)] += 1
        return super().read_range(path, start, length)


def _long_run(url: str, effects: int = 60) -> ckptfs.Store:
    store = ckptfs.open_store(url)
    run = store.start_run("r")
    for i in range(effects):  # every 10th result is large: it gets chunks of its own
        pad = "y" * (70_000 if i % 10 == 0 else 50)
        run.effect("call", lambda i=i, pad=pad: {"i": i, "pad": f"{i}{pad}"}, key=f"k{i}")
    return store


def _ledger_chunks(store: ckptfs.Store) -> set[str]:
    out = set()
    for snap in store.snapshots("r"):
        if snap.manifest.ledger is not None:
            out |= {c.digest.hex for c in LedgerRef.from_cbor(snap.manifest.ledger).chunks}
    return out


def test_copy_reads_the_source_ledger_once(tmp_path: Path) -> None:
    src = str(tmp_path / "src")
    ledger_chunks = _ledger_chunks(_long_run(src, 40))
    counting = CountingStorage(src)
    rep = copy_runs(Repository(counting), ckptfs.open_store(str(tmp_path / "dst")).repo)
    assert rep.ok and rep.snapshots_copied == 80
    # once to decode, once to send (copy reads what it sends); before v1 went this test
    # counted reads under chunks/, which a v2 store never has, so it could not fail
    ranged = [k for k in counting.reads if len(k) == 3]
    assert len(ranged) >= len(ledger_chunks) > 40  # the ledger's bodies are among them
    assert max(counting.reads.values()) <= 2, counting.reads.most_common(3)
    assert verify(ckptfs.open_store(str(tmp_path / "dst")).repo, read_data=True).ok


def test_scanner_matches_a_full_read_across_forks(tmp_path: Path) -> None:
    """Forks and resumes make a ledger that does not extend the one read just before it."""
    store = _long_run(str(tmp_path / "s"), 30)
    fork = store.fork("r@21", "f")
    for i in range(15):
        fork.effect("other", lambda i=i: "z" * (80_000 if i == 7 else 10) + str(i), key=f"f{i}")
    scanner = LedgerScanner(store.repo.objects)
    order = [*store.snapshots("r"), *store.snapshots("f"), *store.snapshots("r")]
    seen = 0
    for snap in order:
        full = [(r.key, r.result_content) for r in store.ledger(snap).records
                if r.result_content is not None]
        assert list(scanner.results(snap)) == full
        seen += len(full)
    assert seen > 0
