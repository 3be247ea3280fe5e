"""The commit path's caches (issue 14, per-step CPU): cached encodings equal fresh ones.

Every cache on the commit path (entry encodings by identity, chunk-list prefixes, raw-digest
sets, the locator table built as plain rows) is checked against the fresh, uncached encoding
(``Manifest.to_bytes``, ``RecordHeader`` over ``make_locators``, ``sweeps.named_chunks`` and
``sweeps.unprotected``) on random sequences of appends, tail merges, updates, forks back to
older manifests, resumes (a new encoder) and edits made in place, so a stale cache fails.
"""

from __future__ import annotations

import random
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ckptfs
from ckptfs.errors import FormatError
from ckptfs.format import containers as ct
from ckptfs.format.cdc import ChunkerParams
from ckptfs.format.chunk_lists import ChunkListCache, common_prefix
from ckptfs.format.containers import Location, PackRef, RecordHeader, RecordRef
from ckptfs.format.digest import Digest
from ckptfs.format.manifest_bytes import ManifestEncoder
from ckptfs.format.models import VALUE_TYPES, Captured, ChunkRef, Manifest, Schema
from ckptfs.format.record_bytes import LocatorRows, encode_record
from ckptfs.store import chunk_sets, sweeps
from tests.conftest import fuzz_examples

T0 = 1_800_000_000_000


def _ref(rng: random.Random) -> ChunkRef:
    return ChunkRef(Digest(rng.randbytes(32)), rng.randint(1, 1 << 20))


def _entry(chunks: tuple[ChunkRef, ...], labels: dict[str, str] | None = None) -> Captured:
    return Captured(kind="value", type=VALUE_TYPES["cbor-seq"], size=sum(c.size for c in chunks),
                    digest=Digest(bytes(32)), chunks=chunks, encoding="cbor-seq",
                    labels=labels or {})


def _manifest(seq: int, entries: dict[str, Any], run: str = "r") -> Manifest:
    return Manifest(run=run, seq=seq, boundary="step", created=T0, writer="w",
                    schema=Schema("s", 1), entries=entries, labels={"k": str(seq)})


OPS = ["append", "append", "append", "merge", "update", "fork", "resume", "relabel",
       "equal_copy", "swap_middle", "bad_size", "other_run", "drop", "same"]


def _check(enc: ManifestEncoder, m: Manifest) -> bool:
    """The encoder's bytes are the fresh ones, or both refuse the manifest."""
    try:
        want = m.to_bytes()
    except FormatError:
        with pytest.raises(FormatError):
            enc.to_bytes(m)
        return False
    assert enc.to_bytes(m) == want
    return True


@settings(max_examples=fuzz_examples(60), deadline=None)
@given(seed=st.integers(0, 1 << 30), ops=st.lists(st.sampled_from(OPS), min_size=1,
                                                   max_size=40))
def test_encoder_equals_fresh_encoding_over_random_histories(seed: int, ops: list[str]) -> None:
    rng = random.Random(seed)
    enc = ManifestEncoder(keep=rng.choice([2, 8, 512]))
    enc.chunk_lists.keep = rng.choice([1, 4, 32])
    entries: dict[str, Any] = {"messages": _entry(tuple(_ref(rng) for _ in range(5))),
                               "plan": _entry((_ref(rng),))}
    history = [dict(entries)]
    seq = 1
    _check(enc, _manifest(seq, entries))
    for op in ops:
        name = rng.choice(sorted(entries)) if entries else "messages"
        e = entries.get(name) or _entry(())
        chunks = e.chunks
        if op == "append":
            entries[name] = _entry(chunks + tuple(_ref(rng) for _ in range(rng.randint(1, 3))),
                                   dict(e.labels))
        elif op == "merge" and len(chunks) > 2:
            j = rng.randint(2, len(chunks))
            merged = ChunkRef(Digest(rng.randbytes(32)), sum(c.size for c in chunks[-j:]))
            entries[name] = _entry(chunks[:-j] + (merged,))
        elif op == "update":
            entries[name] = _entry(tuple(_ref(rng) for _ in range(rng.randint(1, 4))))
        elif op == "fork":  # back to an older manifest's entries, then on from there
            entries = dict(rng.choice(history))
        elif op == "resume":  # a new process: nothing cached
            enc = ManifestEncoder()
        elif op == "relabel" and isinstance(e, Captured):
            e.labels["edited"] = str(seq)  # type: ignore[index]  # in place: must be seen
        elif op == "equal_copy":  # equal values, other objects
            entries[name] = _entry(tuple(ChunkRef(Digest(c.digest.raw), c.size) for c in chunks))
        elif op == "swap_middle" and len(chunks) > 2:  # same first and last objects
            i = rng.randrange(1, len(chunks) - 1)
            entries[name] = _entry(chunks[:i] + (_ref(rng),) + chunks[i + 1:])
        elif op == "bad_size":
            entries[name] = attrs.evolve(_entry(chunks + (_ref(rng),)), size=e.size + 1)
        elif op == "other_run":
            _check(enc, _manifest(seq, {"x": _entry(chunks + (_ref(rng),))}, run="other"))
        elif op == "drop" and len(entries) > 1:
            del entries[name]
        seq += 1
        if not _check(enc, _manifest(seq, entries)):
            entries = dict(history[-1])
        else:
            history.append(dict(entries))
    assert len(enc) <= enc.keep


