"""Issue 35 item 6: what copy says it did. A first copy into an empty destination said
"13 chunk(s) copied, 7 already there" (chunks that several snapshots share, counted again for
each: dedup within the copy, not chunks the destination held), and ``--progress json`` told
nothing of the bytes sent. Every case runs ``ckptfs`` as a subprocess."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


import ckptfs
from tests.clihelp import cli, make_demo


def test_a_first_copy_finds_nothing_already_there(tmp_path: Path) -> None:
    src, dst = str(tmp_path / "src"), str(tmp_path / "dst")
    make_demo(src)
    rep = json.loads(cli("copy", src, dst, "--json").stdout)
    assert rep["snapshots_copied"] == 7 and rep["chunks_copied"] > 0
    assert rep["chunks_present"] == 0, rep  # was 7: shared chunks counted once per snapshot
    text = cli("copy", src, str(tmp_path / "dst2")).stdout
    assert "chunk(s) copied, 0 already there" in text, text
    # chunks the destination did hold are counted, each once: two more snapshots of the
    # demo's run in the source, sharing its chunks, copied into the first destination
    s = ckptfs.open_store(src)
    r = s.resume("agent", lenient_refs=True)
    r.checkpoint(r.state, "step")
    r.checkpoint(r.state, "step")
    again = json.loads(cli("copy", src, dst, "--json").stdout)
    assert again["snapshots_copied"] == 2 and again["snapshots_present"] == 7, again
    named = {c.digest for e in s.get("agent@8").manifest.entries.values()
             if isinstance(e, ckptfs.format.models.Captured) for c in e.chunks}
    assert again["chunks_copied"] + again["chunks_present"] <= len(named), (again, len(named))
    assert again["chunks_present"] > 0, again


def test_copy_progress_json_counts_bytes_written(tmp_path: Path) -> None:
    src, dst = str(tmp_path / "src"), str(tmp_path / "dst")
    make_demo(src)
    p = cli("copy", src, dst, "--progress", "json")
    last = json.loads(p.stderr.splitlines()[-1])
    assert last["done"] is True and last["snapshots"] == last["snapshots_total"] == 7
    size = sum(f.stat().st_size for f in Path(dst).rglob("*") if f.is_file()
               and "leases" not in f.parts)
    # every byte of the destination's files but its config (and lease) went through writes
    assert 0.9 * size <= last["bytes_written"] <= size, (last, size)
    assert last["bytes_read"] > 0 and last["objects_read"] > 0


def test_copy_to_s3_progress_counts_bytes(tmp_path: Path, s3_options: dict[str, Any]) -> None:
    """Runs copied side by side into a bucket each have their own report, merged at the end:
    the progress note said '0 B copied' until then, that is on every line."""
    from tests.conftest import new_s3_url

    src = str(tmp_path / "src")
    make_demo(src)
    dst = new_s3_url()
    p = cli("copy", src, dst, "--progress", "json")
    lines = [json.loads(x) for x in p.stderr.splitlines() if x.startswith("{")]
    last = lines[-1]
    assert last["done"] and last["bytes_written"] > 20_000, last
    assert not last["note"].endswith(" 0 B copied"), last
    copied = int(last["note"].rsplit(" B copied", 1)[0].split()[-1])
    assert copied > 20_000, last
