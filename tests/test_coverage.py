"""Requirement ids and coverage (issue 32): every MUST of spec/*.md has an id, vectors name the
ids they test, and no requirement is untested unless the spec says why no vector can test it
(or it is one of the known gaps, a list that may only shrink)."""

from __future__ import annotations

import fnmatch
import json
import subprocess
import sys
from pathlib import Path

from ckptfs_conformance import coverage, runner
from ckptfs_conformance.req_map import REQ_VECTORS

REPO = Path(__file__).resolve().parent.parent
GAPS = REPO / "ckptfs_conformance" / "coverage_gaps.txt"


def _gaps() -> set[str]:
    return {line.strip() for line in GAPS.read_text().splitlines()
            if line.strip() and not line.startswith("#")}


def test_every_requirement_keyword_has_an_id() -> None:
    assert coverage.unmarked_sentences() == []


def test_requirement_ids_are_unique_and_in_the_shipped_list() -> None:
    reqs = coverage.spec_requirements()
    ids = [r.id for r in reqs]
    assert len(ids) == len(set(ids)) and len(ids) > 200
    shipped = json.loads((runner.VECTORS / "requirements.json").read_text())
    assert [r["id"] for r in shipped] == ids  # regenerate after editing the spec


def test_the_map_names_real_requirements_and_vectors() -> None:
    ids = {r.id for r in coverage.spec_requirements()}
    vectors = [v["id"] for v in runner.load_vectors()]
    assert set(REQ_VECTORS) <= ids, sorted(set(REQ_VECTORS) - ids)
    for req, globs in REQ_VECTORS.items():
        for g in globs:
            assert any(fnmatch.fnmatchcase(v, g) for v in vectors), (req, g)
    untestable = {r.id for r in coverage.spec_requirements() if r.untestable}
    assert not untestable & set(REQ_VECTORS), "a requirement marked untestable has vectors"


def test_no_untested_requirement_beyond_the_known_gaps() -> None:
    """CI fails when a requirement has no vector and no 'untestable:' reason; the known gaps
    (coverage_gaps.txt) may only shrink: a gap that is now tested must leave the list."""
    rows = coverage.coverage()
    untested = {r.requirement.id for r in rows if r.status == "UNTESTED"}
    assert untested - _gaps() == set(), sorted(untested - _gaps())
    assert _gaps() - untested == set(), f"tested now, remove from the gaps: {sorted(_gaps() - untested)}"


def test_coverage_table_from_the_command_line() -> None:
    p = subprocess.run([sys.executable, "-m", "ckptfs_conformance", "--coverage"], cwd=REPO,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    last = p.stdout.strip().splitlines()[-1]
    rows = coverage.coverage()
    assert last == f"{len(rows)} requirements, {sum(r.status == 'UNTESTED' for r in rows)} untested"
    assert "tested     v2.lookup" in p.stdout or "v2.store.depend" in p.stdout
