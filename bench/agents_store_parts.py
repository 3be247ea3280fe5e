"""Where the bytes of a 1,000-turn agent session go (issue 34's store <= 0.1x target), and how
far down any lossless store could go on the same data.

Runs the same sessions as ``bench/agents_sessions.py`` (OpenAI Agents SDK: ``CkptfsSession``
vs ``SQLiteSession``) and ``bench/adk_sessions.py`` (ADK's Runner: ``CkptfsSessionService`` vs
``SqliteSessionService``), keeps the ckptfs stores as written (no forget/gc), and splits their
bytes into the parts of a record (``bench/lg_store_parts``: header digests, manifest, labels,
locators, bodies), per record kind (label ``ag.op`` for the item log; ADK records have none).

Then the floor: the session items' text as SQLite holds it, compressed whole by zstd -19 and
xz -9e (cross-item compression no per-record store has), and the entropy of ``bench.data``'s
word source (words drawn independently from a Zipf vocabulary: no compressor goes below it).

    python -m bench.agents_store_parts [--turns 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import lzma
import math
import os
import tempfile
from pathlib import Path
from typing import Any

import zstandard

from bench import common
from bench.data import message, vocabulary
from bench.lg_store_parts import parts_md


def _floor(turns: int, sqlite_bytes: int) -> list[str]:
    from bench.agents_sessions import _item

    items = [_item(i) for i in range(2 * turns)]
    raw = json.dumps(items).encode()
    text = sum(len(x["content"].encode()) for x in items)
    z19 = len(zstandard.ZstdCompressor(level=19).compress(raw))
    xz = len(lzma.compress(raw, preset=9 | lzma.PRESET_EXTREME))
    one = sum(len(zstandard.ZstdCompressor(level=3).compress(json.dumps(x).encode()))
              for x in items)
    words, weights = vocabulary()
    total = sum(weights)
    bits = -sum(w / total * math.log2(w / total) for w in weights)
    per_word = sum(len(w) * x / total for w, x in zip(words, weights)) + 1  # and a space
    bound = text * bits / 8 / per_word
    rows = [["items as JSON (what SQLiteSession holds, about)", f"{len(raw):,}",
             common.fmt(len(raw) / sqlite_bytes, 3)],
            ["each item zstd -3 alone (a store of one compressed record per item)",
             f"{one:,}", common.fmt(one / sqlite_bytes, 3)],
            ["all items zstd -19 together", f"{z19:,}", common.fmt(z19 / sqlite_bytes, 3)],
            ["all items xz -9e together", f"{xz:,}", common.fmt(xz / sqlite_bytes, 3)],
            [f"entropy of the text ({bits:.2f} bits per word of {per_word:.2f} bytes)",
             f"{bound:,.0f}", common.fmt(bound / sqlite_bytes, 3)]]
    return ["", f"The floor on this data ({2 * turns} items, SQLiteSession file "
            f"{sqlite_bytes:,} bytes):", "",
            common.table(["", "bytes", "/ SQLiteSession file"], rows)]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--turns", type=int, default=1000)
    a = ap.parse_args(argv)
    base = Path(tempfile.mkdtemp(prefix="agents-parts-"))
    out: list[str] = [f"# Where a {a.turns}-turn agent session's bytes go", ""]

    from agents import SQLiteSession

    from bench.agents_sessions import _oai
    from ckptfs.integrations.openai_agents import CkptfsSession

    os.makedirs(base / "oai-sqlite")
    ck, db = CkptfsSession("bench", str(base / "oai-ckptfs")), SQLiteSession(
        "bench", str(base / "oai-sqlite" / "s.db"))
    asyncio.run(_oai(ck, a.turns, None))
    asyncio.run(_oai(db, a.turns, None))
    ck.close()
    db.close()
    ck_size = common.tree_size(str(base / "oai-ckptfs"))[0]
    db_size = common.tree_size(str(base / "oai-sqlite"))[0]
    out += [f"## OpenAI Agents SDK: CkptfsSession {ck_size:,} bytes, SQLiteSession "
            f"{db_size:,} bytes ({ck_size / db_size:.3f}x)", ""]
    out += parts_md(base / "oai-ckptfs", "ag.op")
    out += _floor(a.turns, db_size)

    from bench.adk_sessions import run_peer

    asyncio.run(run_peer("warm-up", 5, str(base / "adk-w")))
    os.makedirs(base / "adk-ckptfs")
    os.makedirs(base / "adk-sqlite")
    ck_r = asyncio.run(run_peer("ckptfs", a.turns, str(base / "adk-ckptfs"), collect=False))
    sq_r = asyncio.run(run_peer("sqlite", a.turns, str(base / "adk-sqlite")))
    out += ["", f"## Google ADK: CkptfsSessionService {ck_r['size']:,} bytes, "
            f"SqliteSessionService {sq_r['size']:,} bytes ({ck_r['size'] / sq_r['size']:.3f}x)",
            ""]
    out += parts_md(base / "adk-ckptfs" / "store", "ag.op")
    out += ["", f"load average at the end: {os.getloadavg()[0]:.2f}", "", common.machine_md()]
    text = "\n".join(out) + "\n"
    print(text)
    common.write_result(f"agents_store_parts_{a.turns}", text)


if __name__ == "__main__":
    main()
