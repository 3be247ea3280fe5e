"""A copy is a backup (issue 30 defect 1, issue 35 item 1): a forget in the source never
destroys the destination. In a format v2 destination records locate bodies in earlier
records, so nothing a copy does may delete a record there: by default a copy does not repeat
the source's forgets at all (the destination keeps its own history, and its own ``forget``);
``mirror=True`` repeats them as a v2 forget does, with the retired marker only (the records
become strays for the destination's gc). Erasures propagate either way (spec/retention.md 9)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

import ckptfs
from tests.clihelp import cli, cli_json
from ckptfs.errors import ErasedError, NotFound
from ckptfs.format.names import CONFIG_PATH
from ckptfs.ops.copy import copy_runs
from ckptfs.ops.erase import erase
from ckptfs.ops.gc import gc
from ckptfs.ops.retention import Policy, forget
from ckptfs.ops.verify import verify
from ckptfs.store.lifecycle import read_retired


RUNS = ("r0", "r1")
N = 10


def _mk(url: str, **opts: Any) -> dict[str, Any]:
    """The issue's mk.py: 2 runs x 10 checkpoints of a growing message list (each snapshot's
    record locates the earlier messages' chunks in earlier records). Returns the states."""
    store = ckptfs.open_store(url, **opts)
    states: dict[str, Any] = {}
    for r in RUNS:
        run = store.start_run(r)
        msgs: list[dict[str, Any]] = []
        for i in range(1, N + 1):
            msgs.append({"role": "user", "content": f"{r} message {i} " + os.urandom(800).hex()})
            run.checkpoint({"messages": list(msgs), "i": i})
            states[f"{r}@{i}"] = {"messages": list(msgs), "i": i}
    return states


def _repo(url: str, **opts: Any) -> Any:
    return ckptfs.open_store(url, **opts).repo


def _clean(url: str, **opts: Any) -> None:
    rep = verify(_repo(url, **opts), read_data=True)
    assert rep.ok, rep.problems


def _reads_back(url: str, states: dict[str, Any], refs: list[str], **opts: Any) -> None:
    store = ckptfs.open_store(url, **opts)
    for ref in refs:
        assert store.read(ref) == states[ref], ref
    for r in RUNS:  # resume works too (the issue: resume('r0') -> MissingObject)
        assert store.resume(r).state == states[f"{r}@{max(store.repo.seqs(r))}"]


ALL = [f"{r}@{i}" for r in RUNS for i in range(1, N + 1)]
LAST2 = [f"{r}@{i}" for r in RUNS for i in (N - 1, N)]


def _contents(storage: Any) -> dict[str, bytes]:
    """Every object of a store (any backend) and its bytes."""
    return {p: storage.read(p) for top in storage.list("")
            for p in (storage.scan(top) or ([top] if top == CONFIG_PATH else []))}


def _destination(kind: str, tmp_path: Path, request: pytest.FixtureRequest
                 ) -> tuple[str, dict[str, Any]]:
    if kind == "local":
        return str(tmp_path / "B"), {}
    from tests.conftest import new_s3_url

    return new_s3_url(), dict(request.getfixturevalue("s3_options"))


