"""O(change) commits: ``Run.append``, ``Run.checkpoint(state, changed=)``, ``Run.audit`` and
the cached manifest encoder (issue 14, "per-step CPU proportional to what changed").

Every commit made through the O(change) paths is compared with the full path
(``checkpoint(state)`` of a deep copy, in a second store with the same clock and writer):
the snapshot ids (so the manifest bytes) must be identical, and the restored state must equal
what the caller holds.
"""

from __future__ import annotations

import copy
import os
import tempfile
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ckptfs
from ckptfs.errors import AppendError, FormatError, StateMismatch
from ckptfs.format.cdc import ChunkerParams
from ckptfs.format.digest import Digest
from ckptfs.format.manifest_bytes import ManifestEncoder
from ckptfs.format.models import VALUE_TYPES, Captured, ChunkRef, Manifest, Schema
from tests.conftest import fuzz_examples

#: small chunks, so a few messages already take the chunked and merging paths
SMALL = ChunkerParams(min_size=64, avg_size=256, max_size=1024)
T0 = 1_800_000_000_000


def _store(path: Path) -> ckptfs.Store:
    return ckptfs.open_store(str(path), chunker=SMALL, clock=lambda: T0, writer="t")


def msg(i: int, n: int = 40) -> dict[str, Any]:
    return {"role": "user" if i % 2 else "assistant", "content": f"m{i}-" + "x" * (n + i % 7)}


class Twin:
    """A run committed through the O(change) API beside a run committed by the full path."""

    def __init__(self, root: Path, state: dict[str, Any]) -> None:
        self.fast_store, self.full_store = _store(root / "fast"), _store(root / "full")
        self.fast, self.full = self.fast_store.start_run("r"), self.full_store.start_run("r")
        self.state = state
        self.check(self.fast.checkpoint(state))

    def check(self, snap: ckptfs.Snapshot) -> None:
        ref = self.full.checkpoint(copy.deepcopy(self.state))
        assert snap.digest == ref.digest, "O(change) commit differs from the full path"
        assert snap.seq == ref.seq


    def resume_state(self, root: Path) -> dict[str, Any]:
        return _store(root / "fast").resume("r").state


# -- correctness against the full path -------------------------------------------------------
def test_append_and_changed_match_full_path(tmp_path: Path) -> None:
    msgs = [msg(i) for i in range(30)]
    state: dict[str, Any] = {"messages": msgs, "plan": {"step": 0}, "n": 1}
    t = Twin(tmp_path, state)
    for i in range(30, 90):
        t.check(t.fast.append("messages", msg(i)))
    t.check(t.fast.append("messages", msg(90), msg(91), msg(92, 3000)))  # a large append
    msgs.append(msg(93))
    t.check(t.fast.checkpoint(state, changed=["messages"]))
    state["plan"] = {"step": 1}
    t.check(t.fast.checkpoint(state, changed=["plan"]))
    t.check(t.fast.checkpoint(state, changed=[]))
    assert t.resume_state(tmp_path) == state
    assert t.fast.state["messages"] is msgs  # append grew the caller's list in place


def test_append_from_empty_and_inline_to_chunked(tmp_path: Path) -> None:
    state: dict[str, Any] = {"messages": []}
    t = Twin(tmp_path, state)
    for i in range(40):  # inline (<= 2048 bytes), then chunked
        t.check(t.fast.append("messages", msg(i)))
    t.check(t.fast.append("messages"))  # nothing appended
    assert t.resume_state(tmp_path) == state


@pytest.mark.parametrize("violation", [
    "undeclared_grow", "undeclared_replace", "undeclared_new_list", "declared_truncate_regrow",
    "undeclared_shrink", "added_entry", "removed_entry", "declared_dict_inplace",
    "undeclared_labels"])
def test_every_visible_violation_falls_back(tmp_path: Path, violation: str) -> None:
    """Each change the library can see in O(change) is stored even though ``changed`` does
    not name it (or names it but the list was not simply appended to)."""
    msgs = [msg(i) for i in range(40)]
    state: dict[str, Any] = {"messages": msgs, "plan": {"step": 0}}
    t = Twin(tmp_path, state)
    t.check(t.fast.append("messages", msg(40)))
    changed: list[str] = []
    labels = None
    if violation == "undeclared_grow":
        msgs.append(msg(41))
    elif violation == "undeclared_replace":
        state["plan"] = {"step": 1}
    elif violation == "undeclared_new_list":
        state["messages"] = msgs[:-1] + [msg(99)]  # same length, new object
    elif violation == "declared_truncate_regrow":
        msgs[-1:] = [msg(98)]
        changed = ["messages"]
    elif violation == "undeclared_shrink":
        del msgs[5]
    elif violation == "added_entry":
        state["extra"] = [1, 2, 3]
    elif violation == "removed_entry":
        del state["plan"]
    elif violation == "declared_dict_inplace":
        state["plan"]["step"] = 7
        changed = ["plan"]
    elif violation == "undeclared_labels":
        labels = {"plan": {"who": "me"}}
    snap = t.fast.checkpoint(state, changed=changed, entry_labels=labels)
    ref = t.full.checkpoint(copy.deepcopy(state), entry_labels=labels)
    assert snap.digest == ref.digest
    assert t.resume_state(tmp_path) == state


