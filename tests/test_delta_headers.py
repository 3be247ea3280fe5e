"""Record headers stored by reference (spec/v2.md 3.1.2, store feature ``delta-headers``).

In a store that requires the feature, a commit's record header is a zstd frame compressed
against its parent record's header (container form 0x04), so a step costs what changed, not
the whole manifest and locator table again; every DELTA_CHAIN records one is stored whole, so
a reader follows a bounded chain. A reader decodes such a record through its bases; a form
0x04 record in a store without the feature is ``corrupt``, as is a chain past 64 records, a
damaged base and a frame decoded against the wrong base.
"""

from __future__ import annotations

from pathlib import Path

import blake3
import pytest

import ckptfs
from ckptfs.errors import CorruptObject, CorruptSnapshot, FormatError
from ckptfs.format import cbor, framing
from ckptfs.format import containers as ct
from ckptfs.format.models import DELTA_HEADERS
from ckptfs.store.commits import DELTA_CHAIN


def _records(root: Path, run: str = "r") -> list[Path]:
    return sorted(f for f in (root / "runs" / run).iterdir() if f.is_file() and f.name.isdigit())


def _forms(root: Path, run: str = "r") -> list[int]:
    return [f.read_bytes()[8] for f in _records(root, run)]


def _msg(i: int) -> dict[str, object]:
    return {"role": "user" if i % 2 else "assistant",
            "content": f"message {i}: " + "some words of a conversation " * 30}


def _grow(url: str, n: int, *, delta: bool = True, run_id: str = "r") -> list[dict[str, object]]:
    store = ckptfs.open_store(url)
    store.init(delta_headers=delta)
    run = store.start_run(run_id)
    msgs = [_msg(i) for i in range(n)]
    run.checkpoint({"messages": [msgs[0]], "plan": {"k": 1}})
    for m in msgs[1:]:
        run.append("messages", m)
    store.close()
    return msgs


def test_a_delta_store_stores_headers_against_the_parent(tmp_path: Path) -> None:
    url = str(tmp_path / "s")
    msgs = _grow(url, 40)
    assert DELTA_HEADERS in ckptfs.open_store(url).repo.config.required
    forms = _forms(tmp_path / "s")
    # the first record and every DELTA_CHAIN-th are whole (form 0x03), the rest by reference
    assert forms == [3 if i % DELTA_CHAIN == 0 else 4 for i in range(40)]
    for f in _records(tmp_path / "s")[1:DELTA_CHAIN]:
        data = f.read_bytes()
        assert ct.base_of(data, what=f.name) == int(f.name) - 1
    # a fresh store object (nothing remembered) reads the head through its bases on disk
    got = ckptfs.open_store(url).read("r")
    assert list(got["messages"]) == msgs and got["plan"] == {"k": 1}
    # and every snapshot of the run, each with its own state
    store = ckptfs.open_store(url)
    for seq in (2, 17, 31, 40):
        assert list(store.read(f"r@{seq}")["messages"]) == msgs[:seq]


def test_delta_headers_make_the_store_smaller(tmp_path: Path) -> None:
    _grow(str(tmp_path / "a"), 120, delta=False)
    _grow(str(tmp_path / "b"), 120, delta=True)
    whole = sum(f.stat().st_size for f in _records(tmp_path / "a"))
    delta = sum(f.stat().st_size for f in _records(tmp_path / "b"))
    assert delta < 0.8 * whole, (delta, whole)


def test_a_store_without_the_feature_writes_no_form_4(tmp_path: Path) -> None:
    _grow(str(tmp_path / "s"), 20, delta=False)
    assert set(_forms(tmp_path / "s")) == {3}


def test_form_4_in_a_store_without_the_feature_is_corrupt(tmp_path: Path) -> None:
    """The same form 0x04 record bytes moved into a store whose config does not require
    ``delta-headers``: readers there know only 0x02 and 0x03 (spec/v2.md 3.1.2)."""
    _grow(str(tmp_path / "a"), 3, delta=True)
    _grow(str(tmp_path / "b"), 3, delta=False)
    for src, dst in zip(_records(tmp_path / "a"), _records(tmp_path / "b")):
        dst.write_bytes(src.read_bytes())
    assert _forms(tmp_path / "b") == [3, 4, 4]
    with pytest.raises(CorruptSnapshot, match="delta-headers"):
        ckptfs.open_store(str(tmp_path / "b")).read("r")


