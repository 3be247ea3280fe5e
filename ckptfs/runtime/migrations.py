"""State schema migrations: plain functions that take a restored state from version n to n + 1.

The application's state schema (a name and an integer version in every manifest) is separate
from the format version. A ``Migrations`` registry holds one step per (schema name, version);
``plan`` finds the chain from a snapshot's schema to the code's current one, or raises
``SchemaError`` naming the versions, before anything is read or run (spec/migrations.md).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import attrs

from ckptfs.errors import InvalidName, MigrationError, SchemaError
from ckptfs.format.models import Schema
from ckptfs.format.names import DECIMAL, MAX_U64

#: A step: takes the state (entry name -> value) of version n, returns the state of version n+1.
StateStep = Callable[[dict[str, Any]], dict[str, Any]]
#: A ledger hook: takes (effect name, recorded result) of version n, returns the result for n+1.
LedgerStep = Callable[[str, Any], Any]
F = TypeVar("F", bound=StateStep)


@attrs.frozen
class Step:
    """One registered migration: ``name`` from ``version`` to ``version + 1``."""

    name: str
    version: int
    state: StateStep
    ledger_results: LedgerStep | None = None

    @property
    def label(self) -> str:
        """How errors and reports name the step, e.g. ``agent@1->2 (myapp.split_plan)``."""
        fn = getattr(self.state, "__qualname__", None) or repr(self.state)
        mod = getattr(self.state, "__module__", None)
        return f"{self.name}@{self.version}->{self.version + 1} ({mod + '.' if mod else ''}{fn})"


def as_schema(schema: Schema | tuple[str, int] | str) -> Schema:
    """A Schema from a Schema, a ``(name, version)`` tuple or the text ``name@version``."""
    if isinstance(schema, Schema):
        return schema
    if isinstance(schema, str):
        name, sep, ver = schema.rpartition("@")
        if not sep or not name or not DECIMAL.match(ver) or int(ver) > MAX_U64:
            raise InvalidName(f"schema must look like NAME@VERSION with VERSION a decimal number "
                              f"(ASCII digits, e.g. agent@3), got {schema!r:.200}")
        return Schema(name, int(ver))
    name, version = schema
    if not isinstance(name, str) or not name or type(version) is not int or version < 0:
        raise ValueError(f"schema must be (name: str, version: int >= 0), got {schema!r}")
    return Schema(name, version)


class Migrations:
    """A registry of state migrations, one step per (schema name, from-version).

    ::

        migrations = ckptfs.Migrations()

        @migrations.register("agent", 1)          # agent@1 -> agent@2
        def split_plan(state):
            state["steps"] = state.pop("plan")["steps"]
            return state
    """

    def __init__(self, steps: Iterable[Step] = ()) -> None:
        self._steps: dict[tuple[str, int], Step] = {}
        for s in steps:
            self.add(s.name, s.version, s.state, ledger_results=s.ledger_results)

    def register(self, name: str, version: int, *,
                 ledger_results: LedgerStep | None = None) -> Callable[[F], F]:
        """Decorator: register ``fn(state) -> state`` as the step ``name@version -> version+1``.

        ``ledger_results(effect_name, result) -> result`` reshapes the recorded results of
        completed effects in the same step (effect names are never migrated).
        """
        def deco(fn: F) -> F:
            self.add(name, version, fn, ledger_results=ledger_results)
            return fn

        return deco

    def add(self, name: str, version: int, fn: StateStep, *,
            ledger_results: LedgerStep | None = None) -> Step:
        """Register a step without a decorator; a second step for the same version is an error."""
        as_schema((name, version))
        if not callable(fn) or (ledger_results is not None and not callable(ledger_results)):
            raise TypeError("a migration step and its ledger_results hook must be callables")
        if (name, version) in self._steps:
            raise ValueError(f"a migration {name}@{version}->{version + 1} is already registered "
                             f"({self._steps[name, version].label})")
        step = Step(name, version, fn, ledger_results)
        self._steps[name, version] = step
        return step

    def steps(self, name: str) -> list[Step]:
        """The steps registered for schema ``name``, by version."""
        return sorted((s for (n, _), s in self._steps.items() if n == name),
                      key=lambda s: s.version)

    def plan(self, source: Schema, target: Schema, *, what: str = "snapshot") -> list[Step]:
        """The steps from ``source`` to ``target``; SchemaError if there is no such chain."""
        if source.name != target.name:
            raise SchemaError(
                f"{what} has state schema {source}, but this code expects {target}: a different "
                "schema name. Resume it with code for that schema, or register it under the "
                "right name.")
        if source.version > target.version:
            raise SchemaError(
                f"{what} has state schema {source}, newer than the {target} this code knows. "
                "It was written by a later deploy; run code that knows "
                f"{source.name}@{source.version} (migrations never go backwards).")
        chain = []
        missing = []
        for v in range(source.version, target.version):
            step = self._steps.get((source.name, v))
            if step is None:
                missing.append(f"{source.name}@{v}->{v + 1}")
            else:
                chain.append(step)
        if missing:
            have = ", ".join(f"{s.version}->{s.version + 1}" for s in self.steps(source.name))
            raise SchemaError(
                f"{what} has state schema {source}; this code expects {target}, but the "
                f"migration chain has a gap: no step {', '.join(missing)} is registered "
                f"(registered for {source.name!r}: {have or 'none'}). Register the missing "
                "step(s) with @migrations.register(name, version).")
        return chain

    def migrate(self, state: dict[str, Any], source: Schema, target: Schema, *,
                what: str = "snapshot") -> dict[str, Any]:
        """``state`` of schema ``source`` brought to ``target`` (plan, then apply)."""
        return apply_steps(self.plan(source, target, what=what), state, what=what)

    def __len__(self) -> int:
        return len(self._steps)

    def __repr__(self) -> str:
        return f"<ckptfs.Migrations {sorted(f'{n}@{v}' for n, v in self._steps)}>"


def apply_steps(chain: list[Step], state: dict[str, Any], *, what: str = "snapshot") -> dict[str, Any]:
    """Run ``chain`` over ``state`` in order; a step that raises gives MigrationError."""
    for step in chain:
        try:
            out = step.state(state)
        except Exception as e:
            raise MigrationError(
                f"migrating {what}: step {step.label} raised {type(e).__name__}: {e}. "
                "Fix the migration (the store is unchanged).") from e
        if not isinstance(out, dict):
            raise MigrationError(
                f"migrating {what}: step {step.label} returned {type(out).__name__}, not "
                "the new state dict; a step must return the state it produced.")
        state = out
    return state


def apply_to_result(chain: list[Step], effect: str, result: Any, *, what: str = "snapshot") -> Any:
    """Run the ``ledger_results`` hooks of ``chain`` over one completed effect's result."""
    for step in chain:
        if step.ledger_results is None:
            continue
        try:
            result = step.ledger_results(effect, result)
        except Exception as e:
            raise MigrationError(
                f"migrating {what}: the ledger_results hook of step {step.label} raised "
                f"{type(e).__name__} on the result of effect {effect!r}: {e}. Fix the "
                "migration (the store is unchanged).") from e
    return result
