"""Real processes, real SIGKILL: a resumed run never pays twice, and a racing resume is fenced."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import ckptfs
from ckptfs.examples.payments import (
    EXIT_FENCED,
    EXIT_IN_DOUBT,
    INVOICES,
    KILL_POINTS,
    PaymentService,
    pay_key,
)

RUN = "r"


def worker(store: Path, log: Path, *extra: str) -> tuple[int, list[dict[str, Any]]]:
    """One agent process through the demo's worker entry point; its exit code and events."""
    cmd = [sys.executable, "-m", "ckptfs.cli", "demo", "--worker", "--store", str(store),
           "--run", RUN, "--service-log", str(log), *extra]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    events = [json.loads(x) for x in p.stdout.splitlines() if x.startswith("{")]
    assert p.returncode in (0, -9, EXIT_IN_DOUBT, EXIT_FENCED), p.stderr
    return p.returncode, events


def charges_per_key(log: Path) -> Counter[str]:
    return Counter(c["key"] for c in PaymentService(log).charges())


@pytest.mark.parametrize("invoice", ["inv-1", "inv-2"])
@pytest.mark.parametrize("point", KILL_POINTS)
def test_sigkill_at_every_point_of_an_effect(tmp_path: Path, point: str, invoice: str) -> None:
    store, log = tmp_path / "store", tmp_path / "pay.jsonl"
    key = pay_key(RUN, invoice)
    rc, events = worker(store, log, "--kill-at", point, "--kill-invoice", invoice)
    assert rc == -9 and events[-1] == {"event": "killed", "point": point, "key": key}
    world_changed = point in ("in-fn", "before-result", "after-result")
    assert charges_per_key(log)[key] == (1 if world_changed else 0)

    # without reconcile: an intent without a result is in doubt and fn is not called
    rc, events = worker(store, log, "--no-reconcile")
    in_doubt = point in ("after-intent", "in-fn", "before-result")
    if in_doubt:
        assert rc == EXIT_IN_DOUBT and events[-1]["event"] == "in-doubt"
        assert events[-1]["key"] == key and events[-1]["issued_by"] == 1
        assert charges_per_key(log)[key] == (1 if world_changed else 0)
    else:
        assert rc == 0

    # with reconcile (asks the service by key): the run finishes, everything paid once
    rc, events2 = worker(store, log)
    assert rc == 0 and events2[-1]["event"] == "done"
    assert charges_per_key(log) == Counter({pay_key(RUN, inv): 1 for inv, _ in INVOICES})
    s = ckptfs.open_store(str(store))
    ledger = s.ledger(RUN)
    eff = ledger.effects[key]
    charged = PaymentService(log).find(key)
    assert eff.status == "completed" and eff.result == charged
    assert s.read(RUN)["paid"][invoice] == charged["charge_id"]  # type: ignore[index]
    if in_doubt:
        reconciled = [e for e in events2 if e["event"] == "reconcile"]
        assert [e["key"] for e in reconciled] == [key]
        assert eff.via == ("reconcile" if world_changed else "call")
        assert eff.issues == (1 if world_changed else 2)  # not done: issued again, same key
    if point == "after-result":  # the first resume replays the recorded result
        paid = [e for e in events if e["event"] == "paid" and e["key"] == key]
        assert paid and paid[0]["how"] == "replayed"  # recorded result returned, fn not called
        assert not [e for e in events + events2 if e["event"] == "charged" and e["key"] == key]
    # every snapshot still verifies, ledger chunks included
    from ckptfs.ops.verify import verify

    assert verify(s.repo, read_data=True).ok


def test_two_processes_resuming_one_head_only_one_pays(tmp_path: Path) -> None:
    store, log, barrier = tmp_path / "store", tmp_path / "pay.jsonl", tmp_path / "barrier"
    barrier.mkdir()
    rc, _ = worker(store, log, "--kill-at", "before-intent", "--kill-invoice", "inv-1")
    assert rc == -9 and not charges_per_key(log)
    head = ckptfs.open_store(str(store)).head(RUN)
    cmd = [sys.executable, "-m", "ckptfs.cli", "demo", "--worker", "--store", str(store),
           "--run", RUN, "--service-log", str(log), "--barrier", str(barrier)]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    while len(list(barrier.glob("ready-*"))) < 2:  # both have resumed the same head
        assert all(p.poll() is None for p in procs)
        time.sleep(0.01)
    (barrier / "go").touch()
    outs = [p.communicate(timeout=120)[0] for p in procs]
    results = sorted((p.returncode, [json.loads(x) for x in o.splitlines()])
                     for p, o in zip(procs, outs))
    (rc_win, ev_win), (rc_lose, ev_lose) = results
    assert (rc_win, rc_lose) == (0, EXIT_FENCED)
    for ev in (ev_win, ev_lose):
        assert ev[0]["event"] == "resumed" and ev[0]["id"] == head.id
    assert not [e for e in ev_lose if e["event"] in ("charged", "snapshot")]
    assert charges_per_key(log) == Counter({pay_key(RUN, inv): 1 for inv, _ in INVOICES})


def test_demo_command_tells_the_story(tmp_path: Path) -> None:
    p = subprocess.run([sys.executable, "-m", "ckptfs.cli", "demo", "--seed", "5",
                        "--kill-at", "in-fn"], cwd=tmp_path, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    out = p.stdout
    assert "killed by SIGKILL at 'in-fn'" in out
    assert "resumed from snapshot" in out and "in doubt: demo-5-1/pay/" in out
    assert "recorded as completed, not charged again" in out
    assert out.rstrip().endswith("every payment happened exactly once")
    assert (tmp_path / "ckptfs-demo-store" / "ckptfs.cbor").exists()
    log = tmp_path / "ckptfs-demo-store.payments.jsonl"
    assert set(charges_per_key(log).values()) == {1}
