"""The history-aware writer: dedup, append reuse, inline entries, blobs, refs, type errors.

The property test at the end is the guard for the writer's shortcuts: whatever sequence of
states is checkpointed, a fresh reader restores exactly the state that was committed.
"""

from __future__ import annotations

import datetime
import enum
import math
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ckptfs
from ckptfs.errors import ConflictError, ExpiredError, MissingReference
from ckptfs.format.digest import Digest
from ckptfs.store.entries import INLINE_MAX, MAX_OPEN


def chunk_files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in (root / "chunks").rglob("*") if p.is_file()}


def message(i: int) -> dict[str, Any]:
    words = " ".join(f"word{(i * 7919 + k * 104729) % 5000}" for k in range(120))
    return {"role": "user" if i % 2 else "assistant", "content": words,
            "tool_calls": [{"id": f"call-{i}", "args": {"q": i}}] if i % 3 == 0 else []}


def test_identical_checkpoint_writes_no_chunk(tmp_path: Path) -> None:
    root = tmp_path / "s"
    run = ckptfs.open_store(str(root)).start_run("r")
    state = {"messages": [message(i) for i in range(200)], "blob": ckptfs.Blob(os.urandom(300_000))}
    run.checkpoint(state)
    before = chunk_files(root)
    run.checkpoint(state)
    assert chunk_files(root) == before


def _containers(root: Path) -> set[str]:
    """The store's records and packs (where chunk bodies live)."""
    records = {p for p in (root / "runs").rglob("*") if p.is_file() and p.name.isdigit()}
    packs = {p for p in (root / "packs").rglob("*") if p.is_file()}
    return {str(p.relative_to(root)) for p in records | packs}


def test_append_writes_only_a_few_small_chunks(tmp_path: Path) -> None:
    root = tmp_path / "s"
    run = ckptfs.open_store(str(root)).start_run("r")
    msgs = [message(i) for i in range(300)]
    run.checkpoint({"messages": msgs})
    total = sum((root / f).stat().st_size for f in _containers(root))
    for i in range(300, 340):
        before = _containers(root)
        msgs.append(message(i))
        run.checkpoint({"messages": msgs})
        new = _containers(root) - before
        new_bytes = sum((root / f).stat().st_size for f in new)
        assert len(new) == 1  # the record, carrying the new chunks
        # an occasional merge of the open tail rewrites more; never the whole conversation
        assert new_bytes < total / 3
    restored = ckptfs.open_store(str(root)).read("r")
    assert restored["messages"] == msgs
    # the manifest stays small: small open chunks are merged, not listed forever
    entry = ckptfs.open_store(str(root)).get("r").manifest.entries["messages"]
    params = ckptfs.ChunkerParams()
    assert len(entry.chunks) <= MAX_OPEN + 1 + entry.size // params.min_size  # type: ignore[union-attr]


def test_small_values_are_inline_and_large_ones_chunked(store: ckptfs.Store) -> None:
    run = store.start_run("r")
    snap = run.checkpoint({"small": {"step": 3}, "large": "x" * (INLINE_MAX * 4),
                           "tiny_blob": ckptfs.Blob(b"abc")})
    entries = snap.manifest.entries
    assert entries["small"].inline is not None and entries["small"].chunks == ()  # type: ignore[union-attr]
    assert entries["tiny_blob"].inline == b"abc"  # type: ignore[union-attr]
    assert entries["large"].inline is None and entries["large"].chunks  # type: ignore[union-attr]
    assert store.read("r")["small"] == {"step": 3}


def test_resume_reuses_chunks_of_the_restored_state(tmp_path: Path) -> None:
    root = tmp_path / "s"
    store = ckptfs.open_store(str(root))
    run = store.start_run("r")
    msgs = [message(i) for i in range(400)]
    run.checkpoint({"messages": msgs})
    before = chunk_files(root)
    resumed = ckptfs.open_store(str(root)).resume("r")
    resumed.state["messages"].append(message(400))
    resumed.checkpoint(resumed.state)
    assert len(chunk_files(root) - before) <= 2
    assert store.read("r")["messages"] == msgs + [message(400)]


