"""How an agent workflow's run hands over or ends (loader/engines/README.md, "Continue-as-new",
"Failed child runs"): continuing as new between turns, a turn that failed for good, a root drained
before its run fails, a cancel by hand, the stall report and the notice to the parent. Workflow
code (deterministic, no I/O; it may import only `wire` and the other workflow-side modules).

`RunEnds` is a base class of `AgentWorkflow` holding these commands as plain methods (the
handlers they stand in for, `release`, are the workflow class's). Signals are named by their registered names (`settled`, `child_state`),
which is what history records, so a move here changes no command.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

from dsh.loader.engines.calls import chain, enter_leftovers, settle_failed
from dsh.loader.engines.patches import ORPHANS_PATCH
from dsh.loader.engines.pinning import Homes
from dsh.loader.engines.queue import PAGE_BYTES, DeliveryQueue
from dsh.loader.engines.residency import Residency
from dsh.loader.engines.residents import Residents
from dsh.loader.engines.wire import FailedRun, InterruptAt, Leftovers, TreeInput, TreeResult, TurnResult, agent_workflow_id

__all__ = ["RunEnds"]

_T = TypeVar("_T")


class RunEnds:
    """The agent workflow's hand-over and ending commands over its state (set by the subclass)."""

    _input: TreeInput
    _homes: Homes
    _queue: DeliveryQueue
    _residents: Residents
    _s: Residency

    def release(self) -> None:  # the workflow's signal handler
        raise NotImplementedError

    def _cancelled(self) -> None:
        """A cancel by hand (`temporal workflow cancel`): a child's is its disposal, as its parent's
        release (CANCEL_PATCH); a root's is a stop, as a local run's first SIGINT (ROOT_CANCEL_PATCH):
        the running turn is interrupted {kind: user}, every resident child released, no new turn."""
        if self._input.parent_id is not None:
            self.release()
            return
        if not self._s.releasing:
            self._s.stopped = True
            self._release()
            if self._s.running:
                self._s.interrupts.setdefault(self._s.ended, []).append(
                    InterruptAt(len(self._queue), {"kind": "user"}))

    async def _notice_out(self, result: TreeResult) -> None:
        """A child's epoch ends: its notice goes by signal only when the result cannot reach the run
        that started it (QUIET_SETTLE_PATCH; README "Continue-as-new"). The caller returns the
        result right after, so the check and the run's completion are one synchronous span: a
        `parent_moved` signal arriving meanwhile fails that completion, and the task that replays
        it applies the signal before the run resumes (the SDK applies signals before resolutions)."""
        # --- settle begin: whether the starting run is gone, read as the run returns, no await between ---
        if not self._input.quiet_settle or self._s.parent_moved or self._s.releasing:
            # A released child's parent may be gone too (terminated by hand: README "Failed child runs").
            await self._tell_parent(result)
        # --- settle end ---

    async def _tell_parent(self, result: TreeResult) -> None:
        """The notice to the parent's current run (it may have continued as new since it started
        this one, and a closed run's child result goes nowhere); the parent enters it once, by its
        notice id, whichever of this signal and the result comes first."""
        input = self._input
        assert input.parent_id is not None
        target = agent_workflow_id(input.run.root_id, input.parent_id)
        try:
            await workflow.get_external_workflow_handle(target).signal("settled", result)
        except Exception:  # the parent's run has ended: terminated by hand, or a pre-patch failure
            workflow.logger.warning("the parent %s of %s has no running workflow", target, input.session_id)
            if result.notice is not None and workflow.patched(ORPHANS_PATCH):
                # As the local teardown of that parent would have: the notice enters its log, unread.
                await enter_leftovers(Leftovers(home=input.run.home, session_id=input.parent_id,
                                                messages=[result.notice]), input.parent_queue)

    async def _drain(self) -> None:
        """A root whose turn failed for good: the local engine's end of a run with children
        resident (SPEC §8.12 `drain_descendants`): every resident child is released, child-first,
        and settles; its notice enters as an inject (§9.2 step 4). What the root never read (those
        notices, what the failed turn was handed) enters its log, unread, so nothing accepted is lost."""
        self._release()
        await workflow.wait_condition(lambda: not self._residents)
        await self._enter_unread(always=True)
        self._s.closing = True  # releases the board's long-polls of turns that have ended
        await workflow.wait_condition(workflow.all_handlers_finished)

    async def _enter_unread(self, *, always: bool = False) -> None:
        """What this closing agent never read (its released children's notices among them) enters
        its log, unread, as a closing local root's inbox takes them (activity `dsh.enter_leftovers`;
        `always`: also with nothing to enter, as the failed root's drain was recorded)."""
        who = self._input
        unread = [d.message for d in self._queue.pending()]
        if unread or always:
            await enter_leftovers(Leftovers(home=who.run.home, session_id=who.session_id, messages=unread),
                                  self._homes.queue())

    # -- continue-as-new (issue 12 item 2, "Not yet" item 3) --------------------------------
    async def _handover(self, runs: int, *, mid_turn: bool = False) -> None:
        """Continue as new once the handlers in flight have finished: `message_child` and the
        updates of the running turns (other agents' charges are signals; this agent's own turn,
        `mid_turn`, polls by query while its run moves) end by themselves; then the board's
        long-polls return what they have (their callers poll again, reaching the new run) and the
        run continues as new in that same workflow task."""
        s = self._s
        if s.anywhere:
            await workflow.wait_condition(lambda: s.calls == 0)
            s.handing_over = True
        await workflow.wait_condition(workflow.all_handlers_finished)
        while self._residents.untold() or (mid_turn and not s.turn_told):
            # Children started by this run return their result to it: told, they signal it instead
            # (and the turn's workflow, mid-turn, its outcome). A start the turn asked meanwhile
            # finishes before the run continues.
            if self._residents.untold():
                await self._residents.tell_moved()
            elif not await self._tell_turn():
                s.handing_over = False
                return  # the turn's workflow closed meanwhile: its outcome is here, no move
            await workflow.wait_condition(workflow.all_handlers_finished)
        # --- handover begin: every child with a handle told, and the run continued, no await between ---
        if not mid_turn and s.continue_due():
            workflow.continue_as_new(s.carry(runs, self._homes))
        elif mid_turn and s.outcome is None and s.acked is not None and s.move_due() and (
                self._queue.bytes_from(s.acked) <= PAGE_BYTES):
            workflow.continue_as_new(s.carry(runs, self._homes, s.moved_turn()))
        # --- handover end ---
        s.handing_over = False

    async def _tell_turn(self) -> bool:  # TurnRuns'
        raise NotImplementedError

    # -- a turn that does not return --------------------------------------------------------
    async def _shielded(self, turn: Awaitable[_T]) -> _T:
        """The turn, shielded from a cancel by hand: the cancel is this child's disposal, so the
        running turn hears it as its parent's (`release`: the interrupt {kind: parent} through its
        poll) and ends in its log; the activity is never cut off mid-write."""
        task = asyncio.ensure_future(turn)
        while True:
            try:
                return await asyncio.shield(task)
            except asyncio.CancelledError:
                self._cancelled()

    async def _failed_turn(self, exc: ActivityError | ApplicationError) -> TurnResult:
        """A child's turn failed for good (a worker refusing it, five failed attempts) while it has
        children resident: as the local engine's child whose turn ends `error`, it stays resident
        (it owns children), their notices reach it and wake its next turn. The failure is written
        as the turn's error end (`dsh.settle_failed`: once, the epoch's would-be notice); what the
        turn was handed stays pending for the next turn but wakes no one again, so a failure that
        persists costs one turn per later waking delivery, never a loop (README "Failed child runs")."""
        who = self._input
        settled = await settle_failed(FailedRun(home=who.run.home, child_id=who.session_id, epoch=who.epoch,
                                                failure=chain(exc)), self._homes.queue())
        self._queue.hush()
        return TurnResult(taken=0, stop_reason=settled.stop_reason, notice=settled.notice, parked=list(self._s.parked))

    # -- parking and release (SPEC §10.3, §17.2) -------------------------------------------
    async def _stall_report(self) -> None:
        assert self._input.parent_id is not None
        state = self._s.stall_state()
        self._s.told_stalled = state
        target = agent_workflow_id(self._input.run.root_id, self._input.parent_id)
        await workflow.get_external_workflow_handle(target).signal("child_state", state)

    def _release(self) -> None:
        """drain_descendants on Temporal: every resident child cancels, clearing its queue, and
        settles; the notices enter this closing agent as injects (§9.2 step 4)."""
        self._s.released = self._s.stall_state().parked
        self._s.releasing = True
        self._residents.release_all()