# -- the regression: copy after forget --------------------------------------------------------------
@pytest.mark.parametrize("kind", ["local", "s3"])
def test_copy_after_forget_keeps_every_destination_snapshot(
        kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """Issue 30 defect 1 step by step. Before the fix the second copy deleted B's records
    that P forgot; B's r0@9, r0@10, r1@9, r1@10 located their earlier messages in them:
    verify B found 32 problems and resume('r0') raised MissingObject."""
    src = str(tmp_path / "P")
    dst, opts = _destination(kind, tmp_path, request)
    states = _mk(src)
    assert copy_runs(_repo(src), _repo(dst, **opts)).snapshots_copied == 20
    _clean(dst, **opts)
    forget(_repo(src), Policy(keep_last=2))
    rep = copy_runs(_repo(src), _repo(dst, **opts))
    assert rep.ok and rep.snapshots_copied == 0 and rep.snapshots_present == 4
    _clean(dst, **opts)
    assert [_repo(dst, **opts).seqs(r) for r in RUNS] == [list(range(1, N + 1))] * 2
    _reads_back(dst, states, ALL, **opts)
    assert rep.life.forgotten == [] and rep.life.controls_written == 0


@pytest.mark.parametrize("kind", ["local", "s3"])
def test_mirror_copy_after_forget_retires_and_deletes_no_record(
        kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """With ``mirror=True`` the forget reaches B as a v2 forget: the marker, no record deleted
    (they become strays, spec/v2.md 9.1); B's gc later repacks what the kept ones locate."""
    src = str(tmp_path / "P")
    dst, opts = _destination(kind, tmp_path, request)
    states = _mk(src)
    copy_runs(_repo(src), _repo(dst, **opts))
    forget(_repo(src), Policy(keep_last=2))
    dstore = _repo(dst, **opts)
    records = {r: dstore.record_seqs(r) for r in RUNS}
    before = _contents(dstore.storage)
    assert len(before) > 20
    plan = copy_runs(_repo(src), _repo(dst, **opts), mirror=True, dry_run=True)
    assert _contents(_repo(dst, **opts).storage) == before  # a dry run changes nothing
    rep = copy_runs(_repo(src), _repo(dst, **opts), mirror=True)
    assert rep.ok and rep.snapshots_present == 4
    assert (plan.life.forgotten, plan.snapshots_present) == (rep.life.forgotten, 4)
    assert sorted(rep.life.forgotten) == sorted(f"{r}@{i}" for r in RUNS for i in range(1, N - 1))
    dstore = _repo(dst, **opts)
    assert {r: dstore.record_seqs(r) for r in RUNS} == records  # strays, not deleted
    assert [dstore.seqs(r) for r in RUNS] == [[N - 1, N]] * 2
    _clean(dst, **opts)
    _reads_back(dst, states, LAST2, **opts)
    with pytest.raises(NotFound):
        ckptfs.open_store(dst, **opts).read("r0@3")
    # the destination's gc deals with the strays: it repacks what the kept records locate
    gc(_repo(dst, **opts), grace_ms=0)
    dstore = _repo(dst, **opts)
    assert [dstore.record_seqs(r) for r in RUNS] == [[N - 1, N]] * 2
    _clean(dst, **opts)
    _reads_back(dst, states, LAST2, **opts)
    # a copy again changes nothing and brings no forgotten seq back
    again = copy_runs(_repo(src), _repo(dst, **opts), mirror=True)
    assert again.snapshots_copied == 0 and again.life.forgotten == []
    assert [_repo(dst, **opts).seqs(r) for r in RUNS] == [[N - 1, N]] * 2


def test_mirror_repairs_nothing_it_broke_and_copy_again_is_clean(tmp_path: Path) -> None:
    """The order of the issue with a mirror copy, and each further copy of the intact source:
    B stays whole at every step (before the fix a second copy did not repair it)."""
    src, dst = str(tmp_path / "P"), str(tmp_path / "B")
    states = _mk(src)
    copy_runs(_repo(src), _repo(dst))
    forget(_repo(src), Policy(keep_last=2))
    for mirror in (True, True, False):
        assert copy_runs(_repo(src), _repo(dst), mirror=mirror).ok
        _clean(dst)
        _reads_back(dst, states, LAST2)


# -- the destination's own forgets and strays -------------------------------------------------------
@pytest.mark.parametrize("mirror", [False, True])
def test_a_destination_forget_is_not_undone_by_a_copy(tmp_path: Path, mirror: bool) -> None:
    """B forgets on its own (its own retention): its strays stay invisible, a copy from P (which
    still holds every snapshot) does not send them again, before or after B's gc deletes the
    strays (a create at a free seq would resurrect a forgotten snapshot)."""
    src, dst = str(tmp_path / "P"), str(tmp_path / "B")
    states = _mk(src)
    copy_runs(_repo(src), _repo(dst))
    forget(_repo(dst), Policy(keep_last=3))
    kept = [N - 2, N - 1, N]
    for step in ("strays", "gc"):
        if step == "gc":
            gc(_repo(dst), grace_ms=0)
            assert [_repo(dst).record_seqs(r) for r in RUNS] == [kept] * 2
        rep = copy_runs(_repo(src), _repo(dst), mirror=mirror)
        assert rep.ok and rep.snapshots_copied == 0, step
        assert rep.snapshots_skipped == 2 * (N - 3), step  # forgotten in B: not sent
        assert [_repo(dst).seqs(r) for r in RUNS] == [kept] * 2, step
        _clean(dst)
    _reads_back(dst, states, [f"{r}@{i}" for r in RUNS for i in kept])


def test_the_source_forget_before_the_first_copy_leaves_a_marked_gap(tmp_path: Path) -> None:
    """P forgot r0@1..8 before B's first copy: B gets @9 and @10, and the seqs it never had
    are retired there (a gap needs a marker, spec/retention.md 3), in both modes."""
    src = str(tmp_path / "P")
    states = _mk(src)
    forget(_repo(src), Policy(keep_last=2))
    for mirror in (False, True):
        dst = str(tmp_path / f"B{mirror}")
        rep = copy_runs(_repo(src), _repo(dst), mirror=mirror)
        assert rep.ok and rep.snapshots_copied == 4 and rep.life.forgotten == []
        for r in RUNS:
            marker = read_retired(_repo(dst).storage, r)
            assert marker is not None and (marker.through, marker.kept) == (N - 2, ())
        _clean(dst)
        _reads_back(dst, states, LAST2)


def _went_on_and_forgot(src: str, dst: str) -> None:
    """B got r0@1..5; then P went on to @10 and forgot all but the last 2."""
    store = ckptfs.open_store(src)
    run = store.start_run("r0")
    for i in range(1, N + 1):
        run.checkpoint({"i": i, "pad": os.urandom(500).hex()})
        if i == 5:
            copy_runs(_repo(src), _repo(dst))
    forget(_repo(src), Policy(keep_last=2))


@pytest.mark.parametrize("mirror", [False, True])
def test_a_backup_the_source_went_past_and_forgot_is_proven_by_the_marker(
        tmp_path: Path, mirror: bool) -> None:
    """@9 names @8 as its parent, which B lacks; P's marker lists the ids of @1..8, and @5's is
    B's: the same run. The backup adds @9 and @10 (the gap 6-8 retired) and keeps @1..5; the
    mirror forgets them as P did (spec/retention.md 3 ids, 9 step 0)."""
    src, dst = str(tmp_path / "P"), str(tmp_path / "B")
    _went_on_and_forgot(src, dst)
    rep = copy_runs(_repo(src), _repo(dst), mirror=mirror)
    assert rep.ok and rep.snapshots_copied == 2, rep.conflicts
    assert _repo(dst).seqs("r0") == ([9, 10] if mirror else [1, 2, 3, 4, 5, 9, 10])
    assert ckptfs.open_store(dst).read("r0")["i"] == N
    _clean(dst)


@pytest.mark.parametrize("mirror", [False, True])
def test_a_run_the_copy_cannot_prove_is_the_same_is_left_alone(tmp_path: Path,
                                                                 mirror: bool) -> None:
    """As above, but P's marker lists no ids (written before they were, or by another
    implementation): nothing shows that B's @1..5 are P's, so adding @9 and @10 on top of them
    could join two histories: a conflict in both modes, B's run untouched (spec/retention.md 9
    step 0, its limit)."""
    from ckptfs.format import cbor

    src, dst = str(tmp_path / "P"), str(tmp_path / "B")
    _went_on_and_forgot(src, dst)
    (marker,) = (Path(src) / "runs" / "r0" / "retired").iterdir()
    m = cbor.decode(marker.read_bytes(), what="marker")
    assert [p[0] for p in m.pop("ids")] == [1, 2, 3, 4, 5, 6, 7, 8]
    marker.write_bytes(cbor.encode(m))
    before = sorted(p.relative_to(dst).as_posix() for p in Path(dst).rglob("*") if p.is_file())
    rep = copy_runs(_repo(src), _repo(dst), mirror=mirror)
    assert not rep.ok and "r0" in rep.conflicts[0] and rep.snapshots_copied == 0
    assert sorted(p.relative_to(dst).as_posix() for p in Path(dst).rglob("*")
                  if p.is_file()) == before
    assert _repo(dst).seqs("r0") == [1, 2, 3, 4, 5]
    _clean(dst)


# -- erasures still propagate --------------------------------------------------------------------
def test_an_erasure_still_reaches_the_backup(tmp_path: Path) -> None:
    """Default copy: forgets stay in the source, an erased run or snapshot goes from B too."""
    src, dst = str(tmp_path / "P"), str(tmp_path / "B")
    _mk(src)
    copy_runs(_repo(src), _repo(dst))
    forget(_repo(src), Policy(keep_last=2))
    erase(_repo(src), "r1", reason="request")
    erase(_repo(src), "r0", seq=N - 1, reason="request")
    rep = copy_runs(_repo(src), _repo(dst))
    assert rep.ok and sorted(rep.life.erased) == ["r0@9", "r1"]
    b = ckptfs.open_store(dst)
    with pytest.raises(ErasedError):
        b.read("r1")
    with pytest.raises(ErasedError):
        b.read(f"r0@{N - 1}")
    assert b.repo.seqs("r0") == [i for i in range(1, N + 1) if i != N - 1]
    _clean(dst)


# -- a version 1 destination: records carry no bodies, mirror deletes them as v1 forget does --------
# -- the CLI: the backup cycle, --mirror, --dry-run -------------------------------------------------
def _tree(root: str) -> dict[str, bytes]:
    """Every file of a store folder and its bytes (absent folder: empty)."""
    return {p.relative_to(root).as_posix(): p.read_bytes()
            for p in Path(root).rglob("*") if p.is_file()}


def test_cli_backup_cycle(tmp_path: Path) -> None:
    """README's cycle: copy, forget at the source (and gc there), copy again, restore every
    snapshot of the copy; then the backup's own retention, and a copy that does not undo it."""
    src, dst = str(tmp_path / "P"), str(tmp_path / "B")
    states = _mk(src)
    assert cli_json("copy", src, dst)["snapshots_copied"] == 20
    cli("forget", src, "--keep-last", "2")
    cli("gc", src, "--grace", "0s")
    second = cli_json("copy", src, dst)
    assert second["ok"] and second["snapshots_present"] == 4
    for ref in ALL:  # every snapshot of the backup restores
        assert ckptfs.open_store(dst).read(ref) == states[ref], ref
    assert "0 problem(s)" in cli("verify", dst, "--read-data").stdout
    assert second["forgotten"] == [] and second["controls_written"] == 0
    # the backup's own retention, kept by later copies
    cli("forget", dst, "--keep-last", "5")
    cli("gc", dst, "--grace", "0s")
    run = ckptfs.open_store(src).resume("r0")
    run.checkpoint({"messages": [], "i": 11})
    third = cli_json("copy", src, dst)
    assert third["snapshots_copied"] == 1 and third["snapshots_skipped"] == 0
    assert [_repo(dst).seqs(r) for r in RUNS] == [[6, 7, 8, 9, 10, 11], [6, 7, 8, 9, 10]]
    for ref in [f"r0@{i}" for i in range(6, 11)] + [f"r1@{i}" for i in range(6, 11)]:
        assert ckptfs.open_store(dst).read(ref) == states[ref], ref
    assert "0 problem(s)" in cli("verify", dst, "--read-data").stdout


def test_cli_mirror_and_dry_run(tmp_path: Path) -> None:
    """``copy --dry-run`` says what the copy would send, skip, erase and (``--mirror``)
    forget, in text and JSON, and changes no byte of the destination; the copy then does
    exactly that."""
    src, dst = str(tmp_path / "P"), str(tmp_path / "B")
    states = _mk(src)
    cli("copy", src, dst)
    cli("forget", src, "--keep-last", "2")
    cli("erase", src, "r1", "--reason", "request")
    ckptfs.open_store(src).resume("r0").checkpoint({"messages": [], "i": 11})
    before = _tree(dst)
    text = cli("copy", src, dst, "--dry-run").stdout
    assert "dry run" in text and "would copy 1 snapshot (r0@11)" in text, text
    assert "would erase here too: r1" in text and "forget" not in text, text
    text = cli("copy", src, dst, "--dry-run", "--mirror").stdout
    assert "would forget here too: r0@1..@8" in text, text
    plan = cli_json("copy", src, dst, "--dry-run", "--mirror")
    assert plan["dry_run"] and plan["mirror"] and plan["ok"]
    assert plan["would_copy"] == ["r0@11"] and plan["snapshots_copied"] == 1
    assert plan["erased"] == ["r1"] and plan["forgotten"] == [f"r0@{i}" for i in range(1, 9)]
    assert plan["snapshots_present"] == 2
    assert _tree(dst) == before  # nothing changed: the same files, the same bytes
    done = cli_json("copy", src, dst, "--mirror")
    assert not done["dry_run"] and done["would_copy"] == []
    for key in ("snapshots_copied", "snapshots_present", "snapshots_skipped", "erased",
                "forgotten", "controls_written"):
        assert done[key] == plan[key], key
    assert _repo(dst).seqs("r0") == [9, 10, 11]
    for ref in ("r0@9", "r0@10"):
        assert ckptfs.open_store(dst).read(ref) == states[ref]
    assert "0 problem(s)" in cli("verify", dst, "--read-data").stdout
    again = cli("copy", src, dst, "--mirror").stdout
    assert "mirror: forgot" not in again
    # a destination that does not exist yet stays absent
    new = str(tmp_path / "new")
    plan = cli_json("copy", src, new, "--dry-run")
    assert plan["config_created"] and plan["would_copy"] == ["r0@9", "r0@10", "r0@11"]
    assert not Path(new).exists()


# -- through the LangGraph saver ------------------------------------------------------------------
def test_langgraph_prune_then_copy(tmp_path: Path) -> None:
    """Issue 30 defect 1 through LangGraph: ``prune`` (keep_latest) is a forget, and the copy
    after it deleted the backup's records that the kept checkpoint's record locates its
    earlier messages in (before the fix: verify found the kept checkpoint's chunks missing).
    Every checkpoint of the backup restores, and a mirror copy keeps the latest one
    restorable before and after the destination's gc."""
    pytest.importorskip("langgraph")
    from tests.test_langgraph_lifecycle import cfg, ckpt

    from ckptfs.integrations.langgraph import CkptfsSaver

    src, dst, mirror = (str(tmp_path / n) for n in ("P", "B", "M"))
    saver = CkptfsSaver(src)
    msgs: list[str] = []
    last = None
    for i in range(8):
        msgs.append(f"turn {i} " + os.urandom(1500).hex())
        c = saver.put(cfg("t", cid=last), ckpt({"messages": list(msgs)}),
                      {"step": i}, {"messages": i + 1})
        last = c["configurable"]["checkpoint_id"]
    saver.flush()
    wanted = {t.config["configurable"]["checkpoint_id"]: t.checkpoint["channel_values"]
              for t in saver.list(cfg("t"))}
    assert len(wanted) == 8
    for d in (dst, mirror):
        copy_runs(_repo(src), _repo(d))
    saver.prune(["t"])
    copy_runs(_repo(src), _repo(dst))
    _clean(dst)
    got = {t.config["configurable"]["checkpoint_id"]: t.checkpoint["channel_values"]
           for t in CkptfsSaver(dst).list(cfg("t"))}
    assert got == wanted  # the backup keeps every checkpoint
    copy_runs(_repo(src), _repo(mirror), mirror=True)
    for step in ("strays", "gc"):
        if step == "gc":
            gc(_repo(mirror), grace_ms=0)
        _clean(mirror)
        tup = CkptfsSaver(mirror).get_tuple(cfg("t"))
        assert tup is not None and tup.checkpoint["channel_values"] == wanted[last]
        assert [t.config["configurable"]["checkpoint_id"]
                for t in CkptfsSaver(mirror).list(cfg("t"))] == [last]
