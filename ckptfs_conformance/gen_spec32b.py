"""Issue 32, gaps 24-26 and the ``enc.*`` requirements: vectors for points where two honest
implementations used to differ.

Gap 24 (spec/v2.md 6, "One outcome"): reading a snapshot uses only the places its own record
gives, so a store whose later record has a stale locator (or a hole) reads the same whether
the reader read the earlier record that carried the chunk first or not. Each vector here has a
``--break`` rule in ckptfs's adapter (``SPEC32B_BREAKS``, adapters/spec32b_breaks.py) that
fails exactly it (tests/test_spec32b.py).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import ckptfs
from ckptfs.format import containers as ct
from ckptfs.format.digest import Digest
from ckptfs_conformance.gen_spec32 import WIDE
from ckptfs_conformance.gen_v2_containers import edit
from ckptfs_conformance.gen_v2_stores import REC1, REC2, P, V2


def _two_bodies(p: Path, new_store: Any, prng: Any) -> tuple[bytes, bytes, dict[bytes, int]]:
    """r1@1 carries two one-chunk blobs 'a' and 'c' of 3000 bytes; r1@2 needs only 'a' and
    locates it in r1@1. Returns a's and c's 8-byte prefixes and where each body starts."""
    s, c = new_store(p, WIDE)
    r = s.start_run("r1")
    a, other = prng("own-a", 3000), prng("own-c", 3000)
    r.checkpoint({"a": ckptfs.Blob(a), "c": ckptfs.Blob(other)}, "start")
    c.tick()
    r.checkpoint({"a": ckptfs.Blob(a), "n": 2})
    s.close()
    one = ct.decode((p / REC1).read_bytes(), what="r1@1")
    where = {b.digest.raw[:8]: one.body_start + b.offset for b in one.header.bodies}
    return Digest.of(a).raw[:8], Digest.of(other).raw[:8], where


def _stale(p: Path, new_store: Any, prng: Any) -> None:
    """r1@2's locator for 'a' points at c's body in r1@1 (the same stored length): stale, no
    forward, no loose object."""
    da, dc, where = _two_bodies(p, new_store, prng)

    def point(h: dict[str, Any], area: bytes) -> None:
        (row,) = [x for x in h["locators"]["chunks"] if bytes(x[0]) == da]
        row[2] = where[dc]
    edit(p / REC2, point)


def _hole(p: Path, new_store: Any, prng: Any) -> None:
    """r1@2's locator row for 'a' removed: a hole (spec/v2.md 3.5)."""
    da, _, _ = _two_bodies(p, new_store, prng)

    def drop(h: dict[str, Any], area: bytes) -> None:
        h["locators"]["chunks"] = [x for x in h["locators"]["chunks"] if bytes(x[0]) != da]
    edit(p / REC2, drop)


#: name -> (category, description, build)
ONE_OUTCOME: dict[str, tuple[str, str, Callable[[Path, Any, Any], None]]] = {
    "stale-locator-after-carrier": (
        "corrupt", "r1@1 carries 'a'; r1@2's locator for 'a' points at another body of r1@1 "
        "(stale, no forward, no loose object). Reading the whole store reads r1@1 first, yet "
        "r1@2 fails as it does alone: only the places its own record gives count (spec/v2.md "
        "6, One outcome)", _stale),
    "hole-after-carrier": (
        "missing", "r1@1 carries 'a'; r1@2 needs 'a' but neither carries nor locates it (a "
        "hole). Reading the whole store reads r1@1 first, yet r1@2 is missing 'a' as it is "
        "alone: a hole's only place is the loose object (spec/v2.md 6)", _hole),
}


def vectors(g: Any, new_store: Any, prng: Any, render_ref: Any, now: int) -> None:
    """Gap 24: each store twice, read whole (``store-invalid``) and r1@2 alone (``lookup``):
    one outcome."""
    from ckptfs.errors import CkptfsError

    for name, (cat, desc, build) in ONE_OUTCOME.items():
        d = g.store_dir("store-invalid", P + name)
        build(d, new_store, prng)
        g.vector("store-invalid", P + name, desc, ["read", "{store}", str(now)],
                 {"error": cat}, V2, store=f"{P}{name}.store", damaged=[REC2])
        d = g.store_dir("lookup", P + name)
        build(d, new_store, prng)
        try:
            render_ref(str(d), "r1@2", now)
        except CkptfsError as e:
            assert e.category == cat, (name, e.category)
        else:
            raise AssertionError(f"{name}: r1@2 read alone")
        g.vector("lookup", P + name + "-alone", desc + "; here r1@2 alone",
                 ["snapshot", "{store}", str(now), "r1@2"], {"error": cat}, V2,
                 store=f"{P}{name}.store")


# -- gap 25: typed values (format.md 18.3) ------------------------------------------------------
def _t(name: str, payload: Any) -> Any:
    import cbor2

    return cbor2.CBORTag(27, [name, payload])