def test_the_first_commit_after_a_resume_is_stored_whole(tmp_path: Path) -> None:
    url = str(tmp_path / "s")
    msgs = _grow(url, 5)
    store = ckptfs.open_store(url)
    run = store.resume("r")
    run.append("messages", _msg(5))
    run.append("messages", _msg(6))
    store.close()
    assert _forms(tmp_path / "s") == [3, 4, 4, 4, 4, 3, 4]
    assert list(ckptfs.open_store(url).read("r")["messages"]) == msgs + [_msg(5), _msg(6)]


def test_a_damaged_base_makes_its_dependents_corrupt(tmp_path: Path) -> None:
    url = str(tmp_path / "s")
    _grow(url, 6)
    base = _records(tmp_path / "s")[2]  # the base of record 4 (form 0x04 itself)
    raw = bytearray(base.read_bytes())
    raw[ct.PREFIX_LEN + 5] ^= 1  # inside its stored header: its digest no longer matches
    base.write_bytes(bytes(raw))
    with pytest.raises(CorruptSnapshot):
        ckptfs.open_store(url).read("r")
    assert list(ckptfs.open_store(url).read("r@2")["messages"])  # below it: readable


def test_a_missing_base_is_corrupt_not_missing_data(tmp_path: Path) -> None:
    url = str(tmp_path / "s")
    _grow(url, 4)
    _records(tmp_path / "s")[1].unlink()  # record 2, the base of record 3
    with pytest.raises(CorruptSnapshot, match="is gone"):
        ckptfs.open_store(url).read("r")


# -- the pure format rules (spec/v2.md 3.1.2) --------------------------------------------------
def _header(seq: int, note: str = "x") -> bytes:
    return cbor.encode({"kind": "record", "run": "r", "seq": seq, "snapshot": bytes(32),
                        "size": 1, "created": 1, "nonce": bytes(16), "manifest": b"\xa0",
                        "bodies": [], "body_length": 0, "note": note,
                        "locators": {"containers": [], "chunks": []}})


def _by_ref(seq: int, base: int, base_header: bytes, note: str = "x") -> bytes:
    return ct.encode_bytes(_header(seq, note), b"", base=(base, base_header))[0]


def test_decode_follows_the_chain_up_to_64_records() -> None:
    headers = {1: _header(1)}
    records = {}
    for seq in range(2, 67):
        records[seq] = _by_ref(seq, seq - 1, headers[seq - 1])
        headers[seq] = _header(seq)

    def base(seq: int, depth: int) -> bytes:
        if seq == 1:
            return headers[1]
        return ct.plain_header(records[seq], what=str(seq), base=base, depth=depth)[0]

    c = ct.decode(records[65], what="r65", base=base)  # 64 form 0x04 records: read
    assert isinstance(c.header, ct.RecordHeader) and c.header.seq == 65 and c.base == 64
    with pytest.raises(FormatError, match="more than 64"):
        ct.decode(records[66], what="r66", base=base)


def test_a_frame_decoded_against_another_base_is_corrupt() -> None:
    data = _by_ref(3, 2, _header(2, "the base it was written against"))
    with pytest.raises(CorruptObject):
        ct.decode(data, what="r3", base=lambda seq, depth: _header(2, "another header"))


@pytest.mark.parametrize("stored, why", [
    (cbor.encode([0, b"x"]), "must be \\[base seq, zstd frame\\]"),
    (cbor.encode([2]), "must be \\[base seq, zstd frame\\]"),
    (cbor.encode({"base": 2}), "must be \\[base seq, zstd frame\\]"),
    (cbor.encode([3, framing.deflate_with(_header(3), _header(2))]), "earlier record"),
    (cbor.encode([2, framing.deflate(_header(3))[:-3]]), "zstd"),
])
def test_hostile_references_are_corrupt(stored: bytes, why: str) -> None:
    data = b"".join([ct.MAGIC, bytes([ct.CONTAINER_BY_BASE]), len(stored).to_bytes(4, "big"),
                     stored, blake3.blake3(stored).digest()])
    with pytest.raises((FormatError, CorruptObject), match=why):
        ct.decode(data, what="r3", base=lambda seq, depth: _header(2))


