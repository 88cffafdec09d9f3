"""The tree's run budget on the root workflow (loader/engines/README.md, "Run budgets").

Workflow-side state (deterministic, no I/O; it may import only `wire` and `models.budget`): the
tree's one `RunBudget`, charged by every turn of the tree on any worker (signal `charges`, the
older updates `charge`/`charge_many`), and each charge source's last batch's answers, read by
query `charged`. The handlers are `RootHandlers`' (root_handlers.py); the check and count are `RunBudget.count`, the local engine's own code, with no
await between them, so the limits are exact across workers.

Invariant: a source has one batch in flight, so `answers[source]` holds only its last batch's
`[batch, refusals]`; it, the counts and `exhausted` are carried across continue-as-new.
"""

from __future__ import annotations

from typing import Any, cast

from dsh.loader.engines.wire import Carried, Charge, Charged
from dsh.loader.models.budget import RunBudget, RunLimits

__all__ = ["ChargeLedger"]


class ChargeLedger:
    """The root's `RunBudget` and the answers to each charge source's last batch."""

    def __init__(self, limits: RunLimits, carried: Carried) -> None:
        self.budget = RunBudget(limits)
        if carried.budget:
            self.budget.children, self.budget.requests, self.budget.tokens = carried.budget
            self.budget.exhausted = cast(Any, carried.exhausted)
        self.answers: dict[str, list[Any]] = dict(carried.charged)  # source -> [its last batch, the refusals]

    def count(self, charge: Charge) -> Charged:
        if charge.kind == "tokens":
            self.budget.tokens += charge.tokens
            return Charged()
        return Charged(refused=self.budget.count(charge.kind))

    def count_batch(self, source: str, batch: int, charges: list[Charge]) -> None:
        """A batch counted once: a batch older than the source's last is a repeat and ignored."""
        last = self.answers.get(source)
        if last is None or last[0] < batch:
            self.answers[source] = [batch, [self.count(c).refused for c in charges]]

    def answered(self, source: str, batch: int) -> list[Charged] | None:
        last = self.answers.get(source)
        if last is None or last[0] != batch:
            return None
        return [Charged(refused=r) for r in last[1]]

    def carry(self) -> dict[str, Any]:
        """The `Carried` fields of the budget."""
        b = self.budget
        return {"budget": [b.children, b.requests, b.tokens], "exhausted": b.exhausted, "charged": dict(self.answers)}
