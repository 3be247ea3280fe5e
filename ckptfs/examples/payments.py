"""A scripted agent that pays invoices through ``run.effect``, and a fake payment service.

Used by ``ckptfs demo`` and the crash tests. The service keeps its own append-only log of
charges and does NOT deduplicate by key, so a double charge would be visible in that log. The
agent can be told to SIGKILL itself at any point of a payment (``KILL_POINTS``); it reports what
happens as JSON lines on stdout so that a parent process can tell the story or check it.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import ckptfs
from ckptfs.errors import ConflictError, EffectInDoubt
from ckptfs.format.ledger import Effect
from ckptfs.format.models import Manifest
from ckptfs.runtime.effects import NOT_DONE
from ckptfs.store.repository import Snapshot

#: where a worker can be killed, in the order they happen during one payment
KILL_POINTS = ("before-intent", "after-intent", "in-fn", "before-result", "after-result")
INVOICES = (("inv-1", 120), ("inv-2", 75))
EXIT_IN_DOUBT, EXIT_FENCED = 4, 5
#: seconds a charge may take (its lease): a process that resumes a charge killed mid-call waits
#: this long before it reconciles or re-issues it (a real payment call would get longer)
CHARGE_TIMEOUT = 1.0


class PaymentService:
    """A fake payment provider whose only database is an append-only JSON-lines file."""

    def __init__(self, log: str | os.PathLike[str]) -> None:
        self.log = Path(log)

    def charge(self, key: str, invoice: str, amount: int) -> dict[str, Any]:
        """Charge ``amount`` (every call charges: the service does not deduplicate)."""
        result = {"charge_id": "ch_" + uuid.uuid4().hex[:12], "invoice": invoice, "amount": amount}
        line = json.dumps({"key": key, **result}, sort_keys=True) + "\n"
        fd = os.open(self.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        return result

    def charges(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        return [json.loads(x) for x in self.log.read_text().splitlines() if x.strip()]

    def find(self, key: str) -> dict[str, Any] | None:
        """What the service knows about ``key`` (the charge's result), asked on reconcile."""
        for c in self.charges():
            if c["key"] == key:
                return {k: v for k, v in c.items() if k != "key"}
        return None


def pay_key(run_id: str, invoice: str) -> str:
    return f"{run_id}/pay/{invoice}"


def emit(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, **fields}, sort_keys=True), flush=True)


def _die(point: str, key: str) -> None:
    emit("killed", point=point, key=key)
    os.kill(os.getpid(), signal.SIGKILL)


def _snap_fields(s: Snapshot) -> dict[str, Any]:
    return {"seq": s.seq, "id": s.id, "boundary": s.boundary, "attempt": s.attempt,
            "resumed_from": s.resumed_from, "key": s.labels.get("ckptfs.effect")}


def _instrument(store: ckptfs.Store, kill_at: str | None, kill_key: str | None) -> None:
    """Report every commit, and SIGKILL this process around the commit ``kill_at`` names."""
    real = store.repo.commit

    def commit(manifest: Manifest, chunks: Any = None, **kw: Any) -> Snapshot:
        hit = kill_key is not None and manifest.labels.get("ckptfs.effect") == kill_key
        point = {"before_effect": "intent", "after_effect": "result"}.get(manifest.boundary)
        if hit and kill_at == f"before-{point}":
            _die(kill_at, kill_key or "")
        snap = real(manifest, chunks, **kw)
        emit("snapshot", **_snap_fields(snap))
        if hit and kill_at == f"after-{point}":
            _die(kill_at, kill_key or "")
        return snap

    setattr(store.repo, "commit", commit)


