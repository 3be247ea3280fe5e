"""Test helpers: prove that golden stores still load with today's code and migrations.

::

    from ckptfs.testing import assert_stores_load
    from myapp.state import migrations, validate

    def test_golden_stores_load():
        assert_stores_load("tests/golden", schema=("agent", 3), migrations=migrations,
                           validate=validate)

No pytest needed here; the fixtures in ``ckptfs.pytest_plugin`` are loaded by pytest itself.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable
from pathlib import Path

from ckptfs.format.models import Schema
from ckptfs.format.names import CONFIG_PATH, TMP
from ckptfs.ops.check import CheckReport, Validator, check
from ckptfs.runtime.migrations import Migrations, as_schema
from ckptfs.runtime.refs import RefPolicy
from ckptfs.runtime.store import SchemaLike, open_store


def find_stores(where: str | os.PathLike[str]) -> list[str]:
    """``where`` itself if it is a store or a URL, else every store in the local tree below it."""
    text = os.fspath(where)
    root = Path(text)
    if "://" in text or (root / CONFIG_PATH).exists():
        return [text]
    return sorted(str(p.parent) for p in root.rglob(CONFIG_PATH))


def assert_stores_load(*where: str | os.PathLike[str],
                       schema: SchemaLike | Iterable[SchemaLike] | None = None,
                       migrations: Migrations | None = None, validate: Validator | None = None,
                       strict_refs: bool = False,
                       ref_policy: RefPolicy | None = None) -> list[CheckReport]:
    """Check every snapshot of every store found under ``where`` (see ``ckptfs check``):
    AssertionError listing each snapshot that fails, or when no store or snapshot is found.
    References are verified only where ``ref_policy`` allows (none by default)."""
    stores = [s for w in where for s in find_stores(w)]
    places = ", ".join(os.fspath(w) for w in where)
    if not stores:
        raise AssertionError(f"no ckptfs store found under {places}")
    schemas = _schemas(schema)
    reports, lines, total = [], [], 0
    for url in stores:
        with open_store(url) as store:
            report = check(store, schemas=schemas, migrations=migrations, validate=validate,
                           strict_refs=strict_refs, ref_policy=ref_policy)
        reports.append(report)
        total += len(report.results)
        lines += [f"  {url}: {r.run}@{r.seq} ({r.snapshot or '?'}) {r.schema or '?'} "
                  f"{r.stage}: {r.message}" for r in report.failed]
    if lines:
        raise AssertionError(f"{len(lines)} of {total} snapshots do not load with today's code "
                             "and migrations:\n" + "\n".join(lines))
    if total == 0:
        raise AssertionError(f"the stores under {places} hold no snapshot")
    return reports


def copy_store(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> str:
    """Copy a local store (e.g. a golden one) to ``dst`` so a test can resume and write to it."""
    top = os.path.abspath(src)
    shutil.copytree(src, dst, ignore=lambda d, names: [TMP] if os.path.abspath(d) == top else [])
    return os.fspath(dst)


def _schemas(schema: SchemaLike | Iterable[SchemaLike] | None) -> list[Schema]:
    if schema is None:
        return []
    if isinstance(schema, (Schema, str)) or (
            isinstance(schema, tuple) and len(schema) == 2 and isinstance(schema[0], str)):
        return [as_schema(schema)]  # type: ignore[arg-type]
    return [as_schema(s) for s in schema]
