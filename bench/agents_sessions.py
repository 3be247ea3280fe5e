"""Issue 34 performance: per-turn cost and store size of a 1,000-turn agent session, ckptfs
against each framework's own SQLite-backed store, ratios from one run.

A turn does what the framework's runner does to its store:

* OpenAI Agents SDK (``CkptfsSession`` vs ``SQLiteSession`` on a file): ``get_items()`` (the
  whole history, the SDK's default; ``--limit N`` for a session limit), ``add_items([user])``
  before the model call, ``add_items([assistant])`` after it;
* Pydantic AI (``CkptfsMessageHistory`` vs the harness's ``SqliteStepStore``): load the
  history (``load()`` / ``latest_snapshot``), then store the turn (``extend`` of the two new
  messages / ``save_snapshot`` of the whole history, as ``StepPersistence`` does).

Messages are bench.data's ~1 KB pseudo-English chat messages (they compress about 3x, like
chat text). Store size is the sum of file sizes (SQLite: the database with its WAL). Both
stores are on the same local disk with their default durability. The machine is shared and
noisy: one run's numbers, not a distribution.

    python bench/agents_sessions.py [--turns 1000] [--limit N] [--dir D]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")

from bench.common import fmt, machine_md, table, tree_size, verdict, write_result  # noqa: E402
from bench.data import message  # noqa: E402
from ckptfs.integrations.agent_common import FOLD  # noqa: E402


_ITEMS: dict[int, dict[str, Any]] = {}


def _item(i: int) -> dict[str, Any]:
    """Message ``i`` as a session item (made once: the timed turns only store and load)."""
    if i not in _ITEMS:
        m = message(i)
        _ITEMS[i] = {"role": "user" if m["role"] == "user" else "assistant",
                     "content": m["content"]}
    return _ITEMS[i]


async def _oai(session: Any, turns: int, limit: int | None) -> list[float]:
    out = []
    for t in range(turns):
        t0 = time.perf_counter()
        await session.get_items(limit)
        await session.add_items([_item(2 * t)])
        await session.add_items([_item(2 * t + 1)])
        out.append(time.perf_counter() - t0)
    return out


async def _pyd_ckptfs(history: Any, turns: int, limit: int | None) -> list[float]:
    from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart

    out = []
    for t in range(turns):
        t0 = time.perf_counter()
        await history.load(limit)
        await history.extend([ModelRequest(parts=[UserPromptPart(_item(2 * t)["content"])]),
                              ModelResponse(parts=[TextPart(_item(2 * t + 1)["content"])])])
        out.append(time.perf_counter() - t0)
    return out


async def _pyd_sqlite(store: Any, turns: int) -> list[float]:
    from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart
    from pydantic_ai_harness.step_persistence import ContinuableSnapshot

    out = []
    for t in range(turns):
        t0 = time.perf_counter()
        snap = await store.latest_snapshot(run_id="conv")
        msgs = list(snap.messages) if snap else []
        msgs += [ModelRequest(parts=[UserPromptPart(_item(2 * t)["content"])]),
                 ModelResponse(parts=[TextPart(_item(2 * t + 1)["content"])])]
        await store.save_snapshot(ContinuableSnapshot(run_id="conv", step_index=t,
                                                      messages=msgs))
        out.append(time.perf_counter() - t0)
    return out


def _size(path: str) -> tuple[int, int]:
    """(sum of file sizes, ``du`` bytes: the disk blocks the files take)."""
    total, du_kib, _ = tree_size(path)
    return total, du_kib * 1024


def _collected(path: str) -> tuple[int, int]:
    """``_size`` after the store's own gc (grace 0: the run is over). The adapters forgot the
    snapshots nothing reads as they went (folds, ``forget_every``); gc drops their records."""
    import ckptfs
    from ckptfs.integrations.agent_common import forgets_done
    from ckptfs.ops.gc import gc

    forgets_done()
    store = ckptfs.open_store(path)
    gc(store.repo, grace_ms=0)
    store.close()
    return _size(path)


def _row(name: str, mine: list[float], theirs: list[float], my: tuple[int, int],
         their: tuple[int, int], after: tuple[int, int]) -> list[Any]:
    per_mine = sum(mine) / len(mine) * 1000
    per_theirs = sum(theirs) / len(theirs) * 1000
    last_mine = sum(mine[-100:]) / len(mine[-100:]) * 1000
    last_theirs = sum(theirs[-100:]) / len(theirs[-100:]) * 1000
    t_ratio = per_mine / per_theirs
    s_ratio = my[0] / their[0]
    return [name, fmt(per_mine), fmt(per_theirs), fmt(t_ratio), verdict(t_ratio, 1.0),
            fmt(last_mine), fmt(last_theirs), f"{my[0] / 1e6:.2f}", f"{their[0] / 1e6:.2f}",
            fmt(s_ratio, 3), f"{my[1] / 1e6:.2f}", f"{their[1] / 1e6:.2f}",
            fmt(my[1] / their[1], 3), f"{after[0] / 1e6:.2f}", fmt(after[0] / their[0], 3),
            verdict(after[0] / their[0], 0.1), f"{after[1] / 1e6:.2f}",
            fmt(after[1] / their[1], 3)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--turns", type=int, default=1000)
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--only", choices=["oai", "pyd"], default=None)
    a = ap.parse_args()
    base = a.dir or tempfile.mkdtemp(prefix="agents-bench-")
    for i in range(2 * a.turns):
        _item(i)
    rows = []
    if a.only in (None, "oai"):
        from agents import SQLiteSession

        from ckptfs.integrations.openai_agents import CkptfsSession

        ck_dir, db_dir = os.path.join(base, "oai-ckptfs"), os.path.join(base, "oai-sqlite")
        os.makedirs(db_dir, exist_ok=True)
        ck, db = CkptfsSession("bench", ck_dir), SQLiteSession("bench", os.path.join(db_dir, "s.db"))
        mine = asyncio.run(_oai(ck, a.turns, a.limit))
        theirs = asyncio.run(_oai(db, a.turns, a.limit))
        ck.close()
        db.close()  # SQLite folds its WAL into the database file: sizes compare settled files
        before = _size(ck_dir)
        rows.append(_row("OpenAI Agents SDK: CkptfsSession / SQLiteSession", mine, theirs,
                         before, _size(db_dir), _collected(ck_dir)))
        print(rows[-1], flush=True)
    if a.only in (None, "pyd"):
        from pydantic_ai_harness.step_persistence import SqliteStepStore

        from ckptfs.integrations.pydantic_ai import CkptfsMessageHistory

        ck_dir, db_dir = os.path.join(base, "pyd-ckptfs"), os.path.join(base, "pyd-sqlite")
        os.makedirs(db_dir, exist_ok=True)
        history = CkptfsMessageHistory("bench", ck_dir)
        mine = asyncio.run(_pyd_ckptfs(history, a.turns, a.limit))
        history.close()
        theirs = asyncio.run(_pyd_sqlite(SqliteStepStore(database=os.path.join(db_dir, "runs.db")),
                                         a.turns))
        before = _size(ck_dir)
        rows.append(_row("Pydantic AI: CkptfsMessageHistory / harness SqliteStepStore", mine,
                         theirs, before, _size(db_dir), _collected(ck_dir)))
    name = f"agents_sessions_{a.turns}" + (f"_{a.only}" if a.only else "")
    text = (f"# Agent sessions: {a.turns} turns (limit {a.limit})\n\n" + machine_md() + "\n\n"
            + table(["case", "ckptfs ms/turn", "sqlite ms/turn", "ratio", "<= 1.0x",
                     "ckptfs last 100", "sqlite last 100", "ckptfs MB", "sqlite MB",
                     "size ratio", "ckptfs du MB", "sqlite du MB", "du ratio",
                     "ckptfs MB after gc", "size ratio after gc", "<= 0.1x",
                     "ckptfs du MB after gc", "du ratio after gc"],
                    rows) + "\n"
            + "\nMB: the sum of file sizes (SQLite after close, its WAL folded in); du: the "
              "disk blocks they take (a ckptfs commit is a file of about 1 KB here). ckptfs "
              "as the run left it (the session folded its items every "
              f"{FOLD} and forgot the per-turn snapshots in the background), then after one "
              "`gc` of the store (grace 0), which drops the forgotten records. The target is "
              "read on the sizes after gc.\n\n"
            + f"load average at the end: {os.getloadavg()[0]:.2f}\n")
    print(text)
    print("written to", write_result(name, text))



if __name__ == "__main__":
    main()