#: the timedelta range of format.md 18.3, in microseconds (+-999,999,999 days)
TD_MAX = (999_999_999 * 86_400 + 86_399) * 1_000_000 + 999_999
TD_MIN = -999_999_999 * 86_400 * 1_000_000


def _typed_cases() -> dict[str, tuple[str, Any, bool, str]]:
    """name -> (description, item, raw, expected: 'same', 'error: CAT' or the hex written)."""
    nan = float("nan")
    berlin = {"wall": "2020-06-01T12:00:00", "offset": 7200, "zone": "Europe/Berlin"}
    return {
        "path-not-canonical": ("a pure-posix-path 'a//b/./c/' (canonical: 'a/b/c')",
                               _t("pure-posix-path", "a//b/./c/"), False, "error: typed-value"),
        "path-empty": ("a pure-posix-path '' (canonical: '.')", _t("pure-posix-path", ""),
                       False, "error: typed-value"),
        "path-three-slashes": ("a pure-posix-path '///a' (canonical: '/a')",
                               _t("pure-posix-path", "///a"), False, "error: typed-value"),
        "path-two-slashes": ("a pure-posix-path '//a': exactly two leading slashes are kept",
                             _t("pure-posix-path", "//a"), False, "same"),
        "windows-path-slashes": ("a pure-windows-path 'C:/Users/a' (canonical: "
                                 "'C:\\\\Users\\\\a')", _t("pure-windows-path", "C:/Users/a"),
                                 False, "error: typed-value"),
        "windows-path-drive-root": ("a pure-windows-path 'c:\\\\' (a drive and its root)",
                                    _t("pure-windows-path", "c:\\"), False, "same"),
        "datetime-offset-not-zone": ("a datetime in Europe/Berlin on 2020-06-01 (UTC+2) whose "
                                     "offset says 0: refused, not rewritten",
                                     _t("datetime", {**berlin, "offset": 0}), False,
                                     "error: typed-value"),
        "datetime-zone-offset-agrees": ("a datetime in Europe/Berlin on 2020-06-01 with offset "
                                        "7200", _t("datetime", berlin), False, "same"),
        "datetime-fold-unambiguous": ("fold 1 at a wall time that is not ambiguous: not "
                                      "checked, kept", _t("datetime", {**berlin, "fold": 1}),
                                      False, "same"),
        "datetime-zone-unknown": ("a zone key no IANA database has ('Mars/Base')",
                                  _t("datetime", {**berlin, "zone": "Mars/Base"}), False,
                                  "error: typed-value"),
        "date-year-zero": ("the date 0000-01-01 (years 0001 to 9999)", _t("date", "0000-01-01"),
                           False, "error: typed-value"),
        "date-february-30": ("the date 2021-02-30, which does not exist",
                             _t("date", "2021-02-30"), False, "error: typed-value"),
        "timedelta-max": ("a timedelta of 86399999999999999999 microseconds (999999999 days "
                          "and 86399.999999 s, a bignum): the largest",
                          _t("timedelta", TD_MAX), False, "same"),
        "timedelta-min": ("a timedelta of -86399999913600000000 microseconds (-999999999 "
                          "days): the smallest", _t("timedelta", TD_MIN), False, "same"),
        "timedelta-over-max": ("one microsecond more than the largest timedelta",
                               _t("timedelta", TD_MAX + 1), False, "error: typed-value"),
        "timedelta-under-min": ("one microsecond less than the smallest timedelta",
                                _t("timedelta", TD_MIN - 1), False, "error: typed-value"),
        "set-int-and-float": ("a set holding 1 and 1.0: equal numbers are one item",
                              _t("set", [1, 1.0]), False, "error: typed-value"),
        "set-int-and-true": ("a set holding 1 and true: equal numbers are one item",
                             _t("set", [1, True]), False, "error: typed-value"),
        "set-zero-and-minus-zero": ("a set holding 0.0 and -0.0", _t("set", [0.0, -0.0]),
                                    False, "error: typed-value"),
        "set-two-nans": ("a set holding NaN twice: every NaN is one value (format.md 5.1)",
                         _t("set", [nan, nan]), False, "error: typed-value"),
        "set-map-item": ("a set whose item is a map", _t("set", [{"a": 1}]), False,
                         "error: typed-value"),
        "set-tuple-holding-array": ("a set whose item is a tuple holding an array",
                                    _t("set", [_t("tuple", [[1]])]), False,
                                    "error: typed-value"),
        "set-other-order": ("a set [2, 1]: read (another order carries nothing), written back "
                            "sorted", _t("set", [2, 1]), False, "d81b8263736574820102"),
        "name-breaks-grammar": ("a type name '9x' (breaks the grammar of 18.2): an unknown "
                                "name", _t("9x", 1), False, "error: unknown-type"),
        "name-breaks-grammar-raw": ("a type name 'a..b' read raw: kept, written back as it was",
                                    _t("a..b", 1), True, "same"),
    }