def test_blob_from_file_streams_and_round_trips(tmp_path: Path, store: ckptfs.Store) -> None:
    src = tmp_path / "big.bin"
    data = os.urandom(3_000_000)
    src.write_bytes(data)
    run = store.start_run("r")
    snap = run.checkpoint({"file": ckptfs.Blob(src, type="application/pdf")})
    entry = snap.manifest.entries["file"]
    assert entry.size == len(data) and len(entry.chunks) > 3  # type: ignore[union-attr]
    restored = store.read("r")["file"]
    assert isinstance(restored, ckptfs.StoredBlob) and restored.type == "application/pdf"
    out = tmp_path / "out.bin"
    restored.save(out)
    assert out.read_bytes() == data
    with open(src, "rb") as f:  # a file object works too, and dedups against the path
        again = run.checkpoint({"file": ckptfs.Blob(f)})
    assert again.manifest.entries["file"].digest == entry.digest  # type: ignore[union-attr]
    # the consumed file object became a stored blob: the run's state can be committed again
    assert isinstance(run.state["file"], ckptfs.StoredBlob)
    assert run.checkpoint(run.state).manifest.entries["file"].chunks == entry.chunks  # type: ignore[union-attr]
    # a restored blob can be checkpointed again without reading it
    third = run.checkpoint({"file": restored})
    assert third.manifest.entries["file"] == entry


class Colour(enum.Enum):
    RED = 1


class Name(str, enum.Enum):
    A = "a"


@pytest.mark.parametrize("value, path", [
    ((1, 2), "state['v']"),
    ({"a": [1, {2, 3}]}, "state['v']['a'][1]"),
    ({"when": datetime.datetime.now(datetime.timezone.utc)}, "state['v']['when']"),
    ({1: "int key"}, "state['v']"),
    ([{"ok": 1}, {"role": Name.A}], "state['v'][1]['role']"),
    ({"c": Colour.RED}, "state['v']['c']"),
    (object(), "state['v']"),
    (bytearray(b"x"), "state['v']"),
])
def test_unsupported_values_raise_type_error_naming_the_path(
        store: ckptfs.Store, value: object, path: str) -> None:
    # without the built-in codecs (issue 17) only plain data is accepted, as before
    strict = ckptfs.Store(store.storage, codecs=ckptfs.Codecs(builtins=False))
    run = strict.start_run("r")
    with pytest.raises(TypeError) as e:
        run.checkpoint({"v": value})
    assert path in str(e.value)
    assert store.runs() == []  # nothing committed


@pytest.mark.parametrize("value, path", [
    ({1: "int key"}, "state['v']"),
    ([{"ok": 1}, {"role": Name.A}], "state['v'][1]['role']"),
    ({"c": Colour.RED}, "state['v']['c']"),
    (object(), "state['v']"),
    (bytearray(b"x"), "state['v']"),
    ({"when": (1, {"deep": [object()]})}, "state['v']['when']"),
])
def test_unregistered_values_are_refused_with_the_builtins_on(
        store: ckptfs.Store, value: object, path: str) -> None:
    run = store.start_run("r")
    with pytest.raises(TypeError) as e:
        run.checkpoint({"v": value})
    assert path in str(e.value)
    assert store.runs() == []  # nothing committed


def test_unsupported_value_in_an_appended_item_is_caught(store: ckptfs.Store) -> None:
    run = store.start_run("r")
    msgs: list[Any] = [message(i) for i in range(50)]
    run.checkpoint({"messages": msgs})
    msgs.append({"content": Colour.RED})
    with pytest.raises(TypeError, match=r"state\['messages'\]\[50\]\['content'\]"):
        run.checkpoint({"messages": msgs})


def test_edge_values_round_trip(store: ckptfs.Store) -> None:
    state = {"big": 2**100, "neg": -2**80, "nan": math.nan, "inf": -math.inf, "empty": [],
             "nested_empty": {"": {}}, "bytes": b"\x00\xff", "unicode": "déjà vu ✓",
             "float": 0.1, "half": 1.5, "bool": True, "none": None,
             "list_of_lists": [[1, [2, [3]]], []]}
    store.start_run("r").checkpoint(state)
    got = store.read("r")
    assert math.isnan(got.pop("nan"))
    expected = dict(state)
    expected.pop("nan")
    assert got == expected and type(got["bool"]) is bool


def test_missing_reference_fails_closed_and_lenient_marks_it(tmp_path: Path, store: ckptfs.Store) -> None:
    there = tmp_path / "there.json"
    there.write_bytes(b'{"x": 1}')
    gone = tmp_path / "gone.json"
    gone.write_bytes(b"soon gone")
    changed = tmp_path / "changed.json"
    changed.write_bytes(b"v1")
    run = store.start_run("r")
    run.checkpoint({
        "ok": ckptfs.Ref(str(there), digest=Digest.of(b'{"x": 1}'), size=8),
        "gone": ckptfs.Ref(str(gone)),
        "changed": ckptfs.Ref(str(changed), digest=Digest.of(b"v1")),
        "expired": ckptfs.Ref(str(there), expires_at=1.0),
        "captured": ckptfs.Ref(str(there), capture=True),
    })
    gone.unlink()
    changed.write_bytes(b"v2")
    with pytest.raises(MissingReference) as e:  # by default no reference is even opened
        store.resume("r")
    assert sorted(name for name, _ in e.value.problems) == ["changed", "expired", "gone", "ok"]
    store.ref_policy = ckptfs.RefPolicy.allow(str(tmp_path))
    with pytest.raises(MissingReference) as e:
        store.resume("r")
    assert sorted(name for name, _ in e.value.problems) == ["changed", "expired", "gone"]
    state = store.resume("r", lenient_refs=True).state
    assert state["ok"].missing is None and state["gone"].missing is not None
    assert "changed" in state["changed"].missing and "expired" in state["expired"].missing
    assert state["captured"].read() == b'{"x": 1}'  # captured bytes live in the store


