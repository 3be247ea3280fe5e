"""Requirement coverage (issue 32): every MUST / MUST NOT / REQUIRED / SHALL of spec/*.md has a
stable id written after its sentence, ``[req: v2.lookup.prefix-ambiguous]``, or, when no vector
can test it, ``[req: ID untestable: <reason>]``. Vectors name the ids they test in their JSON
(``"requirements": [...]``, written by the generator from ckptfs_conformance/req_map.py), and
``python -m ckptfs_conformance --coverage`` prints each requirement with its vectors, then
``N requirements, M untested``.

The generator copies the ids into ``vectors/requirements.json`` so that an installed suite
(whose wheel holds no spec/) prints the same table.
"""

from __future__ import annotations

import fnmatch
import json
import re
from pathlib import Path
from typing import Any

import attrs

ROOT = Path(__file__).resolve().parent
SPEC = ROOT.parent / "spec"
VECTORS = ROOT / "vectors"
#: an id: file stem, section word, slug (lowercase letters, digits, dots and dashes)
REQ = re.compile(r"\[req: ([a-z0-9][a-z0-9.-]*[a-z0-9])(?: untestable: ([^\]]+))?\]")
KEYWORD = re.compile(r"\b(MUST|REQUIRED|SHALL)\b")


@attrs.frozen
class Requirement:
    """One requirement of the spec: its id, its file, and why no vector can test it (or None)."""

    id: str
    file: str
    untestable: str | None = None


def spec_requirements(spec: Path = SPEC) -> list[Requirement]:
    """Every requirement id of ``spec/*.md``, in file order (ids must be unique)."""
    out: list[Requirement] = []
    for f in sorted(spec.glob("*.md")):
        for m in REQ.finditer(f.read_text()):
            out.append(Requirement(m.group(1), f.name, m.group(2)))
    return out


def unmarked_sentences(spec: Path = SPEC) -> list[str]:
    """Sentences with a requirement keyword but no id after them (``file:line: text``)."""
    out = []
    for f in sorted(spec.glob("*.md")):
        lines = f.read_text().split("\n")
        code = False
        for i, line in enumerate(lines):
            if line.lstrip().startswith("```"):
                code = not code
            if code or "RFC 2119" in line or "key words" in line:
                continue
            for m in KEYWORD.finditer(line):
                # the id follows within the sentence: the rest of this line or the next ones
                rest = "\n".join([line[m.end():]] + lines[i + 1:i + 8])
                stop = re.search(r"\[req: |\n\n", rest)
                if stop is None or not rest[stop.start():].startswith("[req: "):
                    out.append(f"{f.name}:{i + 1}: {line.strip()[:100]}")
                    break
    return out


def annotate(out: Path, frozen: frozenset[str] = frozenset(), spec: Path = SPEC) -> None:
    """Write each vector's ``requirements`` (from req_map) and ``requirements.json``: every
    requirement with its reason if untestable and the vectors that test it. Frozen vectors
    (``frozen``: paths relative to ``out``, data the generator never rewrites) are named in
    ``requirements.json`` only."""
    from ckptfs_conformance.req_map import REQ_VECTORS

    by: dict[str, list[str]] = {}
    for f in sorted(out.glob("*/*.json")):
        v = json.loads(f.read_text())
        names = sorted(r for r, globs in REQ_VECTORS.items()
                       if any(fnmatch.fnmatchcase(v["id"], g) for g in globs))
        for r in names:
            by.setdefault(r, []).append(v["id"])
        if names and f.relative_to(out).as_posix() not in frozen:
            v["requirements"] = names
            f.write_text(json.dumps(v, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
    (out / "requirements.json").write_text(json.dumps(
        [{**attrs.asdict(r), "vectors": sorted(by.get(r.id, ()))}
         for r in spec_requirements(spec)], indent=1, sort_keys=True) + "\n")


@attrs.frozen
class Row:
    """A requirement and the vectors that name it."""

    requirement: Requirement
    vectors: tuple[str, ...]

    @property
    def status(self) -> str:
        if self.vectors:
            return "tested"
        return "untestable" if self.requirement.untestable else "UNTESTED"


def coverage(root: Path = VECTORS) -> list[Row]:
    """Each requirement of ``root/requirements.json`` with the vectors under ``root`` naming it."""
    listed = json.loads((root / "requirements.json").read_text())
    by: dict[str, set[str]] = {r["id"]: set(r.get("vectors", ())) for r in listed}
    for f in sorted(root.glob("*/*.json")):
        v: dict[str, Any] = json.loads(f.read_text())
        for r in v.get("requirements", ()):
            by.setdefault(r, set()).add(v["id"])
    reqs = [Requirement(r["id"], r["file"], r.get("untestable")) for r in listed]
    return [Row(r, tuple(sorted(by.get(r.id, ())))) for r in reqs]


def table(rows: list[Row]) -> str:
    """The coverage table: one line per requirement, a summary per file, and the last line
    ``N requirements, M untested``."""
    lines = []
    for row in rows:
        what = (", ".join(row.vectors[:4]) + (f" (+{len(row.vectors) - 4})"
                                              if len(row.vectors) > 4 else "")
                if row.vectors else (f"untestable: {row.requirement.untestable}"
                                     if row.requirement.untestable else "-"))
        lines.append(f"{row.status:<10} {row.requirement.id:<48} {what}")
    files = sorted({r.requirement.file for r in rows})
    lines.append("")
    for f in files:
        mine = [r for r in rows if r.requirement.file == f]
        lines.append(f"{f:<14} {len(mine):>4} requirements, "
                     f"{sum(r.status == 'untestable' for r in mine):>3} untestable, "
                     f"{sum(r.status == 'UNTESTED' for r in mine):>3} untested")
    lines.append(f"{len(rows)} requirements, {sum(r.status == 'UNTESTED' for r in rows)} untested")
    return "\n".join(lines)
