"""An agent workflow's children: the resident-children table and the commands that reach them
(loader/engines/README.md, "Workflow code", "Stalls", "Continue-as-new"). Workflow code
(deterministic, no I/O; it may import only `wire`, `calls` and `patches`); the handlers stay on the workflow class, and
the commands name its workflow type and signals by their registered names (`dsh.agent`, `deliver`,
`release`), which is what history records.

Invariants:
- a child is resident from its start (or cold resume) until its result (the settlement notice) is
  entered, once, by its notice id (`entered`): it comes as signal `settled` and, to the run that
  started the child, as the child's result too;
- `tasks[child]` awaits the result of the run this run started (None: an earlier run started it;
  its notice comes by signal `settled` only);
- a stall report counts the parent's follow-ups its residency had received (`ChildState.seen`),
  and is kept only if that covers every follow-up delivered to it (`sent`): a report decided before
  the latest one arrived is stale and must not release the tree.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Iterator
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ChildWorkflowError, WorkflowAlreadyStartedError
from temporalio.workflow import ParentClosePolicy

from dsh.loader.engines.calls import await_closed, chain, settle_failed
from dsh.loader.engines.patches import ORPHANS_PATCH
from dsh.loader.engines.pinning import Homes
from dsh.loader.engines.queue import DeliveryQueue
from dsh.loader.engines.wire import (
    Carried, ChildRef, ChildState, Delivery, FailedRun, TreeInput, TreeResult, TurnResult, agent_workflow_id,
    child_workflow_id,
)

__all__ = ["Residents"]


class Residents:
    """The children resident now, those started or resumed, and what each last reported."""

    def __init__(self, input: TreeInput, carried: Carried, *, abandon: bool, homes: Homes) -> None:
        self._input = input
        self._homes = homes  # where each child's log lives (pinning.py)
        self._abandon = abandon  # HANDOVER_PATCH: children start ABANDON and may be restarted
        self._signals: set[asyncio.Task[None]] = set()  # release signals in flight
        self.tasks: dict[str, asyncio.Task[None] | None] = dict.fromkeys(carried.resident)
        self.entered: set[str] = set()  # notice ids entered by this run: a child's notice comes twice
        self.started: list[ChildRef] = list(carried.children)
        self.stalled: dict[str, ChildState] = {s.child_id: s for s in carried.stalled}  # what each last told
        self.sent: dict[str, int] = dict(carried.sent)  # follow-ups delivered to each residency

    def __contains__(self, child_id: object) -> bool:
        return child_id in self.tasks

    def __bool__(self) -> bool:
        return bool(self.tasks)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self.tasks))

    def add(self, child_id: str, descriptor: dict[str, Any], task: asyncio.Task[None],
            header: dict[str, Any] | None = None) -> None:
        if not any(c.child_id == child_id for c in self.started):
            self.started.append(ChildRef(child_id=child_id, descriptor=descriptor, header=header))
        self.tasks[child_id] = task

    def delivered(self, child_id: str) -> None:
        """A follow-up reached the child's residency."""
        # --- delivered begin: counted with the stale view dropped, no await between ---
        self.sent[child_id] = self.sent.get(child_id, 0) + 1
        self.stalled.pop(child_id, None)  # it has waking work now
        # --- delivered end ---

    def report(self, state: ChildState) -> None:
        """A resident child's stall report; a stale one is dropped (the follow-up wakes the child,
        and it reports again from there)."""
        stale = state.seen is not None and state.seen < self.sent.get(state.child_id, 0)
        if state.child_id in self.tasks and not stale:
            self.stalled[state.child_id] = state

    def enter(self, key: str) -> bool:
        """True the first time a notice id is seen by this run."""
        if key in self.entered:
            return False
        self.entered.add(key)
        return True

    def drop(self, child_id: str) -> None:
        """The child's notice has entered: it is resident no more."""
        self.stalled.pop(child_id, None)
        self.sent.pop(child_id, None)
        self.tasks.pop(child_id, None)

    def stalled_below(self) -> bool:
        """Every resident child reported itself stalled."""
        below = [self.stalled.get(c) for c in self.tasks]
        return all(s is not None and s.stalled for s in below)

    def parked_below(self) -> list[str]:
        return [p for c in self.tasks if (s := self.stalled.get(c)) is not None for p in s.parked]

    def carry(self) -> dict[str, Any]:
        """The `Carried` fields of the table."""
        return {"children": list(self.started), "resident": list(self.tasks), "sent": dict(self.sent),
                "stalled": list(self.stalled.values())}

    # -- commands ---------------------------------------------------------------------------
    async def start(self, child_id: str, descriptor: dict[str, Any], first: Delivery, depth: int, epoch: int,
                    on_result: Callable[[str, TreeResult], Awaitable[None]], header: dict[str, Any] | None = None) -> None:
        """Start the child's epoch `epoch` (pinned to its log's home when a run of this tree heard of
        it; its create activity finds one otherwise); returns once it started, its result awaited by a task
        that hands it to `on_result` (a failed run is settled from its log first)."""
        me = self._input
        run = me.run
        child = TreeInput(
            run=run, session_id=child_id, deliveries=[first],
            parent_id=me.session_id, depth=depth, descriptor=descriptor,
            epoch=epoch, cwd=me.cwd, ancestors=[*me.ancestors, me.session_id],
        )
        if self._homes.enabled:  # not in the input of a run recorded before HOMES_PATCH
            child = dataclasses.replace(child, home_queue=self._homes.of(child_id), header=header,
                                        known_homes=self._homes.known_for(child_id, epoch), parent_queue=self._homes.queue())
        # Epoch n of the child is run n under the same id: the default id reuse policy allows a
        # new run once the previous one has closed (a cold resume, SPEC §8.7). ABANDON: the child
        # lives on when this run continues as new (it signals its notice to the current run).
        for attempt in range(RESTART_TRIES):
            try:
                if not self._abandon:
                    handle = await workflow.start_child_workflow(
                        WORKFLOW_TYPE, child, id=child_workflow_id(run.root_id, child_id), task_queue=run.task_queue,
                        result_type=TreeResult)
                else:
                    handle = await workflow.start_child_workflow(
                        WORKFLOW_TYPE, child, id=child_workflow_id(run.root_id, child_id), task_queue=run.task_queue,
                        parent_close_policy=ParentClosePolicy.ABANDON, result_type=TreeResult)
                break
            except WorkflowAlreadyStartedError:
                # Its last run signalled its notice (so it is not resident) and is closing.
                if not self._abandon or attempt == RESTART_TRIES - 1:
                    raise
                await workflow.sleep(RESTART_WAIT)
        self.add(child_id, descriptor, asyncio.create_task(self._settled(child_id, handle, epoch, on_result)), header)

    async def _settled(self, child_id: str, handle: workflow.ChildWorkflowHandle[Any, TreeResult], epoch: int,
                       on_result: Callable[[str, TreeResult], Awaitable[None]]) -> None:
        try:
            result = await handle
        except ChildWorkflowError as exc:
            # Its run failed, so no turn returned its notice (README "Failed child runs"): the
            # epoch is settled `error` from its log, with the epoch's one notice id, once here.
            failed = FailedRun(home=self._input.run.home, child_id=child_id, epoch=epoch, failure=chain(exc))
            result = await settle_failed(failed, self._homes.of(child_id))
            if result.spawned and workflow.patched(ORPHANS_PATCH):
                # A run terminated by hand drained none of its children: release each that its
                # log names (a closed one ignores it); each notice enters that child's log.
                targets = [child_workflow_id(self._input.run.root_id, orphan) for orphan in result.spawned]
                for target in targets:
                    await self._release(target)
                await await_closed(targets)  # resident until they closed (their notices are in its log then)
        await on_result(child_id, result)

    async def deliver(self, child_id: str, delivery: Delivery) -> bool:
        """A follow-up to a resident child's run; False when that run has completed (its result
        is on the way: the manager's LOST)."""
        target = child_workflow_id(self._input.run.root_id, child_id)
        try:
            await workflow.get_external_workflow_handle(target).signal("deliver", delivery)
        except Exception:
            return False
        self.delivered(child_id)
        return True

    def release_all(self) -> None:
        """Signal `release` to every resident child (fire and forget: a closed run's notice is on
        its way anyway)."""
        for child_id in self:
            self._signals.add(asyncio.create_task(self._release(child_workflow_id(self._input.run.root_id, child_id))))

    async def _release(self, target: str) -> None:
        try:
            await workflow.get_external_workflow_handle(target).signal("release")
        except Exception:  # its run has completed meanwhile: its notice is on the way anyway
            workflow.logger.debug("release of %s found its run closed", target)


