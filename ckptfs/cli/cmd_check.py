"""``ckptfs check STORE``: every retained snapshot loads, migrates and validates with today's code."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import Any

from ckptfs.cli import EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE, human, print_json
from ckptfs.cli._args import store_command
from ckptfs.cli.human import add_allow_refs
from ckptfs.cli.progress import Progress, add_progress
from ckptfs.cli import stores as _stores


def register(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = store_command(
        sub, "check", run,
        help="prove every retained snapshot restores with today's code and migrations "
             "(integrity, restic's 'check', is 'ckptfs verify')",
        description="Load every snapshot of every run (or --run), not only heads, migrate its "
                    "state in memory to the current --schema with the --migrations registry, "
                    "and run --validate on the result. Nothing is written. Exit 1 if any "
                    "snapshot fails. Meant for CI at release time. (Integrity of the "
                    "stored objects, what restic calls 'check', is 'ckptfs verify'.)")
    p.add_argument("--migrations", metavar="MODULE:ATTRIBUTE",
                   help="a ckptfs.Migrations registry, e.g. myapp.state:migrations")
    p.add_argument("--schema", action="append", dest="schemas", default=[],
                   metavar="NAME@VERSION",
                   help="the state schema this code expects, e.g. agent@3 (repeatable, one per "
                        "schema name; without it snapshots are loaded as stored)")
    p.add_argument("--codecs", metavar="MODULE:ATTRIBUTE",
                   help="the application's ckptfs.Codecs (its registered types), e.g. "
                        "myapp.state:codecs: then a stored type it does not register fails the "
                        "snapshot. Without it the built-in types are checked and application "
                        "types are loaded as ckptfs.TypedValue (their names and payloads)")
    p.add_argument("--validate", metavar="MODULE:FUNCTION",
                   help="called with each migrated state; raising or returning False fails it")
    p.add_argument("--run", action="append", dest="runs", metavar="RUN", help="only this run (repeatable)")
    p.add_argument("--strict-refs", action="store_true",
                   help="fail snapshots whose external references cannot be verified here "
                        "(including those --allow-refs does not cover)")
    add_allow_refs(p)
    p.add_argument("--json", action="store_true", help="machine-readable report")
    add_progress(p)


def load_object(spec: str, what: str) -> Any:
    """``module:attribute`` (dotted attribute allowed), imported with the working directory on
    the path like ``python -m`` would."""
    mod_name, sep, attr = spec.partition(":")
    if not sep or not mod_name or not attr:
        raise ValueError(f"{what} must be MODULE:ATTRIBUTE (e.g. myapp.state:migrations), got {spec!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        obj: Any = importlib.import_module(mod_name)
    except ImportError as e:
        raise ValueError(f"{what}: cannot import {mod_name!r} ({e}); run from the directory "
                         "that holds it or install it") from e
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ValueError(f"{what}: module {mod_name!r} has no attribute {attr!r}") from None
    return obj


def run(args: argparse.Namespace) -> int:
    import ckptfs
    from ckptfs.ops.check import check
    from ckptfs.runtime.migrations import as_schema

    try:
        schemas = [as_schema(s) for s in args.schemas]
        if len({s.name for s in schemas}) != len(schemas):
            raise ValueError("give one --schema per schema name")
        migrations = validate = None
        if args.migrations:
            if not schemas:
                raise ValueError("--migrations needs --schema NAME@VERSION: the version to migrate to")
            migrations = load_object(args.migrations, "--migrations")
            if not isinstance(migrations, ckptfs.Migrations):
                raise ValueError(f"--migrations {args.migrations} is a {type(migrations).__name__}, "
                                 "not a ckptfs.Migrations registry")
        codecs = ckptfs.Codecs(unknown="raw")
        if args.codecs:
            codecs = load_object(args.codecs, "--codecs")
            if not isinstance(codecs, ckptfs.Codecs):
                raise ValueError(f"--codecs {args.codecs} is a {type(codecs).__name__}, "
                                 "not a ckptfs.Codecs registry")
        if args.validate:
            validate = load_object(args.validate, "--validate")
            if not callable(validate):
                raise ValueError(f"--validate {args.validate} is not callable")
        policy = human.ref_policy(args)
    except ValueError as e:
        print(f"ckptfs: error (usage): {human.clean(str(e))}", file=sys.stderr)
        return EXIT_USAGE
    from ckptfs.ops.runs import require_runs

    store = _stores.open_store(args.store, ref_policy=policy, codecs=codecs)
    runs = require_runs(store.repo, args.runs)
    with Progress("check", mode=args.progress, snapshots=False) as bar:
        bar.watch(store.storage)
        report = check(store, schemas=schemas, migrations=migrations, validate=validate,
                       runs=runs, strict_refs=args.strict_refs)
    if args.json:
        print_json(report.to_json())
    else:
        for r in report.results:
            sid = (r.snapshot or "?")[:19]
            to = f" -> {r.target} ({r.steps} step{'s' if r.steps != 1 else ''})" if (
                r.ok and r.target != r.schema) else ""
            if r.ok:
                print(f"ok    {r.run}@{r.seq}  {sid}  {human.clean(r.schema)}{human.clean(to)}")
            else:
                print(f"FAIL  {r.run}@{r.seq}  {sid}  {human.clean(r.schema or '?')}  {r.stage}: "
                      f"{human.clean(r.message)}")
        print(f"{report.runs} runs, {len(report.results)} snapshots: "
              f"{len(report.results) - len(report.failed)} ok, {len(report.failed)} failed")
    return EXIT_OK if report.ok else EXIT_PROBLEMS