def test_encoder_sees_labels_edited_in_place() -> None:
    """An entry object cached once and then given other labels in place (its mapping is a
    plain dict) is encoded afresh: the cache must not answer with the old bytes."""
    rng = random.Random(1)
    enc = ManifestEncoder()
    e = _entry(tuple(_ref(rng) for _ in range(3)), {"a": "1"})
    m = _manifest(1, {"e": e})
    first = enc.to_bytes(m)
    e.labels["a"] = "2"  # type: ignore[index]
    assert enc.to_bytes(m) == m.to_bytes() != first


def test_chunk_list_prefix_is_taken_by_identity_only() -> None:
    """A list whose first and last chunks are the cached list's objects but whose middle
    differs shares no prefix beyond the difference; an equal but distinct object is no
    prefix either (a stale prefix would encode the old middle)."""
    rng = random.Random(2)
    a = tuple(_ref(rng) for _ in range(6))
    b = a[:2] + (_ref(rng),) + a[3:]
    assert common_prefix(b, a) == 0 or common_prefix(b, a) <= 2
    assert common_prefix(a + (_ref(rng),), a) == 6
    copy = (ChunkRef(Digest(a[0].digest.raw), a[0].size),) + a[1:]
    assert common_prefix(copy, a) == 0
    cache = ChunkListCache()
    cache.put(cache.get(a))
    for lst in (b, a + (_ref(rng),), a[:3] + (_ref(rng),), copy):
        cl = cache.get(lst)
        assert cl.array() == ct.cbor.encode([c.to_cbor() for c in lst])
        assert cl.raws == [c.digest.raw for c in lst] and cl.total == sum(c.size for c in lst)


def test_caches_are_bounded() -> None:
    rng = random.Random(3)
    cache = ChunkListCache(keep=4, max_chunks=50)
    enc = ManifestEncoder(keep=5, keep_bytes=10_000)
    for i in range(40):
        lst = tuple(_ref(rng) for _ in range(rng.randint(1, 20)))
        cache.put(cache.get(lst))
        enc.to_bytes(_manifest(i + 1, {f"e{i}": _entry(lst)}))
        assert len(cache) <= 4 and cache._held <= 50
        assert len(enc) <= 5 and enc._bytes <= 10_000


# -- the record's locator table -------------------------------------------------------------
def _model_record(where: dict[Digest, Location], framed: list[Any]) -> tuple[bytes, int]:
    table, area, length = ct.layout_parts(framed)
    containers, locators = ct.make_locators(where)
    header = RecordHeader(run="r", seq=7, snapshot=Digest(bytes(32)), created=T0,
                          nonce=bytes(16), manifest=b"\xa0", bodies=table,
                          containers=containers, locators=locators, body_length=length)
    return ct.encode_record(header, area)


def _fast_record(where: dict[Digest, Location], framed: list[Any],
                 rows: LocatorRows | None) -> tuple[bytes, int]:
    table, area, length = ct.layout_parts(framed)
    data, start, _ = encode_record(run="r", seq=7, snapshot=Digest(bytes(32)), created=T0,
                                   nonce=bytes(16), manifest=b"\xa0", bodies=table,
                                   where={d.raw: loc for d, loc in where.items()}, area=area,
                                   body_length=length, rows=rows)
    return data, start


@settings(max_examples=fuzz_examples(60), deadline=None)
@given(seed=st.integers(0, 1 << 30), n=st.integers(0, 60), k=st.integers(1, 8),
       steps=st.integers(1, 6))
def test_record_bytes_equal_the_header_model(seed: int, n: int, k: int, steps: int) -> None:
    """Plain rows and container keys, and rows cached across commits (chunks added, dropped
    and moved to new Location objects, equal refs as distinct objects), give the bytes of
    RecordHeader over make_locators, containers numbered in first use."""
    rng = random.Random(seed)
    pool = [(lambda s=rng.randint(1, 99): RecordRef("r", s)) if rng.random() < 0.6
            else (lambda d=rng.randbytes(32): PackRef(Digest(d))) for _ in range(k)]

    def loc() -> Location:
        return Location(rng.choice(pool)(), rng.randint(0, 1 << 40), rng.randint(2, 1 << 20))

    where = {Digest(rng.randbytes(32)): loc() for _ in range(n)}
    rows = LocatorRows(keep=rng.choice([4, 1 << 18]))
    for _ in range(steps):
        framed = [(Digest.of(bytes([i])), 1, b"\x00" + bytes([i]))
                  for i in range(rng.randint(0, 3))]
        want = _model_record(where, framed)
        assert _fast_record(where, framed, None) == want
        assert _fast_record(where, framed, rows) == want
        for d in list(where):
            r = rng.random()
            if r < 0.2:
                del where[d]
            elif r < 0.4:
                where[d] = loc()  # moved: a new Location object
        where.update({Digest(rng.randbytes(32)): loc() for _ in range(rng.randint(0, 5))})


