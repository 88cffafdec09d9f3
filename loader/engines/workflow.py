"""The agent workflow (loader/engines/README.md): one run per root tree or per child epoch.

Workflow code: deterministic bookkeeping only, no I/O, no clock, no dsh runtime import (the sandbox
re-imports this module; `wire` and the workflow-side state modules are passed through, and
`RunBudget`, plain counting, for the tree's run budget the root keeps). The turns themselves run in
the `dsh.turn` activity (turn.py), which reaches back here through the two updates.

Here: the run, its turns, the running turn's long-polls, inbox and interrupt handlers. Its base
classes hold the rest, as the SDK collects a base class's handlers under their registered names:
the children's handlers (child_handlers.py), the root's board and budget handlers
(root_handlers.py), turns in workflows of their own (mid_turn.py) and the hand-over and ending
commands (endings.py). The state and its rules are plain classes: the delivery queue (queue.py),
the resident-children table (residents.py), the fence board (board.py), the tree's charge ledger
(ledger.py), the turn counters, flags and rules of the residency itself (residency.py, whose
invariants are the run's); the activity calls one helper each (calls.py), the patch names
patches.py's.

The SDK's rules hold here: no await inside a signal handler's bookkeeping that another handler
must not see half done, and every command (activity, child start, signal, timer, continue-as-new,
patch marker) in the same order on replay (tests/temporal/test_replay.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from dsh.loader.engines.wire import (
        CHILDREN_PAGE, AgentView, Answer, Carried, ChildRef, ChildState, Delivery, FailedRun, Interrupt, InterruptAt,
        MessageChild, Poll, PollReply, ResumeCheck, TreeInput, TreeResult, TurnInput, TurnOutcome, TurnResult,
    )
    from dsh.loader.engines.board import FenceBoard
    from dsh.loader.engines.calls import chain, resume_check, run_turn, settle_failed
    from dsh.loader.engines.child_handlers import ChildHandlers
    from dsh.loader.engines.ledger import ChargeLedger
    from dsh.loader.engines.patches import (
        CANCEL_PATCH, FAILED_TURN_PATCH, HANDOVER_PATCH, PAGED_PATCH, ROOT_CANCEL_PATCH, ROOT_DRAIN_PATCH,
    )
    from dsh.loader.engines.pinning import CLAIM_KEPT_PATCH, HOMES_PATCH, Homes, pin
    from dsh.loader.engines.queue import DeliveryQueue
    from dsh.loader.engines.residency import Residency
    from dsh.loader.engines.residents import Residents, to_parent
    from dsh.loader.engines.root_handlers import long_poll
    from dsh.loader.models.budget import RunLimits

__all__ = ["AgentWorkflow"]


@workflow.defn(name="dsh.agent")
class AgentWorkflow(ChildHandlers):
    @workflow.init
    def __init__(self, input: TreeInput) -> None:
        """The run's state from its input, before any handler runs: a signal (a child's notice, a
        delivery) may come in the run's first workflow task, ahead of `run`."""
        carried = input.carried or Carried()
        run = input.run
        self._input = input
        self._queue = DeliveryQueue(carried.quiet, carried.turn.base if carried.turn is not None else 0)
        for d in input.deliveries:
            self._queue.accept(d)
        anywhere = workflow.patched(HANDOVER_PATCH)  # any agent continues as new, children resident or not
        self._homes = Homes(input, carried, enabled=workflow.patched(HOMES_PATCH),  # where the logs live
                            keep_claim=workflow.patched(CLAIM_KEPT_PATCH))
        self._residents = Residents(input, carried, abandon=anywhere, homes=self._homes)
        self._ledger = ChargeLedger(RunLimits(run.max_children, run.max_requests, run.max_tokens_total), carried)
        self._board = FenceBoard(carried.facts, carried.fact_last)  # the root, transcripts with fences
        self._s = Residency(input, carried, self._queue, self._residents, self._ledger, self._board, anywhere=anywhere)

    @workflow.run
    async def run(self, input: TreeInput) -> TreeResult:
        try:
            try:
                return await self._run(input)
            except asyncio.CancelledError:
                if not workflow.patched(CANCEL_PATCH if input.parent_id is not None else ROOT_CANCEL_PATCH):
                    raise
                # A cancel by hand: a child's disposal, children first; a root's stop (README "Failed child runs")
                self._cancelled()
                return await self._run(input)
        except (ActivityError, ApplicationError) as exc:
            if input.parent_id is None and self._residents and workflow.patched(ROOT_DRAIN_PATCH):
                await self._drain()
            if input.parent_id is None or not self._s.anywhere:
                raise
            # The run fails (a turn failed for good, a result over the payload limit): the parent's
            # run that started it may have continued as new since, and a failure reaches only
            # that run (README "Failed child runs"). So the epoch is settled from its log here too
            # and signalled to the parent's current run; the failure then goes on as before, and
            # the parent enters the notice once, by its id, whichever way it comes first.
            failed = FailedRun(home=input.run.home, child_id=input.session_id, epoch=input.epoch, failure=chain(exc))
            await self._tell_parent(await settle_failed(failed, self._homes.queue()))
            raise

    async def _run(self, input: TreeInput) -> TreeResult:
        carried = input.carried or Carried()
        last: TurnResult | None = None
        queue = self._queue
        if self._homes.pending():
            await pin(self._homes, input)  # the log's home, found by its create activity
        if not self._s.stopped:  # (a stopped root's first entry started its watcher, if any)
            self._residents.watch(self._settle)  # children an earlier run started, which no handle here awaits
        if self._s.running:  # this run began mid-turn (README "A turn across runs"): that turn goes on
            last = await self._turn()
        while True:
            if self._s.continue_due():
                await self._handover(carried.runs)
            # Quiescence (SPEC §17.2, S11 here): no turn runs, nothing pending, no child resident,
            # nothing parked. An injected delivery alone wakes no one (SPEC §6.2).
            await workflow.wait_condition(self._s.due)
            if self._s.anywhere and self._s.continue_due():
                continue
            if input.parent_id is not None and self._s.stall_changed():
                await self._stall_report()
                continue
            if self._s.release_due():
                self._release()
                continue
            if self._s.releasing:
                if self._residents:
                    continue
                if self._s.stopped:  # a root cancelled by hand: what it never read enters its log, no turn
                    await self._enter_unread()
                elif input.parent_id is not None or queue.has_pending():
                    last = await self._turn(release=input.parent_id is not None)
                break
            if queue.waking():
                last = await self._turn(movable=True)
                continue
            if queue.has_pending():  # injected leftovers: into the log, no model turn
                last = await self._turn()
            break
        self._residents.stop_watching()
        self._s.closing = True  # releases the board's long-polls of turns that have ended
        await workflow.wait_condition(workflow.all_handlers_finished)
        if self._s.stopped:  # as a local run stopped by a signal: `aborted`, the last turn's output
            last = last or self._s.last
        result = self._s.result(last)
        if self._s.stopped:
            result.stop_reason = "aborted"
        result.home_queue = self._homes.mine
        result.claimed = self._homes.claimed
        result.known_homes = list(self._homes.known) if self._homes.enabled else []
        if input.parent_id is not None and self._s.anywhere:
            await self._notice_out(result)  # awaits nothing when the run that started it is current
        return result

    async def _turn(self, release: bool = False, *, movable: bool = False) -> TurnResult:
        """One turn: an activity of this run, or a workflow of its own (`_by_run`) that this run
        may hand over mid-turn (`movable`: the waking branch's turns); a run that began mid-turn
        takes up the turn in flight."""
        turn: Awaitable[TurnResult]
        if self._s.running:  # Carried.turn
            offset = self._s.turn_offset
            turn = self._moved_outcome()
        else:
            offset = self._queue.handed
            self._s.turn_seq = self._s.ended
            self._s.running = True
            self._s.paged = self._s.paged or workflow.patched(PAGED_PATCH)
            first = self._queue.page(offset) if self._s.paged else self._queue.after(offset)
            spec = TurnInput(
                agent=self._input, deliveries=first, offset=offset, seq=self._s.turn_seq, parked=list(self._s.parked),
                children=self._residents.resident_refs(), running=self._residents.open(), release=release,
                more=len(self._queue) - offset - len(first),
                children_elsewhere=self._homes.queue() is not None)
            if self._by_run():
                turn = self._turn_in_run(spec, movable=movable)
            else:
                turn = run_turn(spec, self._homes.queue())
                if workflow.patched(CANCEL_PATCH if self._input.parent_id is not None else ROOT_CANCEL_PATCH):
                    turn = self._shielded(turn)
        try:
            last = await turn
        except (ActivityError, ApplicationError) as exc:  # ApplicationError: a turn run's (`raise_failure`)
            self._s.running = False
            if self._input.parent_id is None or not self._residents or not workflow.patched(FAILED_TURN_PATCH):
                raise
            last = await self._failed_turn(exc)
        finally:
            self._s.running = False
        self._s.ended += 1
        self._queue.handed = offset + last.taken
        self._s.parked = list(last.parked)
        self._s.violations.extend(last.violations)
        self._s.engage(last.fences_engaged)
        self._s.key = last.agent_key or self._s.key
        self._s.last = last
        return last

    @workflow.signal
    def release(self) -> None:
        """The parent releases this child (its tree is closing): no new turn, children first."""
        if not self._s.releasing:
            self._s.releasing = True
            self._residents.release_all()
            for cause in [{"kind": "parent"}] if self._s.running else []:
                self._s.interrupts.setdefault(self._s.ended, []).append(InterruptAt(len(self._queue), cause))

    @workflow.signal
    def parent_moved(self) -> None:
        """The parent's run that started this epoch continues as new: this run's result would reach
        no one, so its notice goes to the parent's workflow id by signal `settled` (QUIET_SETTLE_PATCH)."""
        self._s.parent_moved = True

    @workflow.query
    def status(self) -> str:
        """`list_agents`' status of this agent (§12.2; `Residency.status`)."""
        return self._s.status()

    @workflow.query
    def children(self, start: int = 0) -> list[ChildRef]:
        """The children this run started or resumed (and the resident ones it carried), with the
        headers their logs begin with, from `start`, at most CHILDREN_PAGE: `list_agents` lists those
        whose logs are on other homes, `subagent.list` all (control.workflow_children asks every run)."""
        return self._residents.started(start, CHILDREN_PAGE)

    @workflow.query
    def view(self) -> AgentView:
        """This agent as `run.status` / `subagent.list` show it, and its stall (`Residency.view`)."""
        return self._s.view()

    @workflow.signal
    def child_state(self, state: ChildState) -> None:
        """A resident child's stall report (a stale one is dropped: `Residents.report`)."""
        self._residents.report(state)

    # -- the running turn's long-polls ------------------------------------------------------
    # Still open when the run ends, abandoned (`long_poll`): its caller is a turn that has ended
    # (which gave its poll up; the server keeps it until the run closes) or reads the close next.
    @long_poll
    async def deliveries_after(self, poll: Poll) -> PollReply:
        """The running turn's long-poll: what arrived past `poll.after` and the interrupts it has
        not applied, or nothing once it has ended."""

        s = self._s
        s.updates += 1
        if s.running and poll.seq == s.turn_seq and not poll.pages:
            s.polled = max(s.polled, poll.after)
            if poll.durable and s.moving:
                s.acked = poll.after  # the turn's log holds every delivery before it (README "A turn across runs")
        await workflow.wait_condition(
            lambda: len(self._queue) > poll.after or bool(self._unseen(poll)) or s.ended > poll.seq
            or (s.moving and poll.seq == s.turn_seq and not poll.pages))
        return self._poll_reply(poll)

    @workflow.query
    def deliveries_now(self, poll: Poll) -> PollReply:
        """The running turn's poll once its run's updates are spent (`PollReply.spent`): what
        `deliveries_after` would answer now, without waiting (a query adds nothing to history)."""
        return self._poll_reply(poll)

    def _poll_reply(self, poll: Poll) -> PollReply:
        if self._s.ended > poll.seq:
            return PollReply(ended=True)
        if self._s.moving and poll.seq == self._s.turn_seq and not poll.pages:
            return PollReply(moved=True)
        page = self._queue.page(poll.after) if self._s.paged else self._queue.after(poll.after)
        return PollReply(deliveries=page, interrupts=self._unseen(poll),
                         spent=self._s.updates >= self._input.run.continue_as_new_updates, base=self._queue.base)

    def _unseen(self, poll: Poll) -> list[InterruptAt]:
        """The interrupts of turn `poll.seq` past the ones it has applied."""
        return self._s.interrupts.get(poll.seq, [])[poll.interrupts:]

    @workflow.signal
    def turn_ended(self, outcome: TurnOutcome) -> None:
        """This agent's turn, in a workflow of its own told that the run moved, ended (turn_run.py)."""
        self._heard(outcome)

    @workflow.signal
    def deliver(self, delivery: Delivery) -> None:
        """A message for this agent from another workflow of the tree (a report, a follow-up)."""
        self._queue.accept(delivery)
        if delivery.send == "followup":  # from the parent's message_child (reports steer or inject)
            self._s.seen += 1

    @workflow.update
    def interrupt(self, request: Interrupt) -> Answer:
        """SPEC §10.2 on this agent's workflow (its existence is residency: a settled child has no
        running workflow, so the caller answers the accepted no-op itself). Fire-and-return: the
        cancel reaches the running turn through its poll, `agent.cancel(cause, keep_inbox=True)`."""
        self._s.updates += 1
        if request.kind == "parent":
            if request.caller not in self._input.ancestors:
                return Answer(code="UNAUTHORIZED", text="T-ERR-NOT-DESCENDANT")
        elif request.caller != self._input.parent_id:
            return Answer(code="UNAUTHORIZED", text="T-ERR-NOT-PARENT")
        if self._s.releasing or self._s.closing:
            return Answer(status="noop")  # its disposal is open
        if not self._s.running and not self._queue.waking():
            return Answer(status="noop")  # idle: a cancel of an idle agent does nothing
        # The running turn, or (a waking delivery pending) the one about to start: its first poll.
        at = InterruptAt(at=len(self._queue), cause={"kind": request.kind})
        self._s.interrupts.setdefault(self._s.ended, []).append(at)
        return Answer(status="accepted")

    @workflow.update
    async def message_child(self, request: MessageChild) -> Answer:
        """§8.7 for this agent's child: a resident child gets a follow-up delivery; one that is not
        resident is started again under its id with the next epoch (a cold resume), after the
        header checks. A child whose run ended while its result is on the way (LOST): wait for the
        notice to enter here, then resume it."""
        self._s.updates += 1
        self._s.calls += 1
        try:
            return await self._message_child(request)
        finally:
            self._s.calls -= 1

    async def _message_child(self, request: MessageChild) -> Answer:
        run = self._input.run
        child_id = request.child_id
        delivery = Delivery(request.message)
        while True:
            if self._s.releasing or self._s.closing:
                return Answer(code="DRAINING", text="T-ERR-DRAINING-SCOPED")
            if child_id in self._residents:
                if await self._residents.deliver(child_id, delivery):
                    return Answer(status="delivered")
                await workflow.wait_condition(lambda: child_id not in self._residents)  # LOST: its result is on the way
                continue
            check = ResumeCheck(home=run.home, parent_id=self._input.session_id, child_id=child_id)
            for queue in self._homes.checks(child_id):  # its home, else each home known until one has its log
                found = await resume_check(check, queue)
                if found.text != "T-ERR-NOT-FOUND":
                    break
            self._homes.learn(child_id, found.home_queue, claimed=found.code is None)  # found: its log is made
            if found.code is not None:
                return Answer(code=found.code, text=found.text)
            if child_id in self._residents:
                continue  # a parallel send resumed it meanwhile
            assert found.descriptor is not None
            if not await self._start(child_id, found.descriptor, delivery, found.depth, found.epoch, found.header):
                return Answer(code="RUNNING_LIMIT", text="T-ENGINE-RUNNING-LIMIT")  # nothing was written
            return Answer(status="started")

    @workflow.update
    async def report(self, delivery: Delivery) -> None:
        """`report` in this child's running turn: relay it to the direct parent's workflow. The
        signal is in the parent's history before this child can settle, so the report precedes
        the notice there (SPEC §11.3)."""
        assert self._input.parent_id is not None
        self._s.updates += 1
        self._s.calls += 1
        try:
            await to_parent(self._input, "deliver", delivery)
        finally:
            self._s.calls -= 1