def typed_vectors(g: Any) -> None:
    """Gap 25: ``typed/spec32-*`` (op ``typed-roundtrip`` / ``typed-roundtrip-raw``), each
    answer checked against ckptfs's codecs here."""
    import cbor2

    from ckptfs_conformance.adapters.ckptfs_adapter import handle

    tmp = g.out / "_typed32"
    tmp.mkdir(parents=True, exist_ok=True)
    for name, (desc, item, raw, want) in _typed_cases().items():
        data = cbor2.dumps(item, canonical=True)
        op = "typed-roundtrip-raw" if raw else "typed-roundtrip"
        f = tmp / name
        f.write_bytes(data)
        got = handle([op, str(f)])
        expect_hex = data.hex() if want == "same" else want
        assert got == expect_hex, (name, got, expect_hex)
        expect: dict[str, Any] = ({"error": want[7:]} if want.startswith("error: ")
                                  else {"output": expect_hex, "compare": "text"})
        g.vector("typed", "spec32-" + name, "format.md 18.3 (issue 32, gap 25): " + desc,
                 [op, "{file:input}"], expect, ["typed-values"], {"input": {"hex": data.hex()}})
    import shutil

    shutil.rmtree(tmp)


def _typed_without_feature(p: Path, new_store: Any, prng: Any) -> None:
    """r1@1 holds a datetime (tag 27); its manifest's ``required`` no longer lists
    typed-values (snapshot id and size recomputed)."""
    import datetime as dt

    import cbor2

    from ckptfs.format import cbor

    s, _ = new_store(p, WIDE)
    s.start_run("r1").checkpoint(
        {"when": dt.datetime(2020, 6, 1, 12, 0, tzinfo=dt.timezone.utc)}, "start")
    s.close()

    def drop(h: dict[str, Any], area: bytes) -> None:
        m = cbor2.loads(h["manifest"])
        m["required"] = [f for f in m["required"] if f != "typed-values"]
        if not m["required"]:
            del m["required"]
        data = cbor.encode(m)
        h["manifest"], h["snapshot"], h["size"] = data, Digest.of(data).raw, len(data)
    edit(p / REC1, drop)


def store_vectors(g: Any, new_store: Any, prng: Any, render_store: Any, now: int) -> None:
    """Gap 25: a tag 27 in a snapshot that does not list typed-values is read."""
    name = P + "typed-without-feature"
    d = g.store_dir("store-valid", name)
    _typed_without_feature(d, new_store, prng)
    g.vector("store-valid", name, "a datetime (tag 27) in a snapshot whose manifest does not "
             "require typed-values: read like any other (format.md 18.1, issue 32 gap 25)",
             ["read", "{store}", str(now)], {"output": render_store(str(d), now),
                                              "compare": "json"}, V2 + ["typed-values"],
             store=f"{name}.store")
    name = P + "ledger-typed-result"
    d = g.store_dir("store-valid", name)
    _ledger_typed(d, new_store, prng)
    g.vector("store-valid", name, "an effect's result in the ledger that is a typed value (a "
             "date), which writers do not write there: read, as its name and payload "
             "(format.md 18.1, issue 32 gap 25)", ["read", "{store}", str(now)],
             {"output": render_store(str(d), now), "compare": "json"},
             V2 + ["ledger", "typed-values"], store=f"{name}.store")


def _ledger_typed(p: Path, new_store: Any, prng: Any) -> None:
    """r1@3's ledger: the completed record's ``result`` 5 replaced by a typed value (a date),
    which writers do not write there (format.md 18.1); ledger digest, manifest, snapshot id
    and size recomputed."""
    import io

    import cbor2

    from ckptfs.format import cbor

    s, _ = new_store(p, WIDE)
    r = s.start_run("r1")
    r.checkpoint({"n": 1}, "start")
    r.effect("tool", lambda: 5, key="k-1")
    s.close()

    def change(h: dict[str, Any], area: bytes) -> None:
        m = cbor2.loads(h["manifest"])
        buf = io.BytesIO(m["ledger"]["inline"])
        items = []
        while buf.tell() < len(m["ledger"]["inline"]):
            items.append(cbor2.CBORDecoder(buf).decode())
        assert items[-1]["result"] == 5
        items[-1]["result"] = cbor2.CBORTag(27, ["date", "2020-01-01"])
        content = b"".join(cbor.encode(x) for x in items)
        m["ledger"].update(inline=content, size=len(content), digest=Digest.of(content).raw)
        data = cbor.encode(m)
        h["manifest"], h["snapshot"], h["size"] = data, Digest.of(data).raw, len(data)
    from ckptfs.format.names import record_path

    edit(p / record_path("r1", 3), change)
