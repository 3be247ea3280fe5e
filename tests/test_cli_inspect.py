"""The read commands (ls, log, show, cat, diff) and fork, driven as subprocesses."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path
from typing import Any

import pytest

import ckptfs
from ckptfs.format.names import record_path
from ckptfs.format.names import CONFIG_PATH
from tests.clihelp import cli, cli_json, make_demo
from tests.test_cli_effects import EFFECTS_KEYS

#: The documented --json keys of each read command (docs/reference/json.md); exact, so a renamed
#: or dropped key fails here and the documentation check below.
SNAPSHOT_KEYS = {"snapshot", "run", "seq", "boundary", "created", "attempt", "schema", "parent",
                 "resumed_from", "labels", "expires", "entry_count", "state_bytes"}
LS_RUN_KEYS = {"run", "snapshots", "head_seq", "head", "boundary", "created", "age_seconds",
               "attempt", "schema", "state_bytes", "labels", "error", "status", "status_detail"}
LOG_KEYS = {"run", "schema", "forked_from", "attempts", "snapshots", "problems"}
#: keys issue 35 (repair, verify's counts) added; documented in docs/operations/repair.md
#: until the README's CLI tour names them (then they join the sets above)
LOG_KEYS_35 = {"repaired", "head_damaged"}
VERIFY_KEYS_35 = {"records", "manifest_bytes", "repaired"}
SHOW_KEYS = SNAPSHOT_KEYS | {"writer", "entries", "ledger", "required", "extra"}
DIFF_KEYS = {"a", "b", "added", "removed", "changed", "unchanged", "chunks_a", "chunks_b",
             "chunks_shared", "bytes_new"}
COPY_KEYS = {"ok", "runs", "snapshots_copied", "snapshots_present", "snapshots_skipped",
             "chunks_copied", "chunks_present", "bytes_copied", "config_created", "conflicts",
             "controls_written", "erased", "forgotten", "mirror", "dry_run", "would_copy"}
EXPORT_KEYS = {"path", "kind", "files", "archive_bytes", "runs", "snapshots", "chunks"}
INIT_KEYS = {"store", "created", "format", "chunker", "bucket_created", "create_only",
             "create_only_scope"}
VERIFY_KEYS = {"ok", "runs", "snapshots", "chunks_checked", "inline_entries", "bytes_read",
               "problems", "foreign"}


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, Any]]:
    url = str(tmp_path_factory.mktemp("demo") / "store")
    return url, make_demo(url)


def test_ls_lists_every_run_with_its_head(demo: tuple[str, dict[str, Any]]) -> None:
    url, _ = demo
    out = cli_json("ls", url)
    assert set(out) == {"store", "runs"}
    rows = {r["run"]: r for r in out["runs"]}
    assert set(rows) == {"agent", "debug"}
    assert all(set(r) == LS_RUN_KEYS for r in rows.values())
    agent = rows["agent"]
    head = ckptfs.open_store(url).head("agent")
    assert (agent["head_seq"], agent["snapshots"], agent["boundary"], agent["attempt"]) == \
        (6, 6, "approval", 2)
    assert agent["head"] == head.id and agent["schema"] == "agent@2"
    assert agent["state_bytes"] == sum(e.size for e in head.manifest.entries.values()
                                       if isinstance(e, ckptfs.format.models.Captured))
    text = cli("ls", url).stdout
    assert re.search(r"^agent\s+6\s+6\s+" + head.digest.short + r"\s+approval\s+2", text, re.M)


def test_log_shows_attempts_resume_and_forks(demo: tuple[str, dict[str, Any]]) -> None:
    url, _ = demo
    store = ckptfs.open_store(url)
    log = cli_json("log", url, "agent")
    assert set(log) == LOG_KEYS | LOG_KEYS_35 and log["attempts"] == 2 and log["forked_from"] is None
    snaps = log["snapshots"]
    assert [s["seq"] for s in snaps] == [1, 2, 3, 4, 5, 6]
    assert all(set(s) == SNAPSHOT_KEYS | {"forks", "effects", "forgotten_before", "repaired"}
               for s in snaps)
    at2, at4 = store.get("agent@2"), store.get("agent@4")
    assert snaps[1]["forks"] == [{"run": "debug", "seq": 1, "snapshot": store.head("debug").id}]
    assert snaps[4]["resumed_from"] == at4.id and snaps[4]["attempt"] == 2
    assert snaps[4]["parent"] == at4.id and snaps[1]["parent"] == snaps[0]["snapshot"]
    text = cli("log", url, "agent").stdout
    assert f"fork: debug @1" in text and f"resumed from @4 {at4.digest.short}" in text
    dlog = cli_json("log", url, "debug")
    assert dlog["forked_from"] == {"run": "agent", "seq": 2, "snapshot": at2.id}
    assert f"forked from agent@2 {at2.digest.short}" in cli("log", url, "debug").stdout


def test_show_prints_the_manifest(demo: tuple[str, dict[str, Any]]) -> None:
    url, _ = demo
    snap = ckptfs.open_store(url).get("agent@3")
    m = cli_json("show", url, snap.digest.short)  # a hex prefix resolves too
    assert set(m) == SHOW_KEYS and m["snapshot"] == snap.id and m["seq"] == 3
    assert set(m["entries"]) == {"messages", "plan", "raw", "report"}
    rep = m["entries"]["report"]
    assert rep["kind"] == "blob" and rep["size"] == 90000
    assert sum(size for _, size in rep["chunks"]) == 90000
    text = cli("show", url, "agent@6").stdout
    assert re.search(r"web\s+ref.*file://.*/page.txt", text)
    assert "resumed" not in text and "boundary approval" in text


def test_cat_value_blob_and_reference(demo: tuple[str, dict[str, Any]], tmp_path: Path) -> None:
    url, states = demo
    assert json.loads(cli("cat", url, "agent@3", "messages").stdout) == states["agent@3"]["messages"]
    raw = json.loads(cli("cat", url, "agent@3", "raw").stdout)
    assert base64.b64decode(raw["$bytes"]) == states["agent@3"]["raw"]
    blob = cli("cat", url, "agent@3", "report", text=False).stdout
    assert blob == states["agent@3"]["report"].read()
    out = tmp_path / "report.bin"
    cli("cat", url, "agent@3", "report", "--output", str(out))
    assert out.read_bytes() == blob
    as_json = json.loads(cli("cat", url, "agent@3", "report", "--json").stdout)
    assert base64.b64decode(as_json["$bytes"]) == blob
    ref = json.loads(cli("cat", url, "agent", "web").stdout)
    assert ref["uri"].endswith("/page.txt") and ref["kind"] == "ref"
    p = cli("cat", url, "agent", "nope", check=3)
    assert "has no entry 'nope'" in p.stderr and "messages" in p.stderr


def test_json_value_markers() -> None:
    from ckptfs.ops.inspect import to_json_value

    v = {"$weird": [b"\x01", float("nan"), float("-inf"), 1.5], "n": 2**70}
    assert to_json_value(v) == {"$$weird": [{"$bytes": "AQ=="}, {"$float": "NaN"},
                                            {"$float": "-Infinity"}, 1.5], "n": 2**70}


def test_diff_counts_entries_chunks_and_new_bytes(demo: tuple[str, dict[str, Any]]) -> None:
    url, _ = demo
    store = ckptfs.open_store(url)
    d = cli_json("diff", url, "agent@4", "agent@5")
    assert set(d) == DIFF_KEYS
    assert [e["name"] for e in d["added"]] == ["web"]
    assert sorted(e["name"] for e in d["removed"]) == ["raw", "report"]
    assert sorted(e["name"] for e in d["changed"]) == ["messages", "plan"]
    d = cli_json("diff", url, "agent@2", "agent@3")
    assert sorted(e["name"] for e in d["changed"]) == ["messages", "plan", "report"]
    assert d["unchanged"] == 1 and d["added"] == d["removed"] == []
    a, b = store.get("agent@2").manifest, store.get("agent@3").manifest
    ca = {c.digest for e in a.entries.values() if hasattr(e, "chunks") for c in e.chunks}
    cb = {c.digest: c.size for e in b.entries.values() if hasattr(e, "chunks") for c in e.chunks}
    assert d["chunks_shared"] == len(ca & set(cb)) > 0  # the message history is shared
    assert d["bytes_new"] == sum(s for c, s in cb.items() if c not in ca) > 0
    same = cli_json("diff", url, "agent@2", "debug")
    assert same["added"] == same["removed"] == same["changed"] == [] and same["bytes_new"] == 0
    assert "0 added, 0 removed, 0 changed, 4 unchanged" in cli("diff", url, "agent@2", "debug").stdout


def test_fork_from_the_cli_records_its_origin_and_shares_chunks(tmp_path: Path) -> None:
    url = str(tmp_path / "s")
    states = make_demo(url)
    packs = sorted(p for p in Path(url).rglob("packs/*/*"))
    out = cli_json("fork", url, "agent@3", "retry-3")
    store = ckptfs.open_store(url)
    src = store.get("agent@3")
    assert out["run"] == "retry-3" and out["seq"] == 1 and out["parent"] == src.id
    assert out["boundary"] == src.boundary
    assert store.read("retry-3") == store.read("agent@3")
    assert store.read("retry-3")["messages"] == states["agent@3"]["messages"]
    # the fork's record locates the chunks where agent@3's are (or carries what it cannot
    # locate, spec/v2.md 5.2): no pack is written, and the record is no larger than its source's
    assert sorted(p for p in Path(url).rglob("packs/*/*")) == packs
    fork_rec = (Path(url) / record_path("retry-3", 1)).stat().st_size
    assert fork_rec <= (Path(url) / record_path("agent", 3)).stat().st_size + 1024, fork_rec
    p = cli("fork", url, "agent@3", "retry-3", check=3)
    assert "already exists" in p.stderr


def test_errors_say_what_to_do(tmp_path: Path) -> None:
    p = cli("ls", "nosuch://x", check=2)
    assert "not a store URL" in p.stderr
    p = cli("ls", str(tmp_path / "empty"), check=3)
    assert "no ckptfs store here" in p.stderr and "ckptfs init" in p.stderr
    url = str(tmp_path / "s")
    cli("init", url)
    p = cli("log", url, "ghost", check=3)
    assert "no run 'ghost'" in p.stderr
    cfg = Path(url) / CONFIG_PATH
    import cbor2

    m = cbor2.loads(cfg.read_bytes())
    m["version"] = 3
    cfg.write_bytes(cbor2.dumps(m, canonical=True))
    p = cli("ls", url, check=3)
    assert "unsupported-version" in p.stderr and "format version 3" in p.stderr


def test_init_creates_once(tmp_path: Path) -> None:
    url = str(tmp_path / "s")
    first = cli_json("init", url)
    assert set(first) == INIT_KEYS and first["created"] is True
    assert cli_json("init", url)["created"] is False
    assert "store exists" in cli("init", url).stdout
    assert cli_json("ls", url)["runs"] == []


def test_docs_document_every_json_key() -> None:
    tour = (Path(__file__).parent.parent / "docs" / "reference" / "json.md").read_text()
    for key in sorted(SNAPSHOT_KEYS | LS_RUN_KEYS | LOG_KEYS | SHOW_KEYS | DIFF_KEYS | COPY_KEYS
                      | VERIFY_KEYS | EXPORT_KEYS | INIT_KEYS | EFFECTS_KEYS | {"forks", "effects", "forked_from"}):
        assert f"`{key}`" in tour, f"docs/reference/json.md does not document --json key {key!r}"