# -- the raw-digest sets ---------------------------------------------------------------------
@settings(max_examples=fuzz_examples(80), deadline=None)
@given(seed=st.integers(0, 1 << 30))
def test_unprotected_from_raw_sets_equals_sweeps(seed: int) -> None:
    rng = random.Random(seed)
    lists = ChunkListCache()
    shared = tuple(_ref(rng) for _ in range(rng.randint(0, 8)))
    dup = shared[:1] * rng.randint(0, 2)
    parent = _manifest(4, {"a": _entry(shared + dup), "b": _entry((_ref(rng),))})
    child = _manifest(rng.choice([5, 6]), {
        "a": _entry(shared + dup + tuple(_ref(rng) for _ in range(rng.randint(0, 3)))),
        "c": _entry(tuple(_ref(rng) for _ in range(rng.randint(0, 2)))),
        **({"b": parent.entries["b"]} if rng.random() < 0.5 else {})},
        run=rng.choice(["r", "r", "other"]))
    named = sweeps.named_chunks(child)
    written = [d for d in named if rng.random() < 0.3]
    mine = {d for d in named if rng.random() < 0.3}
    for p in (parent, None):
        want = sweeps.unprotected(child, p, iter(written), mine.__contains__)
        got = chunk_sets.unprotected(child, p, iter(written), mine.__contains__, lists)
        assert got == want
    assert chunk_sets.named_raws(child, lists) == {d.raw for d in named}


# -- end to end ------------------------------------------------------------------------------
SMALL = ChunkerParams(min_size=64, avg_size=256, max_size=1024)


def test_committed_records_are_the_fresh_encoding(tmp_path: Any,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Random appends, declared and full checkpoints, forks and resumes on a v2 store: every
    commit's id is the digest of ``Manifest.to_bytes()`` of the manifest it was given, and
    every record's header is what the model encodes (``RecordHeader.to_cbor`` of the parsed
    header, whose locators are re-made with make_locators from what they say)."""
    from ckptfs.format.names import record_path
    from ckptfs.store.records import parse_record

    rng = random.Random(5)
    store = ckptfs.open_store(str(tmp_path / "s"), chunker=SMALL, clock=lambda: T0, writer="t")
    runs = [store.start_run("r")]
    runs[0].checkpoint({"messages": [], "plan": {"s": 0}})
    snaps = []
    for i in range(150):
        k = rng.randrange(len(runs))
        run = runs[k]
        op = rng.choice(["append"] * 6 + ["changed", "full", "fork", "resume"])
        if run.seq == 0 and op in ("fork", "resume"):
            op = "full"  # a fork's first commit
        if op == "append":
            snaps.append(run.append("messages", {"i": i, "text": "x" * rng.randint(1, 300)}))
        elif op == "changed":
            run.state["plan"] = {"s": i}
            snaps.append(run.checkpoint(run.state, changed=["plan"]))
        elif op == "full":
            snaps.append(run.checkpoint(dict(run.state)))
        elif op == "fork":
            runs.append(store.fork(f"{run.id}@{run.seq}", f"f{i}"))
        else:
            runs[k] = store.resume(run.id)
    for snap in snaps:
        assert snap.digest == Digest.of(snap.manifest.to_bytes())
    repo = store.repo
    assert repo.config.version == 2
    for snap in snaps:
        data = repo.storage.read(record_path(snap.run, snap.seq))
        rec, c = parse_record(data, what="record")
        assert c is not None and isinstance(c.header, RecordHeader) and rec.snapshot == snap.digest
        h = c.header
        where = {}
        for x in h.locators:  # locator prefixes are unique among one record's named chunks
            where[Digest(x.prefix + bytes(24))] = Location(h.containers[x.container], x.start,
                                                           x.stored)
        containers, locators = ct.make_locators(where)
        assert (containers, locators) == (h.containers, h.locators)
        assert data[8] == ct.CONTAINER_COMPRESSED  # the store requires compressed-headers
        again, _ = ct.encode_record(h, [], compress=True)  # zstd is deterministic
        assert again[:c.body_start] == data[:c.body_start]


@settings(max_examples=fuzz_examples(100), deadline=None)
@given(m=st.dictionaries(st.text(max_size=30), st.one_of(st.integers(0, 1 << 64),
                                                         st.binary(max_size=40),
                                                         st.lists(st.integers(0, 300))),
                         max_size=30))
def test_map_bytes_is_canonical_encoding(m: dict[str, Any]) -> None:
    """Assembling a map from its values' encodings (remembered key encodings included) gives
    cbor.encode's canonical bytes: key order by encoded key, heads of every width."""
    from ckptfs.format import cbor
    from ckptfs.format.cbor_parts import array_bytes, map_bytes

    assert map_bytes({k: cbor.encode(v) for k, v in m.items()}) == cbor.encode(m)
    assert map_bytes({k: cbor.encode(v) for k, v in m.items()}) == cbor.encode(m)
    items = list(m.values())
    assert array_bytes(cbor.encode(v) for v in items) == cbor.encode(items)