def test_a_pack_is_never_stored_by_reference() -> None:
    pack = cbor.encode({"kind": "pack", "created": 1, "writer": "t", "bodies": [],
                        "body_length": 0})
    data = ct.encode_bytes(pack, b"", base=(1, _header(1)))[0]
    with pytest.raises(FormatError, match="earlier record"):
        ct.decode(data, what="p", base=lambda seq, depth: _header(1))


# -- maintenance (spec/v2.md 9.1): a visible record's bases stay visible -----------------------
from ckptfs.errors import InvalidArgument  # noqa: E402
from ckptfs.ops.copy import copy_runs  # noqa: E402
from ckptfs.ops.erase import erase  # noqa: E402
from ckptfs.ops.gc import gc  # noqa: E402
from ckptfs.ops.retention import Policy, forget, forget_snapshots  # noqa: E402
from ckptfs.ops.verify import verify  # noqa: E402


def _all_read(url: str, msgs: list[dict[str, object]]) -> list[int]:
    store = ckptfs.open_store(url)
    seqs = store.repo.seqs("r")
    for seq in seqs:
        assert list(store.read(f"r@{seq}")["messages"]) == msgs[:seq]
    return seqs


def test_forget_keeps_the_bases_of_what_it_keeps_and_gc_loses_nothing(tmp_path: Path) -> None:
    url = str(tmp_path / "s")
    msgs = _grow(url, 40)  # whole at 1, 17, 33; record 40's chain is 39 .. 33
    rep = forget(ckptfs.open_store(url).repo, Policy(keep_last=3))
    # keep-last 3 keeps 38..40, and with them their bases 33..37 (visible, not strays)
    assert _all_read(url, msgs) == list(range(33, 41))
    assert [d.seq for d in rep.forgotten] == list(range(1, 33))  # the report says so too
    assert {d.reasons for d in rep.decisions if 33 <= d.seq <= 37} == {
        ("base of a kept record (delta-headers)",)}
    rep = gc(ckptfs.open_store(url).repo, grace_ms=0)
    assert not rep.problems
    assert [int(f.name) for f in _records(tmp_path / "s")] == list(range(33, 41))
    assert _all_read(url, msgs) == list(range(33, 41))
    assert verify(ckptfs.open_store(url).repo, read_data=True).ok
    # a record whose chain starts at a whole record loses nothing of it: 33 is whole
    assert _forms(tmp_path / "s")[0] == 3


def test_forget_of_a_base_alone_keeps_it_visible(tmp_path: Path) -> None:
    url = str(tmp_path / "s")
    msgs = _grow(url, 20)
    forget_snapshots(ckptfs.open_store(url).repo, {"r": {5, 18}})  # both bases of 20
    assert _all_read(url, msgs) == list(range(1, 21))
    forget_snapshots(ckptfs.open_store(url).repo, {"r": set(range(1, 17))})  # 17 is whole
    assert _all_read(url, msgs) == list(range(17, 21))
    assert not gc(ckptfs.open_store(url).repo, grace_ms=0).problems
    assert _all_read(url, msgs) == list(range(17, 21))


def test_a_store_without_the_feature_forgets_as_before(tmp_path: Path) -> None:
    url = str(tmp_path / "s")
    msgs = _grow(url, 20, delta=False)
    forget(ckptfs.open_store(url).repo, Policy(keep_last=3))
    assert _all_read(url, msgs) == [18, 19, 20]


