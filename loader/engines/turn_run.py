"""A turn in a workflow of its own, so its agent's run may continue as new while it goes on
(loader/engines/README.md, "A turn across runs"). Workflow code (deterministic, no I/O; it may
import only `wire`, `calls` and the workflow-side modules).

A turn activity belongs to the run that scheduled it: the run cannot continue as new before the
activity returns, so one long turn (a root holding a fan-out of thousands, or the tree's model
requests charged to the root while it runs) met the run's 51,200 events. `dsh.turn_run` holds the
activity instead: the agent's run starts it as a child (`ABANDON`, so it outlives the run), and
continues as new mid-turn once the turn said its log holds what it took (`Poll.durable`). The
turn's result comes back as the child's result to the run that started it; once that run has
told it `agent_moved`, by signal `turn_ended` to the agent's workflow id, which reaches whichever
run is current (the same rule as a child's notice, `QUIET_SETTLE_PATCH`).

Invariant: `TurnOutcome.seq` names the turn, and the agent takes one outcome per turn
(`TurnRuns._heard`), whichever way it comes first.
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from dsh.loader.engines.calls import run_turn
    from dsh.loader.engines.wire import FailureLevel, TurnOutcome, TurnRunInput

__all__ = ["TURN_RUN_WORKFLOW", "TurnRunWorkflow", "failure_levels", "raise_failure"]

TURN_RUN_WORKFLOW = "dsh.turn_run"


@workflow.defn(name=TURN_RUN_WORKFLOW)
class TurnRunWorkflow:
    @workflow.init
    def __init__(self, input: TurnRunInput) -> None:
        self._moved = False

    @workflow.signal
    def agent_moved(self) -> None:
        """The agent's run that started this turn continues as new: the outcome goes by signal."""
        self._moved = True

    @workflow.run
    async def run(self, input: TurnRunInput) -> TurnOutcome:
        seq = input.turn.seq
        try:
            outcome = TurnOutcome(seq=seq, result=await run_turn(input.turn, input.task_queue))
        except ActivityError as exc:  # failed for good: the agent's run raises it as its own
            outcome = TurnOutcome(seq=seq, failure=failure_levels(exc))
        # --- outcome begin: whether the starting run is gone, read as the run returns, no await between ---
        if self._moved:
            try:
                await workflow.get_external_workflow_handle(input.agent_workflow).signal("turn_ended", outcome)
            except Exception:  # the agent's workflow has no running run: terminated by hand
                workflow.logger.warning("the agent %s of turn %d has no running workflow", input.agent_workflow, seq)
        # --- outcome end ---
        return outcome


def failure_levels(exc: BaseException | None) -> list[FailureLevel]:
    """A failure's chain as history keeps it, outermost first (`calls.chain` reads the same)."""
    levels: list[FailureLevel] = []
    while exc is not None:
        levels.append(FailureLevel(str(getattr(exc, "message", "") or type(exc).__name__), getattr(exc, "type", None)))
        exc = exc.__cause__
    return levels


def raise_failure(levels: list[FailureLevel]) -> None:
    """Raise the chain again as the agent's run's own failure: the same `calls.chain` text, and the
    typed level (a worker's `MISSING_API_KEY`) still found by the client (`client._config_failure`)."""
    error: ApplicationError | None = None
    for level in reversed(levels):
        outer = ApplicationError(level.message, type=level.type, non_retryable=True)
        outer.__cause__ = error
        error = outer
    raise error if error is not None else ApplicationError("the turn's workflow failed", non_retryable=True)

