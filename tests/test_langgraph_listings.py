"""A user turn (``invoke``) must not list the thread's whole run (issue 14): ``get_tuple`` of
the latest checkpoint catches up from what the saver knows (one listing after its head on an
object store, a probe of the next record on local disk) instead of a listing of every record,
while still seeing what another saver committed, pruned or erased meanwhile."""

from __future__ import annotations

import operator
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest

pytest.importorskip("langgraph")
pytest.importorskip("langgraph.checkpoint.sqlite")

from langgraph.checkpoint.sqlite import SqliteSaver  # noqa: E402
from langgraph.graph import END, START, StateGraph  # noqa: E402

from ckptfs.format.names import run_dir  # noqa: E402
from ckptfs.integrations.langgraph import CkptfsSaver, run_id_for  # noqa: E402
from ckptfs.storage.base import Listing  # noqa: E402
from tests.conftest import new_s3_url  # noqa: E402


class S(TypedDict):
    msgs: Annotated[list[str], operator.add]


def _app(saver: Any) -> Any:
    g = StateGraph(S)
    g.add_node("a", lambda s: {"msgs": [f"a{len(s['msgs'])}"]})
    g.add_edge(START, "a")
    g.add_edge("a", END)
    return g.compile(checkpointer=saver)


CFG: Any = {"configurable": {"thread_id": "turns"}}
RUN = run_dir(run_id_for("turns", ""))


class Listings:
    """Counts the listings a saver's storage answers: whole listings of the run's folder, and
    the names every listing returned (a listing after a key returns only what follows it)."""

    def __init__(self, saver: CkptfsSaver) -> None:
        self.whole = 0
        self.names = 0
        storage = saver.store.storage
        real_list, real_after, real_listing = storage.list, storage.list_after, storage.listing
        inside = [False]  # a backend's ``listing`` may answer through its own ``list``

        def counted_list(prefix: str) -> list[str]:
            out = real_list(prefix)
            if prefix == RUN and not inside[0]:
                self.whole += 1
                self.names += len(out)
            return out

        def counted_listing(prefix: str) -> Listing:
            inside[0] = True
            try:
                out = real_listing(prefix)
            finally:
                inside[0] = False
            if prefix == RUN:
                self.whole += 1
                self.names += len(out.names)
            return out

        def counted_after(prefix: str, after: str) -> list[str] | None:
            out = real_after(prefix, after)
            if prefix == RUN and out is not None:
                self.names += len(out)
                if not after:
                    self.whole += 1
            return out

        storage.list = counted_list  # type: ignore[method-assign]
        storage.list_after = counted_after  # type: ignore[method-assign]
        storage.listing = counted_listing  # type: ignore[method-assign]

    def take(self) -> tuple[int, int]:
        out = (self.whole, self.names)
        self.whole = self.names = 0
        return out


