"""forget decided from the run listings (spec/v2.md 9.1): the same verdicts as the plan that
reads every record, on real v2 stores (several runs, gaps from earlier forgets, finished and
unfinished heads, a subset of runs); damage in a record it forgets does not stop it, damage in
one it keeps does."""

from __future__ import annotations

import random

import pytest

import ckptfs
from ckptfs.format.names import record_path
from ckptfs.ops.retention import Policy, forget
from ckptfs.ops.verify import verify



def _verdicts(rep: object) -> list[tuple[str, int, bool, tuple[str, ...]]]:
    return [(d.run, d.seq, d.keep, d.reasons) for d in rep.decisions]  # type: ignore[attr-defined]


def _fill(store: ckptfs.Store, rng: random.Random) -> None:
    for r in range(3):
        run = store.start_run(f"r{r}")
        for i in range(rng.randint(1, 7)):
            run.checkpoint({"i": i, "r": r})
        if rng.random() < 0.5:
            run.checkpoint({"done": True}, boundary="final")


@pytest.mark.parametrize("seed", range(4))
def test_listing_plan_matches_the_full_plan(store: ckptfs.Store, seed: int) -> None:
    rng = random.Random(seed)
    _fill(store, rng)
    forget(store.repo, Policy(keep_last=rng.randint(2, 4)))  # gaps: retired ranges, strays
    for r in range(3):  # more history after the gap
        run = store.resume(f"r{r}")
        for i in range(rng.randint(0, 4)):
            run.checkpoint({"after": i})
    policies = [Policy(keep_last=1), Policy(keep_last=3), Policy(keep_unfinished_heads=True),
                Policy(keep_last=2, keep_unfinished_heads=True)]
    policy = policies[seed % len(policies)]
    runs = None if seed % 2 == 0 else ["r0", "r2"]
    full = forget(store.repo, policy, runs=runs, dry_run=True)  # reads every record
    fast = forget(store.repo, policy, runs=runs)  # the listing plan
    assert fast.bytes_freed is None and full.bytes_freed is not None
    assert _verdicts(fast) == _verdicts(full)
    assert [d.id for d in fast.decisions if d.keep] == [d.id for d in full.decisions if d.keep]
    assert all(d.id is None for d in fast.forgotten)
    assert fast.runs_removed == full.runs_removed and not fast.problems
    for d in full.decisions:
        assert (d.seq in store.repo.seqs(d.run)) == d.keep, d
    assert verify(store.repo, read_data=True).ok


def test_a_damaged_record_it_forgets_is_forgotten_a_damaged_kept_one_stops_its_run(
        store: ckptfs.Store) -> None:
    for name in ("a", "b"):
        run = store.start_run(name)
        for i in range(4):
            run.checkpoint({"i": i})
    st = store.repo.storage
    for run_id, seq in (("a", 2), ("b", 4)):  # a's forgotten seq 2, b's kept head
        p = record_path(run_id, seq)
        data = st.read(p)
        st.delete(p)
        st.create(p, data[:20] + bytes([data[20] ^ 0xFF]) + data[21:])
    rep = forget(store.repo, Policy(keep_last=1))
    assert store.repo.seqs("a") == [4]
    assert store.repo.seqs("b") == [1, 2, 3, 4]  # its kept head is unreadable: untouched
    assert [p.split(":")[0] for p in rep.problems] == ["b@4"]
    assert {d.run for d in rep.decisions} == {"a"}
