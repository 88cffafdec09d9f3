"""An agent's turn in a workflow of its own, and its run continuing as new while the turn goes on
(loader/engines/README.md, "A turn across runs"; turn_run.py holds the turn's workflow). Workflow
code (deterministic, no I/O; it may import only `wire` and the other workflow-side modules).

`TurnRuns` is a base class of `AgentWorkflow` (plain methods; the handlers `turn_ended` and the
polls stay on the workflow class, which the SDK requires).

The move, in order:
1. `Residency.move_due`: the run's history or updates reached the run's limits mid-turn;
2. `moving`: the turn's held poll is answered `moved`; the turn flushes its log and says so by
   an update poll (`Poll.durable`), whose `after` is `acked`: every delivery before it is in the
   turn's log, so the new run need not carry them (a fan-out root's turn may have taken thousands);
3. the hand-over of any run (`RunEnds._handover`): the children told, and the turn's workflow told
   `agent_moved` (it signals its outcome to the workflow id from then on);
4. in one synchronous span: no outcome yet, still due, so the run continues as new with the turn
   in flight (`Carried.turn`); the new run starts with that turn running, its polls answered there.
A turn that ends meanwhile, a release, a stop or a cancel by hand calls the move off.
"""

from __future__ import annotations

import asyncio
from temporalio import workflow
from temporalio.exceptions import ChildWorkflowError
from temporalio.workflow import ChildWorkflowHandle, ParentClosePolicy

from dsh.loader.engines.calls import first_closed
from dsh.loader.engines.endings import RunEnds
from dsh.loader.engines.patches import MOVED_TURN_PATCH, TURN_RUN_PATCH
from dsh.loader.engines.turn_run import TURN_RUN_WORKFLOW, failure_levels, raise_failure
from dsh.loader.engines.wire import Carried, FailureLevel, TurnInput, TurnOutcome, TurnResult, TurnRunInput

__all__ = ["TurnRuns"]

class TurnRuns(RunEnds):
    """The agent workflow's turns in workflows of their own (`temporal.turnWorkflows`)."""

    def _by_run(self) -> bool:
        """This agent's turns run in a workflow of their own: the root's (`root`, the default: the
        tree's charges and a fan-out's notices land in its history), every agent's (`all`), or none.
        (A run started before the key says `none`: `RunSpec.turn_workflows`'s default.)"""
        policy = self._input.run.turn_workflows
        wanted = policy == "all" or (policy == "root" and self._input.parent_id is None)
        return wanted and workflow.patched(TURN_RUN_PATCH)

    async def _turn_in_run(self, spec: TurnInput, *, movable: bool) -> TurnResult:
        info = workflow.info()
        s = self._s
        s.turn_id = f"{info.workflow_id}#turn-{info.run_id}-{spec.seq}"
        s.turn_told, s.turn_offset, s.polled, s.outcome, s.movable = False, spec.offset, spec.offset, None, movable
        spec.own_workflow = True  # one of this run's pending children: one agent child fewer runs meanwhile
        self._residents.reserved += 1
        start = workflow.start_child_workflow(
            TURN_RUN_WORKFLOW, TurnRunInput(turn=spec, agent_workflow=info.workflow_id, task_queue=self._homes.queue()),
            id=s.turn_id, result_type=TurnOutcome, parent_close_policy=ParentClosePolicy.ABANDON)
        try:
            handle: ChildWorkflowHandle[object, TurnOutcome] = await self._shielded(start)  # a cancel: `_cancelled`
        except BaseException:
            self._residents.reserved -= 1
            raise
        # Not cancelled once the outcome came by signal: a cancel of this task would reach the
        # turn's workflow; its result, a duplicate then, is dropped by `_heard`.
        self._hearing = asyncio.ensure_future(self._hear(handle, spec.seq))
        return await self._turn_outcome()

    async def _moved_outcome(self) -> TurnResult:
        """The turn this run began in (`Carried.turn`): its outcome comes by signal; its workflow is
        watched meanwhile, as a child without a handle is (MOVED_TURN_PATCH)."""
        if workflow.patched(MOVED_TURN_PATCH):
            assert self._s.turn_id is not None
            self._hearing = asyncio.ensure_future(self._watch_turn(self._s.turn_id, self._s.turn_seq))
        return await self._turn_outcome()

    async def _watch_turn(self, turn_id: str, seq: int) -> None:
        """A turn's workflow that closed completed signalled its outcome before it returned; one
        closed otherwise (terminated by hand, timed out) sent none: a failed turn, as `_hear` hears
        it from a handle."""
        closed = await first_closed([turn_id])
        if closed.workflow_id is not None:
            workflow.logger.warning("the turn workflow %s closed %s with no outcome", turn_id, closed.status)
            self._heard(TurnOutcome(seq=seq, failure=[FailureLevel(f"Child Workflow execution {closed.status}", None)]))

    async def _turn_outcome(self) -> TurnResult:
        """The running turn's result, moving the run mid-turn while it is due; the turn never
        hears a cancel by hand as a cut-off (its poll carries it, as `_shielded` does)."""
        s = self._s
        while True:
            try:
                await workflow.wait_condition(lambda: s.outcome is not None or s.move_due())
                if s.outcome is None:
                    await self._move()  # continues as new, or returns: the turn ended, or the move is off
                    continue
            except asyncio.CancelledError:
                self._cancelled()
                continue
            break
        outcome, s.outcome = s.outcome, None
        if outcome.failure:
            raise_failure(outcome.failure)
        assert outcome.result is not None
        return outcome.result

    async def _move(self) -> None:
        s = self._s
        s.moving, s.acked = True, None
        try:
            await workflow.wait_condition(lambda: s.outcome is not None or s.acked is not None or not s.move_due())
            if s.outcome is None and s.acked is not None:
                await self._handover((self._input.carried or Carried()).runs, mid_turn=True)
        finally:
            s.moving, s.acked = False, None

    async def _tell_turn(self) -> bool:
        """The turn's workflow is told that this run continues as new; False: it has closed, its
        outcome on the way here as its result (awaited before the run may continue)."""
        s = self._s
        if s.turn_told:
            return True
        assert s.turn_id is not None
        s.turn_told = True
        try:
            await workflow.get_external_workflow_handle(s.turn_id).signal("agent_moved")
        except asyncio.CancelledError:
            raise
        except Exception:
            await workflow.wait_condition(lambda: s.outcome is not None)
            return False
        return True

    async def _hear(self, handle: ChildWorkflowHandle[object, TurnOutcome], seq: int) -> None:
        try:
            outcome = await handle
        except ChildWorkflowError as exc:  # its workflow failed or was ended by hand: a failed turn
            outcome = TurnOutcome(seq=seq, failure=failure_levels(exc))
        finally:
            self._residents.reserved -= 1  # closed: no longer one of this run's pending children
        self._heard(outcome)

    def _heard(self, outcome: TurnOutcome) -> None:
        """One outcome per turn: as the child's result and, once told, by signal, whichever first."""
        s = self._s
        if s.running and s.outcome is None and outcome.seq == s.turn_seq:
            s.outcome = outcome