@pytest.fixture(params=["local", "s3"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "local":
        yield str(tmp_path / "s")
    else:
        request.getfixturevalue("s3_options")  # the moto server, through the environment
        yield new_s3_url()


def _turns(url: str) -> int:
    return 12 if url.startswith("s3://") else 40


def _shape(saver: Any) -> list[Any]:
    return [(t.metadata.get("step"), t.checkpoint["channel_values"],
             sorted((w[1], repr(w[2])) for w in t.pending_writes)) for t in saver.list(CFG)]


def test_an_invoke_does_not_list_the_run(url: str) -> None:
    """Per user turn: no listing of the whole run, and a bounded number of names listed
    whatever the history's length (before the fix: one whole listing per invoke, O(history))."""
    saver = CkptfsSaver(url)
    app = _app(saver)
    count = Listings(saver)
    per_turn = []
    for i in range(_turns(url)):
        app.invoke({"msgs": [f"u{i}"]}, CFG)
        per_turn.append(count.take())
    later = per_turn[5:]
    assert all(whole == 0 for whole, _ in later), f"whole listings per invoke: {per_turn}"
    assert max(names for _, names in later) <= 4, f"names listed per invoke: {per_turn}"
    sqlite = SqliteSaver(sqlite3.connect(":memory:", check_same_thread=False))
    ref = _app(sqlite)
    for i in range(_turns(url)):
        ref.invoke({"msgs": [f"u{i}"]}, CFG)
    assert _shape(CkptfsSaver(url)) == _shape(sqlite)


def test_a_fresh_saver_finds_the_head_without_listing_the_run(url: str) -> None:
    """A new process's first ``get_tuple``: on an object store the head hint and one listing
    after it, never a listing of every record (local disk lists the folder once)."""
    app = _app(CkptfsSaver(url))
    n = _turns(url) + 8  # more than one head hint interval (16 commits) on S3
    for i in range(n):
        app.invoke({"msgs": [f"u{i}"]}, CFG)
    fresh = CkptfsSaver(url)
    count = Listings(fresh)
    got = fresh.get_tuple(CFG)
    assert got is not None and len(got.checkpoint["channel_values"]["msgs"]) == 2 * n
    whole, names = count.take()
    if url.startswith("s3://"):
        assert whole == 0 and names <= 40, (whole, names)
    else:  # no listing from a key: the run is listed once (spec/v2.md section 4)
        assert whole == 1, whole
    # and the older checkpoints are all still found, by list() and by id
    ids = [t.config["configurable"]["checkpoint_id"] for t in fresh.list(CFG)]
    assert len(ids) == 3 * n
    for cid in ids[::len(ids) // 4]:
        t = CkptfsSaver(url).get_tuple({"configurable": {**CFG["configurable"],
                                                         "checkpoint_id": cid}})
        assert t is not None and t.config["configurable"]["checkpoint_id"] == cid


def test_turns_see_another_savers_commits_prunes_and_erases(url: str) -> None:
    """Two savers (two processes) take turns on one thread: each invoke must start from the
    other's latest checkpoint, after a prune by the other, and after the other erased it."""
    a, b = CkptfsSaver(url), CkptfsSaver(url)
    apps = [_app(a), _app(b)]
    sqlite = SqliteSaver(sqlite3.connect(":memory:", check_same_thread=False))
    ref = _app(sqlite)
    for i in range(12):
        got = apps[i % 2].invoke({"msgs": [f"u{i}"]}, CFG)
        want = ref.invoke({"msgs": [f"u{i}"]}, CFG)
        assert got == want, i
    a.prune(["turns"])  # b's index names records a just forgot
    for i in range(12, 16):
        got = apps[1 - i % 2].invoke({"msgs": [f"u{i}"]}, CFG)
        assert got["msgs"][-2:] == [f"u{i}", f"a{2 * i + 1}"] and len(got["msgs"]) == 2 * i + 2
    b.delete_thread("turns")
    got = apps[0].invoke({"msgs": ["new"]}, CFG)  # a must see the thread is gone
    assert got == {"msgs": ["new", "a1"]}
    got = apps[1].invoke({"msgs": ["again"]}, CFG)
    assert got == {"msgs": ["new", "a1", "again", "a3"]}


def _puts(saver: CkptfsSaver, n: int) -> None:
    from langgraph.checkpoint.base import empty_checkpoint
    from langgraph.checkpoint.base.id import uuid6

    parent: Any = {"configurable": {"thread_id": "turns", "checkpoint_ns": ""}}
    for i in range(n):
        cp = empty_checkpoint()
        cp["id"] = str(uuid6(clock_seq=-1))
        cp["channel_values"] = {"msgs": [str(j) for j in range(i)]}
        cp["channel_versions"] = {"msgs": i}
        parent = saver.put(parent, cp, {"step": i}, {"msgs": i})


def test_a_record_missing_below_the_head_is_listed_not_guessed(url: str) -> None:
    """Without retired markers a run holds records 1 to its head, so a fresh saver on S3
    takes the records below the head hint as there; a store where one went missing anyway
    (damage) must give what a whole listing shows, not an error (nor a shorter history)."""
    import fsspec

    _puts(CkptfsSaver(url), 20)  # the head hint names seq 16
    fs, root = fsspec.core.url_to_fs(url)
    fs.rm(f"{root}/{RUN}/{4:020d}")
    want = [19, 18, 17, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 2, 1, 0]
    assert [t.metadata["step"] for t in CkptfsSaver(url).list(CFG)] == want
    fresh = CkptfsSaver(url)
    assert fresh.get_tuple(CFG).metadata["step"] == 19  # type: ignore[union-attr]
    old = [*fresh.list(CFG)]
    assert [t.metadata["step"] for t in old] == want
    by_id = CkptfsSaver(url)
    assert by_id.get_tuple(CFG) is not None
    t = by_id.get_tuple(old[-2].config)  # an id below the missing record: binary searches
    assert t is not None and t.metadata["step"] == 1


def test_record_seqs_reads_every_kind_of_run_listing_as_the_name_rules_say() -> None:
    """``listing.record_seqs`` (with its shortcut for a run holding records 1 to n) against the
    spec's name rule (``parse_seq_name``, seq >= 1) on listings with gaps, strays, seq 0, a
    number past 64 bits, other names and an unsorted backend."""
    from ckptfs.format.names import parse_seq_name, seq_name
    from ckptfs.integrations.langgraph.listing import record_seqs

    def ref(names: list[str]) -> list[int]:
        return sorted({s for s in (parse_seq_name(n) for n in names) if s is not None and s >= 1})

    n = [seq_name(s) for s in range(1, 6)]
    cases = [
        [], n, n + ["head", "retired/" + seq_name(2)], n[:2] + n[3:], [seq_name(0)] + n,
        n[1:], n + ["9" * 20], n + ["0000000000000000000x"], n[::-1], n + [n[2]],
        [seq_name(1), seq_name(3), seq_name(4)], ["+" + n[0][1:]] + n[1:], n[:4] + ["head"],
        ["١" * 20] + n, [n[0], n[1], n[1], n[3]],
    ]
    for names in cases:
        assert record_seqs(names) == ref(names), names