def test_erasing_a_base_alone_is_refused_and_erasing_its_users_first_works(
        tmp_path: Path) -> None:
    url = str(tmp_path / "s")
    msgs = _grow(url, 5)
    repo = ckptfs.open_store(url).repo
    with pytest.raises(InvalidArgument, match=r"\[4, 5\]"):
        erase(repo, "r", seq=3, reason="test")
    assert _all_read(url, msgs) == [1, 2, 3, 4, 5]  # nothing changed
    erase(ckptfs.open_store(url).repo, "r", seq=5, reason="test")
    erase(ckptfs.open_store(url).repo, "r", seq=4, reason="test")
    erase(ckptfs.open_store(url).repo, "r", seq=3, reason="test")
    assert _all_read(url, msgs) == [1, 2]
    assert verify(ckptfs.open_store(url).repo, read_data=True).ok


def test_erasing_the_whole_run_leaves_none_of_its_records(tmp_path: Path) -> None:
    url = str(tmp_path / "s")
    _grow(url, 20)
    other = _grow_more(url, "other", 3)
    erase(ckptfs.open_store(url).repo, "r", reason="test")
    assert not (tmp_path / "s" / "runs" / "r").exists() or not _records(tmp_path / "s")
    assert list(ckptfs.open_store(url).read("other")["messages"]) == other


def _grow_more(url: str, run_id: str, n: int) -> list[dict[str, object]]:
    store = ckptfs.open_store(url)
    run = store.start_run(run_id)
    msgs = [_msg(100 + i) for i in range(n)]
    run.checkpoint({"messages": [msgs[0]]})
    for m in msgs[1:]:
        run.append("messages", m)
    store.close()
    return msgs


def test_copy_out_of_a_delta_store_and_verify(tmp_path: Path) -> None:
    src = str(tmp_path / "a")
    msgs = _grow(src, 20)
    assert verify(ckptfs.open_store(src).repo, read_data=True).ok
    dst = ckptfs.open_store(str(tmp_path / "b"))
    copy_runs(ckptfs.open_store(src).repo, dst.repo)
    assert _all_read(str(tmp_path / "b"), msgs) == list(range(1, 21))
    assert verify(ckptfs.open_store(str(tmp_path / "b")).repo, read_data=True).ok


def test_delta_records_validate_against_the_cddl(tmp_path: Path) -> None:
    import pycddl

    from ckptfs_conformance.validate import container_header, validate_store

    cddl = (Path(__file__).parent.parent / "spec" / "ckptfs.cddl").read_text()
    header = pycddl.Schema(f"root = v2-record-header\n{cddl}")
    reference = pycddl.Schema(f"root = v2-header-reference\n{cddl}")
    _grow(str(tmp_path / "s"), 20)
    root = tmp_path / "s"
    for f in _records(root):
        data = f.read_bytes()
        header.validate_cbor(container_header(data, f.parent))
        if data[8] == ct.CONTAINER_BY_BASE:
            hlen = int.from_bytes(data[9:13], "big")
            reference.validate_cbor(data[ct.PREFIX_LEN:ct.PREFIX_LEN + hlen])
    assert validate_store(root) == []


def test_every_backend_reads_a_delta_store(store_url: str, store_options: dict[str, object]
                                           ) -> None:
    """Local disk, memory and S3 (moto on loopback): a fresh store object reads every
    snapshot of a run whose records are stored by reference, its bases read ahead in one
    batch of ranged reads per miss."""
    store = ckptfs.open_store(store_url, storage_options=store_options)
    store.init(delta_headers=True)
    run = store.start_run("r")
    msgs = [_msg(i) for i in range(20)]
    run.checkpoint({"messages": [msgs[0]]})
    for m in msgs[1:]:
        run.append("messages", m)
    store.close()
    fresh = ckptfs.open_store(store_url, storage_options=store_options)
    assert list(fresh.read("r")["messages"]) == msgs
    assert list(fresh.read("r@15")["messages"]) == msgs[:15]
    forget(fresh.repo, Policy(keep_last=2))
    assert not gc(fresh.repo, grace_ms=0).problems
    again = ckptfs.open_store(store_url, storage_options=store_options)
    assert again.repo.seqs("r") == list(range(17, 21))  # 17 is whole: 18-20 need it
    assert list(again.read("r")["messages"]) == msgs
