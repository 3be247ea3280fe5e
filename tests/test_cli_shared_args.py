"""The shapes every command shares (``ckptfs/cli/_args.py``, issue 31 item 6): one STORE
subcommand shape, one ``--break-lease``, and every store a command names opened with the
command's ``-o`` backend options and ``--keyring`` (``stores.open_store``)."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import ckptfs
from ckptfs.cli import build_parser
from tests.clihelp import cli
from tests.test_cli_operator_ux import _s3_env_without_credentials

CLI = Path(ckptfs.__file__).parent / "cli"


def _subcommands() -> dict[str, object]:
    import argparse

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def test_every_store_command_takes_store_first() -> None:
    """Every command but copy (SRC DST), demo (a local --store) and keys (an ACTION on a
    keyring, not a store) takes STORE first."""
    first = {name: next((a.metavar for a in p._actions  # type: ignore[attr-defined]
                         if not a.option_strings), None)
             for name, p in _subcommands().items()}
    assert {n for n, m in first.items() if m != "STORE"} == {"copy", "demo", "keys"}, first


def test_break_lease_is_one_option() -> None:
    helps = {name: a.help for name, p in _subcommands().items()
             for a in p._actions if "--break-lease" in a.option_strings}  # type: ignore[attr-defined]
    assert set(helps) == {"erase", "forget", "gc"}
    assert len(set(helps.values())) == 1


def test_no_command_opens_a_store_past_the_options() -> None:
    """``ckptfs.open_store`` in a command ignores ``-o`` and ``--keyring``: every command opens
    its stores through ``stores.open_store`` (demo makes its own local store)."""
    offenders = []
    for path in sorted(CLI.glob("cmd_*.py")):
        if path.name == "cmd_demo.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Attribute) and node.attr == "open_store"
                    and isinstance(node.value, ast.Name) and node.value.id == "ckptfs"):
                offenders.append(f"{path.name}:{node.lineno}")
    assert not offenders


def test_upgrade_takes_backend_options(s3_options: dict[str, object], tmp_path: Path) -> None:
    """``ckptfs upgrade s3://... -o key=...`` used the credentials of the environment only."""
    from tests.conftest import S3_BUCKET

    url = f"s3://{S3_BUCKET}/upgrade-{tmp_path.name}"
    ckptfs.open_store(url, storage_options=s3_options).start_run("r").checkpoint({"x": 1})
    env = _s3_env_without_credentials(s3_options, tmp_path)
    cli("upgrade", url, "--dry-run", env=env, check=3)  # no credentials anywhere: refused
    creds = ["-o", "key=testing", "-o", "secret=testing",
             "-o", "client_kwargs.region_name=us-east-1"]
    out = json.loads(cli("upgrade", url, *creds, "--dry-run", "--json", env=env).stdout)
    assert out["after"] == 2 and out["dry_run"] is True


class _Storage:
    """A storage whose read_many and write_many call read and write, as real ones may."""

    def read(self, key: str) -> bytes:
        return b"x" * 10

    def read_many(self, keys: list[str]) -> list[bytes | None]:
        return [self.read(k) for k in keys] + [None]

    def delete(self, key: str) -> None:
        pass

    def write(self, key: str, data: bytes) -> None:
        pass

    def write_many(self, items: object) -> None:
        for key, data in items:  # type: ignore[attr-defined]
            self.write(key, data)


def test_progress_counts_outermost_calls_once() -> None:
    """``Progress.watch``/``watch_writes`` share one wrapper (``_count``): a call made inside
    another wrapped call is not counted again; a generator given to write_many is counted and
    still written."""
    import io

    from ckptfs.cli.progress import Progress

    s = _Storage()
    with Progress("t", mode="json", stream=io.StringIO()) as bar:
        bar.watch(s)
        bar.watch_writes(s)
        assert s.read_many(["a", "b", "c"]) == [b"x" * 10] * 3 + [None]
        s.read("d")
        s.delete("e")
        s.write_many((k, b"yy") for k in "abc")
        s.write("z", b"1234")
    assert (bar.bytes, bar.objects, bar.deleted, bar.written) == (40, 4, 1, 10)