def test_expired_snapshot_is_not_restored(store: ckptfs.Store) -> None:
    run = store.start_run("r")
    run.checkpoint({"x": 1}, expires_at=datetime.timedelta(seconds=-1))
    with pytest.raises(ExpiredError):
        store.resume("r")
    with pytest.raises(ExpiredError):
        store.read("r")
    assert store.read("r", allow_expired=True) == {"x": 1}


def test_fork_and_resume_of_an_older_snapshot(store: ckptfs.Store) -> None:
    run = store.start_run("a")
    first = run.checkpoint({"x": 1})
    run.checkpoint({"x": 2})
    with pytest.raises(ConflictError, match="fork"):
        store.resume(first.id)
    fork = store.fork(first.id, "b")
    assert fork.state == {"x": 1}
    snap = fork.checkpoint({"x": 10})
    assert snap.parent == first.id and snap.run == "b" and snap.seq == 1
    assert store.read("b") == {"x": 10} and store.read("a") == {"x": 2}


def test_snapshot_references_resolve(store: ckptfs.Store) -> None:
    run = store.start_run("a")
    s1 = run.checkpoint({"x": 1})
    s2 = run.checkpoint({"x": 2})
    assert store.get("a").id == s2.id
    assert store.get("a@1").id == s1.id
    assert store.get(s1.id).seq == 1
    assert store.get(s1.digest.hex[:10]).id == s1.id
    assert [s.seq for s in store.snapshots("a")] == [1, 2]


# -- the writer's shortcuts never change what is restored -----------------------------------
plain = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False)
    | st.text(max_size=40) | st.binary(max_size=40),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12)

ops = st.lists(st.one_of(
    st.tuples(st.just("append"), st.lists(plain, min_size=1, max_size=30)),
    st.tuples(st.just("edit"), plain),
    st.tuples(st.just("truncate"), st.integers(0, 50)),
    st.tuples(st.just("big"), st.integers(1, 40)),
    st.tuples(st.just("scalar"), plain),
), min_size=1, max_size=12)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops)
def test_any_sequence_of_states_restores_exactly(tmp_path_factory: pytest.TempPathFactory,
                                                 steps: list[tuple[str, Any]]) -> None:
    root = tmp_path_factory.mktemp("prop")
    store = ckptfs.open_store(str(root / "s"),
                              chunker=ckptfs.ChunkerParams(min_size=256, avg_size=1024, max_size=4096))
    run = store.start_run("r")
    items: list[Any] = []
    other: Any = None
    for op, arg in steps:
        if op == "append":
            items.extend(arg)
        elif op == "edit" and items:
            items[len(items) // 2] = arg
        elif op == "truncate":
            del items[arg:]
        elif op == "big":
            items.extend("x" * 300 + str(i) for i in range(arg))
        else:
            other = arg
        run.checkpoint({"items": items, "other": other})
        assert ckptfs.open_store(str(root / "s")).read("r") == {"items": items, "other": other}


def test_bad_labels_are_refused_before_anything_is_written(tmp_path: Path) -> None:
    root = tmp_path / "s"
    run = ckptfs.open_store(str(root)).start_run("r")
    big = {"messages": [message(i) for i in range(100)]}
    with pytest.raises(ckptfs.errors.InvalidName):
        run.checkpoint(big, entry_labels={"messages": {"../pii": "true"}})
    with pytest.raises(KeyError, match="nope"):
        run.checkpoint(big, entry_labels={"nope": {"pii": "true"}})
    with pytest.raises(TypeError):
        run.checkpoint(big, labels={"owner": 7})  # type: ignore[dict-item]
    assert not (root / "chunks").exists() or not any((root / "chunks").rglob("*"))
    snap = run.checkpoint(big, entry_labels={"messages": {"pii": "true"}}, labels={"owner": "ops"})
    assert snap.manifest.entries["messages"].labels == {"pii": "true"} and snap.labels == {"owner": "ops"}
