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
  its notice comes by signal `settled` only, and a run of it that closes without one, terminated
  by hand, is heard by the watcher: `watch`, one `dsh.first_closed` activity at a time);
- `heard` holds the children whose notice entered this run: a child is settled by the watcher
  only while it is resident and not heard, so a notice that came by signal is never doubled;
- a stall report counts the parent's follow-ups its residency had received (`ChildState.seen`),
  and is kept only if that covers every follow-up delivered to it (`sent`): a report decided before
  the latest one arrived is stale and must not release the tree.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
from collections.abc import Awaitable, Callable, Iterator
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ChildWorkflowError, WorkflowAlreadyStartedError
from temporalio.workflow import ParentClosePolicy

from dsh.loader.engines.calls import await_closed, chain, first_closed, settle_failed
from dsh.loader.engines.patches import (
    ORPHANS_PATCH, QUIET_SETTLE_PATCH, RESIDENT_LIMIT_PATCH, RUNNING_LIMIT_PATCH, WATCH_PATCH,
)
from dsh.loader.engines.pinning import Homes
from dsh.loader.engines.queue import DeliveryQueue
from dsh.loader.engines.wire import (
    Carried, ChildRef, ChildState, Delivery, FailedRun, TreeInput, TreeResult, TurnResult, agent_workflow_id,
    child_workflow_id, task_timeout,
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
        # Started or resumed by this run, after the resident ones an earlier run carried, in order
        # (a dict: `add` in O(1), a fan-out adds thousands); only the resident ones are carried.
        self._refs: dict[str, ChildRef] = {c.child_id: c for c in carried.children}
        self.stalled: dict[str, ChildState] = {s.child_id: s for s in carried.stalled}  # what each last told
        self.sent: dict[str, int] = dict(carried.sent)  # follow-ups delivered to each residency
        self.epochs: dict[str, int] = dict(carried.epochs)  # resident child -> its run's epoch
        self.heard: set[str] = set()  # children whose notice entered this run
        self.settling = False  # the watcher settles a child now: the run does not continue as new
        self.running = 0  # this run's child runs started and not closed (`temporal.maxRunningChildren`)
        # Resident children an earlier run started (no handle here; RESIDENT_LIMIT_PATCH): they run
        # too, and each is carried on while it does.
        self.carried_open = len(self.tasks)
        # Pending children of this run that are not agents: its turn in a workflow of its own
        # (mid_turn.py), which the server's pending-children limit counts as well.
        self.reserved = 0
        self.told: set[str] = set()  # children with a handle here told this run continues as new
        self._quiet: bool | None = None  # QUIET_SETTLE_PATCH, asked at this run's first child start
        self._watcher: asyncio.Task[None] | None = None

    def __contains__(self, child_id: object) -> bool:
        return child_id in self.tasks

    def __bool__(self) -> bool:
        return bool(self.tasks)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self.tasks))

    def add(self, child_id: str, descriptor: dict[str, Any], task: asyncio.Task[None],
            header: dict[str, Any] | None = None) -> None:
        if child_id not in self._refs:
            self._refs[child_id] = ChildRef(child_id=child_id, descriptor=descriptor, header=header)
        self.tasks[child_id] = task
        self.told.discard(child_id)  # a new epoch's run knows nothing of this run's moves

    def open(self) -> int:
        """The agent's child runs open now: this run's, and the resident ones an earlier run started."""
        return self.running + self.carried_open

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

    def enter(self, key: str, child_id: str) -> bool:
        """True the first time a notice id is seen by this run (`child_id`'s)."""
        self.heard.add(child_id)
        if key in self.entered:
            return False
        self.entered.add(key)
        return True

    def drop(self, child_id: str) -> None:
        """The child's notice has entered: it is resident no more."""
        self.stalled.pop(child_id, None)
        self.sent.pop(child_id, None)
        self.epochs.pop(child_id, None)
        if child_id in self.tasks and self.tasks.pop(child_id) is None:
            self.carried_open -= 1

    def stalled_below(self) -> bool:
        """Every resident child reported itself stalled."""
        below = [self.stalled.get(c) for c in self.tasks]
        return all(s is not None and s.stalled for s in below)

    def parked_below(self) -> list[str]:
        return [p for c in self.tasks if (s := self.stalled.get(c)) is not None for p in s.parked]

    def started(self, start: int = 0, count: int | None = None) -> list[ChildRef]:
        """The children this run knows, in order: the resident ones carried, then its own."""
        return list(itertools.islice(self._refs.values(), start, None if count is None else start + count))

    def resident_refs(self) -> list[ChildRef]:
        """The resident children's refs: what a turn and the next run are handed, bounded by what
        runs at once (`temporal.maxRunningChildren`), not by every child ever started."""
        return [ref for c in self.tasks if (ref := self._refs.get(c)) is not None]

    def carry(self) -> dict[str, Any]:
        """The `Carried` fields of the table."""
        return {"children": self.resident_refs(), "resident": list(self.tasks), "sent": dict(self.sent),
                "stalled": list(self.stalled.values()), "epochs": dict(self.epochs)}

    def untold(self) -> list[str]:
        """The resident children this run started or resumed (it holds their handle) not yet told
        that it continues as new: their result would reach no one."""
        if not self._quiet:  # children started before the patch signal their notice anyway
            return []
        return [c for c, task in self.tasks.items() if task is not None and c not in self.told]

    async def tell_moved(self) -> None:
        """Before this run continues as new (QUIET_SETTLE_PATCH): each child it holds a handle to
        is told (signal `parent_moved`), so it signals its notice to the workflow id. A child whose
        run has already closed cannot be told, and its result comes to this run, which is still
        open: it is awaited here, so its notice enters before the run continues."""
        root = self._input.run.root_id
        children = self.untold()
        self.told.update(children)
        outcomes = await asyncio.gather(
            *(workflow.get_external_workflow_handle(child_workflow_id(root, c)).signal("parent_moved") for c in children),
            return_exceptions=True)
        for child_id, outcome in zip(children, outcomes, strict=True):
            if isinstance(outcome, asyncio.CancelledError):
                raise outcome
            task = self.tasks.get(child_id)
            if isinstance(outcome, BaseException) and task is not None:
                await task  # closed, its result on the way here: entered, then it is resident no more

    def handleless(self) -> list[str]:
        """The resident children no handle of this run awaits (an earlier run started them) whose
        notice has not entered: only the watcher hears a run of theirs that closes without one."""
        return [c for c, task in self.tasks.items() if task is None and c not in self.heard]

    # -- commands ---------------------------------------------------------------------------
    async def start(self, child_id: str, descriptor: dict[str, Any], first: Delivery, depth: int, epoch: int,
                    on_result: Callable[[str, TreeResult], Awaitable[None]], header: dict[str, Any] | None = None) -> bool:
        """Start the child's epoch `epoch` (pinned to its log's home when a run of this tree heard of
        it; its create activity finds one otherwise); returns once it started, its result awaited by a task
        that hands it to `on_result` (a failed run is settled from its log first). False, with no
        command sent, when this run already runs `temporal.maxRunningChildren` children: past the
        server's pending-children limit the start command is refused and the run stalls for good."""
        me = self._input
        run = me.run
        # --- admit begin: the limit checked and the start counted, no await between ---
        if self.running + self.reserved >= run.max_running_children and workflow.patched(RUNNING_LIMIT_PATCH):
            return False
        if self.open() + self.reserved >= run.max_running_children and workflow.patched(RESIDENT_LIMIT_PATCH):
            return False
        self.running += 1
        # --- admit end ---
        try:
            handle = await self._start_run(child_id, descriptor, first, depth, epoch, header)
        except BaseException:
            self.running -= 1
            raise
        if self._abandon:
            self.epochs[child_id] = epoch  # carried: a later run may have to settle it without a handle
        self.add(child_id, descriptor, asyncio.create_task(self._settled(child_id, handle, epoch, on_result)), header)
        return True

    async def _start_run(self, child_id: str, descriptor: dict[str, Any], first: Delivery, depth: int, epoch: int,
                         header: dict[str, Any] | None) -> workflow.ChildWorkflowHandle[Any, TreeResult]:
        me = self._input
        run = me.run
        if self._abandon and self._quiet is None:
            self._quiet = workflow.patched(QUIET_SETTLE_PATCH)
        child = TreeInput(
            run=run, session_id=child_id, deliveries=[first],
            parent_id=me.session_id, depth=depth, descriptor=descriptor,
            epoch=epoch, cwd=me.cwd, ancestors=[*me.ancestors, me.session_id], quiet_settle=bool(self._quiet),
        )
        if self._homes.enabled:  # not in the input of a run recorded before HOMES_PATCH
            child = dataclasses.replace(child, home_queue=self._homes.of(child_id), header=header,
                                        claimed=self._homes.claimed_child(child_id),
                                        known_homes=self._homes.known_for(child_id, epoch), parent_queue=self._homes.queue())
        # Epoch n of the child is run n under the same id: the default id reuse policy allows a
        # new run once the previous one has closed (a cold resume, SPEC §8.7). ABANDON: the child
        # lives on when this run continues as new (it signals its notice to the current run).
        for attempt in range(RESTART_TRIES):
            try:
                if not self._abandon:
                    handle = await workflow.start_child_workflow(
                        WORKFLOW_TYPE, child, id=child_workflow_id(run.root_id, child_id), task_queue=run.task_queue,
                        task_timeout=task_timeout(run), result_type=TreeResult)
                else:
                    handle = await workflow.start_child_workflow(
                        WORKFLOW_TYPE, child, id=child_workflow_id(run.root_id, child_id), task_queue=run.task_queue,
                        task_timeout=task_timeout(run), parent_close_policy=ParentClosePolicy.ABANDON,
                        result_type=TreeResult)
                break
            except WorkflowAlreadyStartedError:
                # Its last run signalled its notice (so it is not resident) and is closing.
                if not self._abandon or attempt == RESTART_TRIES - 1:
                    raise
                await workflow.sleep(RESTART_WAIT)
        return handle

    async def _settled(self, child_id: str, handle: workflow.ChildWorkflowHandle[Any, TreeResult], epoch: int,
                       on_result: Callable[[str, TreeResult], Awaitable[None]]) -> None:
        try:
            result = await handle
        except ChildWorkflowError as exc:
            self.running -= 1  # closed
            # Its run failed, so no turn returned its notice (README "Failed child runs"): the
            # epoch is settled `error` from its log, with the epoch's one notice id, once here.
            result = await self._settle_failed(child_id, epoch, chain(exc))
        else:
            self.running -= 1
        await on_result(child_id, result)

    async def _settle_failed(self, child_id: str, epoch: int | None, failure: str) -> TreeResult:
        """A child's run that ended without its notice, settled from its log (`dsh.settle_failed`);
        the children its log names are released and the child stays resident until they closed."""
        failed = FailedRun(home=self._input.run.home, child_id=child_id, epoch=epoch, failure=failure)
        result = await settle_failed(failed, self._homes.of(child_id))
        if result.spawned and workflow.patched(ORPHANS_PATCH):
            # A run terminated by hand drained none of its children: release each that its
            # log names (a closed one ignores it); each notice enters that child's log.
            targets = [child_workflow_id(self._input.run.root_id, orphan) for orphan in result.spawned]
            for target in targets:
                await self._release(target)
            await await_closed(targets)  # resident until they closed (their notices are in its log then)
        return result

    # -- the watcher of the children without a handle (WATCH_PATCH) -------------------------
    def watch(self, on_result: Callable[[str, TreeResult], Awaitable[None]]) -> None:
        """At the run's start: with resident children that no handle of this run awaits (it
        continued as new since it started them), watch them (README "Failed child runs")."""
        if self.handleless() and workflow.patched(WATCH_PATCH):
            self._watcher = asyncio.create_task(self._watch(on_result))

    def stop_watching(self) -> None:
        """The run ends: a watcher still waiting (on a child whose notice entered, not closed
        yet) is cancelled. One abandoned by a continue-as-new is cancelled at its next heartbeat
        (its run is gone), and the next run watches from its own start."""
        if self._watcher is not None and not self._watcher.done():
            self._watcher.cancel()

    async def _watch(self, on_result: Callable[[str, TreeResult], Awaitable[None]]) -> None:
        """One `dsh.first_closed` at a time over the children without a handle, started again
        only when it answered: the set only shrinks within a run (a child this run starts or
        resumes has a handle), and one whose notice entered closes right after it, so the
        activity watching it on costs nothing. The child answered is settled as a terminated
        child with a handle is, unless its notice entered meanwhile (it signals its notice before
        its run returns, so a notice is in this run's history before its close is)."""
        root = self._input.run.root_id
        while orphans := self.handleless():
            ids = {child_workflow_id(root, c): c for c in orphans}
            closed = await first_closed(list(ids))
            if closed.workflow_id is None:
                # Every one completed, so each signalled its notice first: nothing left to hear.
                await workflow.wait_condition(lambda: not self.handleless())
                return
            child_id = ids[closed.workflow_id]
            if child_id not in self.handleless():
                continue  # its notice entered: a failed run settles itself and tells its parent
            workflow.logger.warning("the run of %s closed %s with no notice; settling it", child_id, closed.status)
            self.settling = True
            try:
                result = await self._settle_failed(child_id, self.epochs.get(child_id),
                                                   f"Child Workflow execution {closed.status}")
                await on_result(child_id, result)
            finally:
                self.settling = False

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