def agent(store: ckptfs.Store, run_id: str, service: PaymentService, *,
          kill_at: str | None = None, kill_invoice: str | None = None, reconcile: bool = True,
          barrier: str | None = None, timeout: float = CHARGE_TIMEOUT) -> int:
    """Plan, pay every invoice once, finish. Resumes the run if it exists."""
    kill_key = pay_key(run_id, kill_invoice) if kill_at and kill_invoice else None
    _instrument(store, kill_at, kill_key)
    if run_id in store.runs():
        run = store.resume(run_id)
        assert run.snapshot is not None
        emit("resumed", now_attempt=run.attempt, **_snap_fields(run.snapshot),
             in_doubt=[e.key for e in run.effects() if e.in_doubt])
    else:
        run = store.start_run(run_id, schema=("demo-agent", 1))
        emit("started", run=run_id)
    if barrier:
        _wait_at(Path(barrier))
    state: dict[str, Any] = dict(run.state) or {
        "plan": [f"pay {inv} ({amount} EUR)" for inv, amount in INVOICES] + ["report"],
        "paid": {}, "messages": [{"role": "user", "content": "Please pay my open invoices."}]}
    try:
        if run.snapshot is None:
            run.checkpoint(state, "step")
        for invoice, amount in INVOICES:
            if invoice in state["paid"]:
                continue
            key = pay_key(run_id, invoice)

            def charge(k: str, inv: str, amt: int, _key: str = key) -> dict[str, Any]:
                result = service.charge(k, inv, amt)
                emit("charged", key=k, **result)
                if kill_at == "in-fn" and kill_key == _key:
                    _die("in-fn", _key)
                return result

            prior = run.ledger.get(key)
            result = run.effect("payments.charge", charge, key, invoice, amount, key=key,
                                reconcile=_reconciler(service) if reconcile else None,
                                timeout=timeout, wait=True)
            emit("paid", key=key, invoice=invoice, charge_id=result["charge_id"],
                 how="replayed" if prior is not None and prior.status == "completed"
                 else "reconciled" if prior is not None and run.ledger.effects[key].via == "reconcile"
                 else "performed")
            state = {**state, "paid": {**state["paid"], invoice: result["charge_id"]},
                     "messages": state["messages"] + [
                         {"role": "tool", "content": f"charged {amount} EUR for {invoice}: "
                                                     f"{result['charge_id']}"}]}
            run.checkpoint(state, "step")
        run.checkpoint({**state, "plan": [], "done": True}, "final")
    except EffectInDoubt as e:
        emit("in-doubt", key=e.record.key, issued_by=e.record.issued_by)
        return EXIT_IN_DOUBT
    except ConflictError as e:
        emit("fenced", message=str(e))
        return EXIT_FENCED
    emit("done", paid=state["paid"])
    return 0


def _reconciler(service: PaymentService) -> Callable[[Effect], Any]:
    def reconcile(eff: Effect) -> Any:
        found = service.find(eff.key)
        emit("reconcile", key=eff.key, found=found)
        return NOT_DONE if found is None else found

    return reconcile


def _wait_at(barrier: Path) -> None:
    """Tell the test we are positioned, then wait until it lets every racer go at once."""
    (barrier / f"ready-{os.getpid()}").touch()
    while not (barrier / "go").exists():
        time.sleep(0.01)


def worker_main(argv: Sequence[str]) -> int:
    """``python -m ckptfs.cli demo --worker ...``: one process of the agent."""
    p = argparse.ArgumentParser(prog="ckptfs demo --worker")
    p.add_argument("--store", required=True)
    p.add_argument("--run", required=True)
    p.add_argument("--service-log", required=True)
    p.add_argument("--kill-at", choices=KILL_POINTS)
    p.add_argument("--kill-invoice", choices=[inv for inv, _ in INVOICES])
    p.add_argument("--no-reconcile", action="store_true")
    p.add_argument("--barrier")
    p.add_argument("--charge-timeout", type=float, default=CHARGE_TIMEOUT,
                   help="seconds a charge may run before another process may repeat it")
    a = p.parse_args(argv)
    with ckptfs.open_store(a.store) as store:
        return agent(store, a.run, PaymentService(a.service_log), kill_at=a.kill_at,
                     kill_invoice=a.kill_invoice, reconcile=not a.no_reconcile,
                     barrier=a.barrier, timeout=a.charge_timeout)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(worker_main(sys.argv[1:]))