def test_resume_then_append(tmp_path: Path) -> None:
    state: dict[str, Any] = {"messages": [msg(i) for i in range(50)], "plan": "p"}
    t = Twin(tmp_path, state)
    t.check(t.fast.append("messages", msg(50)))
    run = _store(tmp_path / "fast").resume("r")
    full = _store(tmp_path / "full").resume("r")  # both record resumed_from and attempt 2
    held = run.state
    for i in range(51, 70):
        snap = run.append("messages", msg(i))
        ref = full.checkpoint(copy.deepcopy(held))
        assert snap.digest == ref.digest
    held["plan"] = "q"
    assert run.checkpoint(held, changed=["plan"]).digest == \
        full.checkpoint(copy.deepcopy(held)).digest
    assert _store(tmp_path / "fast").resume("r").state == held


def test_append_to_missing_or_non_list_entry(tmp_path: Path) -> None:
    run = _store(tmp_path / "s").start_run("r")
    run.checkpoint({"messages": [1], "plan": {"a": 1}})
    with pytest.raises(AppendError, match="no such entry"):
        run.append("nope", 1)
    with pytest.raises(AppendError, match="dict, not a list"):
        run.append("plan", 1)
    assert run.seq == 1
    with pytest.raises(TypeError, match="not one string"):
        run.checkpoint({"messages": [1]}, changed="messages")


def test_failed_append_leaves_state_and_next_commit_exact(tmp_path: Path) -> None:
    msgs = [msg(i) for i in range(30)]
    state: dict[str, Any] = {"messages": msgs}
    t = Twin(tmp_path, state)
    with pytest.raises(TypeError, match="no codec is registered"):
        t.fast.append("messages", msg(30), {"bad": object()})
    assert len(msgs) == 30 and t.fast.seq == 1
    t.check(t.fast.append("messages", msg(31)))
    assert t.resume_state(tmp_path) == state


def test_audit_finds_an_in_place_change_it_could_not_see(tmp_path: Path) -> None:
    """What the library cannot see (an item mutated in place after its commit) is not stored
    by an O(change) commit; audit() finds it, and the full path then stores it."""
    msgs = [msg(i) for i in range(30)]
    state: dict[str, Any] = {"messages": msgs, "plan": {"step": 0}}
    run = _store(tmp_path / "s").start_run("r")
    run.checkpoint(state)
    run.append("messages", msg(30))
    assert run.audit() == 31 + 1
    msgs[3]["content"] = "edited in place"
    run.append("messages", msg(31))  # cannot see the edit of item 3
    with pytest.raises(StateMismatch, match="'messages' item 3"):
        run.audit(window=10)
    run.checkpoint(state)  # the exact path stores it
    assert run.audit() > 0
    assert _store(tmp_path / "s").resume("r").state == state
    state["plan"]["step"] = 5
    run.checkpoint(state, changed=[])
    with pytest.raises(StateMismatch, match="'plan'"):
        run.audit()


def test_audit_window_rotates(tmp_path: Path) -> None:
    msgs = [msg(i) for i in range(25)]
    run = _store(tmp_path / "s").start_run("r")
    run.checkpoint({"messages": msgs})
    run.append("messages", msg(25))
    seen = sum(run.audit(["messages"], window=10) for _ in range(3))
    assert seen == 30
    msgs[24]["role"] = "x"  # in the window after the first 30 items wrapped (26 items)
    with pytest.raises(StateMismatch):
        for _ in range(3):
            run.audit(["messages"], window=10)


# -- random sequences of operations --------------------------------------------------------
OPS = st.lists(st.sampled_from([
    "append1", "append3", "append_big", "grow_declared", "grow_undeclared", "plan_declared",
    "plan_undeclared", "new_list", "truncate_regrow", "add_entry", "remove_entry", "full",
    "noop"]), min_size=1, max_size=15)


