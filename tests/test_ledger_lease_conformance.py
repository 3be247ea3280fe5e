"""The lease vectors (frozen data; their generator, gen_ledger_lease.py, is in git history) can
fail: a reader that ignores an intent's deadline treats a running call as in doubt and fails
exactly the vector about it."""

from __future__ import annotations


import shlex
import sys

from ckptfs_conformance import runner


ADAPTER = f"{shlex.quote(sys.executable)} -m ckptfs_conformance.adapters.ckptfs_adapter"


def test_a_reader_that_ignores_the_lease_deadline_fails_the_lease_vector() -> None:
    results = runner.run(f"{ADAPTER} --break ignore-lease-deadline", batch=True,
                         only="store-*,lookup/*,writer/*")
    st = {r.id: r.status for r in results}
    assert runner.ERROR not in st.values()
    assert {i for i, s in st.items() if s == runner.FAIL} == {"store-valid/ledger-lease-states"}


def test_lease_vectors_pass_and_need_the_ledger_capability() -> None:
    results = runner.run(ADAPTER, batch=True, only="ledger-lease")
    assert len(results) >= 12 and {r.status for r in results} == {runner.PASS}, [
        (r.id, r.message) for r in results if r.status != runner.PASS]
    claims = set(runner.CAPABILITIES) - {"ledger"}
    skipped = runner.run(ADAPTER, batch=True, only="ledger-lease", capabilities=claims)
    assert {r.status for r in skipped} == {runner.SKIP}
