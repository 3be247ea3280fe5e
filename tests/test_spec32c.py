"""Issue 32 (spec32c): the reader vectors of ckptfs_conformance/gen_spec32c.py each fail a
reader that reads their point the other way (``--break c32-...``), and the maintenance
vectors (ops ``erase``, ``copy``) catch an implementation whose copy or erase does less."""

from __future__ import annotations

import shlex
import sys

import pytest

from ckptfs_conformance import runner

ADAPTER = f"{shlex.quote(sys.executable)} -m ckptfs_conformance.adapters.ckptfs_adapter"

C32_BREAKS = {
    "c32-encoding-optional": {"store-invalid/v2-entry-without-encoding"},
    "c32-closed-ledger-records": {"store-valid/v2-ledger-unknown-record-key"},
    # the version 1 store's snapshot has schema version 7: a reader that mixes the two
    # versions refuses it too
    "c32-schema-version-is-format": {"store-valid/v2-schema-version-3",
                                     "store-valid/v2-v1-config-with-v2-features"},
}


def _failed(command: str, only: str) -> set[str]:
    results = runner.run(command, batch=True, only=only)
    assert results and runner.ERROR not in {r.status for r in results}
    return {r.id for r in results if r.status == runner.FAIL}


def test_every_c32_break_is_tested() -> None:
    from ckptfs_conformance.adapters.spec32c_breaks import SPEC32C_BREAKS

    assert set(SPEC32C_BREAKS) == set(C32_BREAKS)


@pytest.mark.parametrize("rule", sorted(C32_BREAKS))
def test_c32_broken_reader_fails_exactly_its_vectors(rule: str) -> None:
    assert _failed(f"{ADAPTER} --break {rule}", "*/v2-*") == C32_BREAKS[rule]


def test_reference_passes_the_maintenance_vectors() -> None:
    assert _failed(ADAPTER, "maintenance/*,gc/*") == set()


def test_a_copy_without_retention_fails_the_copy_vectors() -> None:
    """A copy that leaves the retention objects behind (markers, expiry overrides, tombstones:
    it deletes them from the destination after copying) fails the copy vectors that carry
    some; the erase vectors still pass."""
    wrapper = (f"{shlex.quote(sys.executable)} -c " + shlex.quote(
        "import shutil, sys\n"
        "from pathlib import Path\n"
        "from ckptfs_conformance.adapters import ckptfs_adapter, maintenance\n"
        "real = maintenance.do_copy\n"
        "def bare(src, dst, now, run):\n"
        "    out = real(src, dst, now, run)\n"
        "    for p in [*Path(dst).glob('runs/*/retired'), Path(dst) / 'tombstones']:\n"
        "        shutil.rmtree(p, ignore_errors=True)\n"
        "    for p in Path(dst).glob('runs/*/expiry*'):\n"
        "        p.unlink()\n"
        "    return out\n"
        "maintenance.do_copy = bare\n"
        "sys.exit(ckptfs_adapter.main(sys.argv[1:]))\n"))
    failed = _failed(wrapper, "maintenance/*")
    assert {"maintenance/copy-lifetimes", "maintenance/copy-erased-fence",
            "maintenance/copy-erased-held", "maintenance/copy-shorter-expiry"} <= failed
    assert not {f for f in failed if f.startswith("maintenance/erase-")}


#: how a copy may read a retired marker's ``ids`` the wrong way (spec/retention.md 3)
MARKER_IDS_WRONG = {
    # ignores them: the backup that fell behind is a conflict again
    "ignored": ("lambda v, through, kept: ()", {"maintenance/copy-forgot-past-head"}),
    # takes the pairs it can parse from a malformed list as proof
    "lenient": ("lambda v, through, kept: tuple((p[0], Digest(p[1])) for p in v or () "
                "if len(p[1]) == 32)", {"maintenance/copy-forgot-past-head-bad-ids"}),
    # refuses the whole marker for a malformed list (the run is then unreadable)
    "refused": ("lambda v, through, kept: real(v, through, kept) or (_ for _ in ()).throw("
                "FormatError('bad ids')) if v is not None and v != [] else ()",
                {"maintenance/copy-forgot-past-head-bad-ids"}),
}


@pytest.mark.parametrize("how", sorted(MARKER_IDS_WRONG))
def test_a_copy_that_reads_marker_ids_wrongly_fails_exactly_their_vector(how: str) -> None:
    parse, expected = MARKER_IDS_WRONG[how]
    wrapper = (f"{shlex.quote(sys.executable)} -c " + shlex.quote(
        "import sys\n"
        "from ckptfs.errors import FormatError\n"
        "from ckptfs.format import lifecycle\n"
        "from ckptfs.format.digest import Digest\n"
        "from ckptfs_conformance.adapters import ckptfs_adapter\n"
        "real = lifecycle._retired_ids\n"
        f"lifecycle._retired_ids = {parse}\n"
        "sys.exit(ckptfs_adapter.main(sys.argv[1:]))\n"))
    assert _failed(wrapper, "maintenance/*") == expected