@settings(max_examples=fuzz_examples(8), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(ops=OPS, start=st.integers(0, 40))
def test_random_operations_match_full_path(ops: list[str], start: int) -> None:
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        state: dict[str, Any] = {"messages": [msg(i) for i in range(start)], "plan": {"s": 0}}
        t = Twin(root, state)
        n = start
        for op in ops:
            msgs = state.get("messages")
            if op.startswith("append") and isinstance(msgs, list):
                k = {"append1": 1, "append3": 3}.get(op, 1)
                items = [msg(n + j, 3000 if op == "append_big" else 40) for j in range(k)]
                n += k
                t.check(t.fast.append("messages", *items))
                continue
            changed: list[str] | None = []
            if op == "grow_declared" and isinstance(msgs, list):
                msgs.append(msg(n))
                changed = ["messages"]
            elif op == "grow_undeclared" and isinstance(msgs, list):
                msgs.append(msg(n))
            elif op == "plan_declared":
                state["plan"] = {"s": n}
                changed = ["plan"]
            elif op == "plan_undeclared":
                state["plan"] = {"s": n}
            elif op == "new_list" and isinstance(msgs, list):
                state["messages"] = [*msgs, msg(n)]
            elif op == "truncate_regrow" and isinstance(msgs, list) and msgs:
                msgs[-1:] = [msg(n), msg(n + 1)]
                changed = ["messages"]
            elif op == "add_entry":
                state[f"e{n % 3}"] = [n]
            elif op == "remove_entry" and len(state) > 1:
                del state[sorted(state)[-1]]
            elif op == "full":
                changed = None
            n += 2
            t.check(t.fast.checkpoint(state, changed=changed))
        assert t.resume_state(root) == state


# -- the manifest encoder ------------------------------------------------------------------
digests = st.binary(min_size=32, max_size=32).map(Digest)
chunk_lists = st.lists(st.builds(ChunkRef, digests, st.integers(1, 1 << 16)), max_size=12)
labels = st.dictionaries(st.sampled_from(["a", "b", "owner", "zz"]), st.text(max_size=8),
                         max_size=2)


@st.composite
def captured(draw: st.DrawFn) -> Captured:
    inline = draw(st.one_of(st.none(), st.binary(max_size=64)))
    chunks = () if inline is not None else tuple(draw(chunk_lists))
    size = len(inline) if inline is not None else sum(c.size for c in chunks)
    kind = draw(st.sampled_from(["value", "blob"]))
    return Captured(kind=kind, type=VALUE_TYPES["cbor"] if kind == "value" else "text/plain",
                    size=size, digest=Digest.of(inline) if inline is not None else draw(digests),
                    chunks=chunks,
                    encoding="cbor" if kind == "value" else None, labels=draw(labels),
                    inline=inline)


names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=12)


@settings(max_examples=fuzz_examples(150), deadline=None)
@given(first=st.dictionaries(names, captured(), max_size=6),
       edits=st.lists(st.tuples(names, st.one_of(st.none(), captured())), max_size=6),
       seq=st.integers(1, 1 << 40), extra=st.dictionaries(st.sampled_from(["x_a", "zz"]),
                                                          st.integers(), max_size=2))
def test_manifest_encoder_bytes_equal_to_bytes(first: dict[str, Captured],
                                               edits: list[tuple[str, Captured | None]],
                                               seq: int, extra: dict[str, int]) -> None:
    enc = ManifestEncoder()
    m = Manifest(run="r", seq=seq, boundary="step", created=T0, writer="w",
                 schema=Schema("s", 1), entries=first, extra=extra)
    assert enc.to_bytes(m) == m.to_bytes()
    entries = dict(first)
    for name, e in edits:
        if e is None:
            entries.pop(name, None)
        else:
            entries[name] = e
        m = attrs.evolve(m, seq=m.seq + 1, entries=dict(entries))
        assert enc.to_bytes(m) == m.to_bytes()  # cached parts for the unchanged entries


def test_manifest_encoder_makes_the_reader_checks() -> None:
    enc = ManifestEncoder()
    ok = Captured(kind="value", type=VALUE_TYPES["cbor"], size=1, digest=Digest.of(b"\x01"),
                  chunks=(), encoding="cbor", inline=b"\x01")
    m = Manifest(run="r", seq=1, boundary="step", created=T0, writer="w",
                 schema=Schema("s", 1), entries={"a": ok})
    enc.to_bytes(m)
    bad = attrs.evolve(ok, labels={"k": "v" * 5000})
    with pytest.raises(FormatError):
        enc.to_bytes(attrs.evolve(m, entries={"a": ok, "b": bad}))
    with pytest.raises(FormatError):
        attrs.evolve(m, entries={"a": ok, "b": bad}).to_bytes()


def test_manifest_encoder_checks_the_new_chunks_of_an_extended_entry() -> None:
    """An entry that keeps its cached leading chunks is checked on the rest (and its size on
    all): a bad new chunk or a wrong size is refused as Manifest.to_bytes refuses it."""
    enc = ManifestEncoder()
    chunks = tuple(ChunkRef(Digest(bytes([i]) * 32), 100) for i in range(4))
    e = Captured(kind="value", type=VALUE_TYPES["cbor-seq"], size=400, digest=Digest(bytes(32)),
                 chunks=chunks, encoding="cbor-seq")
    m = Manifest(run="r", seq=1, boundary="step", created=T0, writer="w",
                 schema=Schema("s", 1), entries={"a": e})
    enc.to_bytes(m)
    grown = attrs.evolve(e, chunks=(*chunks, ChunkRef(Digest(bytes([9]) * 32), 50)), size=450)
    m2 = attrs.evolve(m, entries={"a": grown})
    assert enc.to_bytes(m2) == m2.to_bytes()
    for bad in (attrs.evolve(grown, size=451),
                attrs.evolve(grown, chunks=(*grown.chunks, ChunkRef(Digest(bytes(32)), 0)))):
        m3 = attrs.evolve(m2, entries={"a": bad})
        with pytest.raises(FormatError):
            m3.to_bytes()
        with pytest.raises(FormatError):
            enc.to_bytes(m3)