WORKFLOW_TYPE = "dsh.agent"
# A cold resume of a child whose last run signalled its notice but has not closed yet waits this
# long between start attempts (a workflow timer, deterministic), at most RESTART_TRIES times.
RESTART_WAIT = timedelta(milliseconds=200)
RESTART_TRIES = 50


async def to_parent(me: TreeInput, signal: str, arg: Any) -> None:
    """Signal `signal` (a handler of `dsh.agent`, by its registered name) to the parent's workflow,
    the run current now."""
    assert me.parent_id is not None
    await workflow.get_external_workflow_handle(agent_workflow_id(me.run.root_id, me.parent_id)).signal(signal, arg)


async def failed_turn(who: TreeInput, exc: BaseException, queue: DeliveryQueue, parked: list[str],
                      task_queue: str | None) -> TurnResult:
    """A child's turn failed for good (a worker refusing it, five failed attempts) while it has
    children resident: as the local engine's child whose turn ends `error`, it stays resident
    (it owns children), their notices reach it and wake its next turn. The failure is written
    as the turn's error end (`dsh.settle_failed`: once, the epoch's would-be notice); what the
    turn was handed stays pending for the next turn but wakes no one again, so a failure that
    persists costs one turn per later waking delivery, never a loop (README "Failed child runs")."""
    settled = await settle_failed(FailedRun(home=who.run.home, child_id=who.session_id, epoch=who.epoch,
                                            failure=chain(exc)), task_queue)
    queue.hush()
    return TurnResult(taken=0, stop_reason=settled.stop_reason, notice=settled.notice, parked=list(parked))
