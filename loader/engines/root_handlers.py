"""The root's tree-wide handlers (loader/engines/README.md, "Fences across processes: the board",
"Run budgets"): the fence board every turn of the tree publishes to and long-polls, and the tree's
run budget every turn charges. Workflow code (deterministic, no I/O).

`RootHandlers` is a base class of `AgentWorkflow`: the SDK collects the handlers of its base
classes too (`inspect.getmembers`), under the same registered names, so a handler moved here
changes no command and no name in history (tests/temporal/test_replay.py).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, ParamSpec, TypeVar, cast

from temporalio import workflow
from temporalio.exceptions import ApplicationError

from dsh.loader.engines.board import FenceBoard
from dsh.loader.engines.ledger import ChargeLedger
from dsh.loader.engines.mid_turn import TurnRuns
from dsh.loader.engines.wire import BOARD_SPENT, BoardView, Charge, Charged

__all__ = ["RootHandlers", "long_poll"]

_P = ParamSpec("_P")
_R = TypeVar("_R")


def long_poll(fn: Callable[_P, Awaitable[_R]]) -> workflow.UpdateMethodMultiParam[_P, _R]:
    """`@workflow.update` for a long-poll: one still open when the run ends is abandoned (it does
    no work, and its caller reads the close: a mirror ends, an ended turn has given its poll up),
    not the SDK's `UnfinishedUpdateHandlersWarning`. No command changes. Typed as the bare
    decorator types it: the SDK's keyword form types an async handler's result as its coroutine."""
    return cast("workflow.UpdateMethodMultiParam[_P, _R]",
                workflow.update(unfinished_policy=workflow.HandlerUnfinishedPolicy.ABANDON)(fn))


class RootHandlers(TurnRuns):
    """The board's and the budget's handlers over their state (set by the subclass)."""

    _board: FenceBoard
    _ledger: ChargeLedger

    # -- the fence board (root; board.py) ---------------------------------------------------
    @workflow.signal
    def fence_facts(self, facts: list[list[Any]], source: str | None = None) -> None:
        """A turn anywhere in the tree (`source`; None: a workflow) recorded these fence facts
        (root workflow only)."""
        self._board.add(facts, source)

    @long_poll
    async def fence_facts_after(self, after: int, source: str | None = None) -> list[list[Any]]:
        """A turn's long-poll of the board: the facts past `after`, or [] once the tree closes.
        It answers once a fact past `after` comes from elsewhere than the polling turn
        (`source`; Temporal allows 2,000 updates per run; issue 12 item 7). A run about to
        continue as new answers what it has (maybe nothing): the turn polls again, the next run."""
        self._s.updates += 1
        await workflow.wait_condition(lambda: self._s.closing or self._s.handing_over or self._board.news_for(after, source))
        return self._board.facts[after:]

    @fence_facts_after.validator
    def _board_not_spent(self, after: int, source: str | None = None) -> None:
        """Refused once the run has taken `temporal.continueAsNewUpdates` updates: a refused update
        is not one of the run's (the server's cap counts only accepted ones) and leaves no event,
        so the board's pollers read by query (`fence_board_since`) and leave the rest of the cap
        to child starts and messages. A validator is not run on replay: no command changes."""
        if self._s.updates >= self._input.run.continue_as_new_updates:
            raise ApplicationError("this run's updates are spent: read the board by query", type=BOARD_SPENT)

    @workflow.query
    def fence_board_since(self, after: int) -> BoardView:
        """The board past `after`, and whether this run's updates are spent (a query adds nothing
        to history: a mirror asks it before each long-poll, and in its place once spent or refused)."""
        return BoardView(facts=self._board.facts[after:],
                         spent=self._s.updates >= self._input.run.continue_as_new_updates)

    # -- the tree's run budget (root; ledger.py) --------------------------------------------
    @workflow.update
    def charge(self, charge: Charge) -> Charged:
        """One charge of a turn (runs before signal `charges`; kept so their histories replay)."""
        self._s.updates += 1
        return self._ledger.count(charge)

    @workflow.update
    def charge_many(self, charges: list[Charge]) -> list[Charged]:
        """Charges batched by a worker process, each counted in order as `charge` counts it (runs
        before signal `charges`; kept so their histories replay)."""
        self._s.updates += 1
        return [self._ledger.count(c) for c in charges]

    @workflow.signal
    def charges(self, source: str, batch: int, charges: list[Charge]) -> None:
        """Charges of several turns, batched by their worker process (`worker._charges`), each
        counted in order as `charge` counts it; the answers are read by query `charged`. A signal,
        not an update: a server caps a run's updates, and a tree's charges are one per model
        request and spawn (2,000 requests by default)."""
        self._ledger.count_batch(source, batch, charges)

    @workflow.query
    def charged(self, source: str, batch: int) -> list[Charged] | None:
        """The answers to `source`'s batch `batch` of `charges`, None before it is counted."""
        return self._ledger.answered(source, batch)

    @workflow.signal
    def spent(self, tokens: int) -> None:
        """A reply's tokens, charged to the tree's budget (root only; no answer, so a signal)."""
        self._ledger.budget.tokens += tokens
