"""The agent workflow (loader/engines/README.md): one run per root tree or per child epoch.

Workflow code: deterministic bookkeeping only, no I/O, no clock, no dsh runtime import (the sandbox
re-imports this module; `wire` and the workflow-side state modules are passed through, and
`RunBudget`, plain counting, for the tree's run budget the root keeps). The turns themselves run in
the `dsh.turn` activity (turn.py), which reaches back here through the two updates.

The SDK does not inherit handler decorators, so every handler is on `AgentWorkflow`; the state and
its rules are plain classes beside it: the delivery queue (queue.py), the resident-children table
(residents.py), the fence board (board.py) and the tree's charge ledger (ledger.py).

Invariants (and each state module's own):
- one turn activity at a time (`_turn_seq` is the running one's number, `_ended` the count of ended
  ones), so the long-poll of an ended turn returns at once and never holds the workflow open;
- `_interrupts[seq]` lists the interrupts accepted for turn `seq` in arrival order; each is handed
  to that turn once (the poll counts what the turn applied);
- `_parked` is the last turn's queued waking work: non-empty means parked (SPEC §10.3), so this run
  neither settles nor starts a turn until a waking delivery arrives or the tree releases it;
- `_told_stalled` is what the parent last heard from `_stall_report` (children only), so a change
  is signalled once and an unchanged state costs no history event; `_seen` counts the parent's
  follow-ups this residency received (a `followup` delivery comes only from its `message_child`).
"""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from dsh.loader.engines.wire import (
        TURN_TIMEOUT,
        AgentView,
        Answer,
        Carried,
        Charge,
        Charged,
        ChildRef,
        ChildState,
        Delivery,
        FailedRun,
        Interrupt,
        InterruptAt,
        MessageChild,
        Poll,
        PollReply,
        ResumeCheck,
        ResumeFound,
        StartChild,
        TreeInput,
        TreeResult,
        TurnInput,
        TurnResult,
        agent_workflow_id,
        child_workflow_id,
    )
    from dsh.loader.engines.board import FenceBoard
    from dsh.loader.engines.ledger import ChargeLedger
    from dsh.loader.engines.queue import DeliveryQueue
    from dsh.loader.engines.residents import TURN_RETRY, Residents, chain, settle_failed
    from dsh.loader.models.budget import RunLimits

__all__ = ["AgentWorkflow"]

TURN_ACTIVITY = "dsh.turn"
RESUME_ACTIVITY = "dsh.resume_check"
RESUME_TIMEOUT = timedelta(seconds=30)
# The patch that lets any agent's run continue as new with children resident (issue 12 "Not yet"
# item 3): children start ABANDON and signal their result to the parent's current run. Runs
# recorded before it (no marker) replay the old way: only a child, only with no child resident.
HANDOVER_PATCH = "continue-with-children"
# The patch that keeps a child whose turn failed for good resident while it has children resident
# (issue 12 "Not yet" item 0): the failure is the epoch's error end in its log, as a local turn
# that ends `error`, and its children's notices wake its next turn. Before it, the run failed and
# its children lived on, their notices sent to a workflow id with no running run.
FAILED_TURN_PATCH = "failed-turn-keeps-children"


@workflow.defn(name="dsh.agent")
class AgentWorkflow:
    @workflow.init
    def __init__(self, input: TreeInput) -> None:
        """The run's state from its input, before any handler runs: a signal (a child's notice, a
        delivery) may come in the run's first workflow task, ahead of `run`."""
        carried = input.carried or Carried()
        run = input.run
        self._input = input
        self._queue = DeliveryQueue(carried.quiet)
        self._turn_seq = -1
        self._ended = 0
        self._running = False
        self._closing = False
        self._interrupts: dict[int, list[InterruptAt]] = {}
        self._releasing = False
        self._released: list[str] = []
        self._updates = 0  # updates this run accepted (a server caps a run's: history.maxTotalUpdates)
        self._calls = 0  # handlers in flight other than the board's long-polls (`_handover`)
        self._handing_over = False  # about to continue as new: the board's long-polls return
        # HANDOVER_PATCH: any agent continues as new, children resident or not.
        self._anywhere = workflow.patched(HANDOVER_PATCH)
        for d in input.deliveries:
            self._queue.accept(d)
        # The bookkeeping of the runs before (`_carry`): no child's notice is lost between the
        # runs, since each is signalled to the workflow id, whichever run is current.
        self._parked: list[str] = list(carried.parked)
        self._told_stalled: ChildState | None = carried.told_stalled
        self._key: str | None = carried.agent_key
        self._violations: list[dict[str, Any]] = list(carried.violations)
        self._engaged: list[bool] = list(carried.fences_engaged)
        self._seen = carried.seen  # the parent's follow-ups this residency has received (ChildState.seen)
        self._residents = Residents(input, carried, abandon=self._anywhere)
        self._ledger = ChargeLedger(RunLimits(run.max_children, run.max_requests, run.max_tokens_total), carried)
        self._board = FenceBoard(carried.facts, carried.fact_last)  # the root, transcripts with fences

    @workflow.run
    async def run(self, input: TreeInput) -> TreeResult:
        try:
            return await self._run(input)
        except (ActivityError, ApplicationError) as exc:
            if input.parent_id is None or not self._anywhere:
                raise
            # The run fails (a turn failed for good, a result over the payload limit): the parent's
            # run that started it may have continued as new since, and a failure reaches only
            # that run (README "Failed child runs"). So the epoch is settled from its log here too
            # and signalled to the parent's current run; the failure then goes on as before, and
            # the parent enters the notice once, by its id, whichever way it comes first.
            failed = FailedRun(home=input.run.home, child_id=input.session_id, epoch=input.epoch, failure=chain(exc))
            await self._tell_parent(await settle_failed(failed))
            raise

    async def _run(self, input: TreeInput) -> TreeResult:
        carried = input.carried or Carried()
        last: TurnResult | None = None
        queue = self._queue
        while True:
            if self._continue_due():
                await self._handover(carried.runs)
            # Quiescence (SPEC §17.2, S11 here): no turn runs, nothing pending, no child resident,
            # nothing parked. An injected delivery alone wakes no one (SPEC §6.2).
            await workflow.wait_condition(self._due)
            if self._anywhere and self._continue_due():
                continue
            if input.parent_id is not None and self._stall_changed():
                await self._stall_report()
                continue
            if self._release_due():
                self._release()
                continue
            if self._releasing:
                if self._residents:
                    continue
                if input.parent_id is not None or queue.has_pending():
                    last = await self._turn(release=input.parent_id is not None)
                break
            if queue.waking():
                last = await self._turn()
                continue
            if queue.has_pending():  # injected leftovers: into the log, no model turn
                last = await self._turn()
            break
        self._closing = True  # releases the board's long-polls of turns that have ended
        await workflow.wait_condition(workflow.all_handlers_finished)
        result = self._result(last)
        if input.parent_id is not None and self._anywhere:
            await self._tell_parent(result)
        return result

    async def _tell_parent(self, result: TreeResult) -> None:
        """The notice to the parent's current run (it may have continued as new since it started
        this one, and a closed run's child result goes nowhere); the parent enters it once, by its
        notice id, whichever of this signal and the result comes first."""
        input = self._input
        assert input.parent_id is not None
        target = agent_workflow_id(input.run.root_id, input.parent_id)
        try:
            await workflow.get_external_workflow_handle(target).signal(AgentWorkflow.settled, result)
        except Exception:  # the parent's run has ended (never while this child is resident)
            workflow.logger.warning("the parent %s of %s has no running workflow", target, input.session_id)

    def _result(self, last: TurnResult | None) -> TreeResult:
        input = self._input
        if last is None:
            return TreeResult(session_id=input.session_id, stop_reason="completed")
        return TreeResult(
            session_id=input.session_id, stop_reason=last.stop_reason, notice=last.notice, output=last.output,
            output_in_log=last.output_in_log, error=last.error, violations=list(self._violations),
            fences_engaged=list(self._engaged), agent_key=self._key, epoch=input.epoch,
            released=sorted(self._released),
            budget=self._ledger.budget.summary() if input.parent_id is None else {},
        )

    # -- continue-as-new (issue 12 item 2, "Not yet" item 3) --------------------------------
    def _continue_due(self) -> bool:
        """An agent's run continues as new between turns, before the server's limits: when
        Temporal suggests it, its history reached `temporal.continueAsNewAfter` events or it took
        `temporal.continueAsNewUpdates` updates. Only while it has work ahead (parked, waking
        deliveries pending, or children resident) and no turn runs, no interrupt waits for the
        next turn and it is not releasing. Before HANDOVER_PATCH: only a child, no child resident."""
        if self._running or self._releasing or not self._ended:
            return False  # `not self._ended`: each run takes at least one turn, so runs cannot chain idly
        if not self._anywhere and (self._input.parent_id is None or self._residents):
            return False
        if not (self._parked or self._queue.waking() or self._residents) or self._interrupts.get(self._ended):
            return False
        info = workflow.info()
        run = self._input.run
        limit = run.continue_as_new_after
        return (info.is_continue_as_new_suggested() or (limit is not None and info.get_current_history_length() >= limit)
                or (self._anywhere and self._updates >= run.continue_as_new_updates))

    async def _handover(self, runs: int) -> None:
        """Continue as new once the handlers in flight have finished: `message_child` and the
        updates of the running turns (none of this agent's own; other agents' charges are signals)
        end by themselves; then the board's long-polls return what they have (their callers poll
        again, reaching the new run) and the run continues as new in that same workflow task."""
        if self._anywhere:
            await workflow.wait_condition(lambda: self._calls == 0)
            self._handing_over = True
        await workflow.wait_condition(workflow.all_handlers_finished)
        if self._continue_due():
            workflow.continue_as_new(self._carry(runs))
        self._handing_over = False

    def _carry(self, runs: int) -> TreeInput:
        carried = Carried(parked=list(self._parked), told_stalled=self._told_stalled,
                          violations=list(self._violations), fences_engaged=list(self._engaged), agent_key=self._key,
                          runs=runs + 1, seen=self._seen, **self._residents.carry(), **self._ledger.carry(),
                          facts=list(self._board.facts), fact_last=self._board.carried_last(),
                          quiet=max(0, self._queue.quiet - self._queue.handed))
        return dataclasses.replace(self._input, deliveries=self._queue.pending(), carried=carried)

    def _due(self) -> bool:
        """Something for the main loop to do (see `run`)."""
        if self._input.parent_id is not None and self._stall_changed():
            return True
        if self._anywhere and self._continue_due():  # e.g. a root waiting on children, its updates spent
            return True
        if self._releasing:
            return not self._residents
        return self._queue.waking() or self._release_due() or (not self._residents and not self._parked)

    async def _turn(self, release: bool = False) -> TurnResult:
        offset = self._queue.handed
        self._turn_seq = self._ended
        self._running = True
        try:
            last: TurnResult = await workflow.execute_activity(
                TURN_ACTIVITY,
                TurnInput(agent=self._input, deliveries=self._queue.after(offset), offset=offset, seq=self._turn_seq,
                          parked=list(self._parked), children=list(self._residents.started), release=release),
                result_type=TurnResult,
                start_to_close_timeout=TURN_TIMEOUT,
                heartbeat_timeout=timedelta(seconds=self._input.run.heartbeat_seconds),
                retry_policy=TURN_RETRY,
            )
        except ActivityError as exc:
            self._running = False
            if self._input.parent_id is None or not self._residents or not workflow.patched(FAILED_TURN_PATCH):
                raise
            last = await self._failed_turn(exc)
        finally:
            self._running = False
        self._ended += 1
        self._queue.handed = offset + last.taken
        self._parked = list(last.parked)
        self._violations.extend(last.violations)
        self._engage(last.fences_engaged)
        self._key = last.agent_key or self._key
        return last

    async def _failed_turn(self, exc: ActivityError) -> TurnResult:
        """A child's turn failed for good (a worker refusing it, five failed attempts) while it has
        children resident: as the local engine's child whose turn ends `error`, it stays resident
        (it owns children), their notices reach it and wake its next turn. The failure is written
        as the turn's error end (`dsh.settle_failed`: once, the epoch's would-be notice); what the
        turn was handed stays pending for the next turn but wakes no one again, so a failure that
        persists costs one turn per later waking delivery, never a loop (README "Failed child runs")."""
        who = self._input
        settled = await settle_failed(FailedRun(home=who.run.home, child_id=who.session_id, epoch=who.epoch,
                                                failure=chain(exc)))
        self._queue.hush()
        return TurnResult(taken=0, stop_reason=settled.stop_reason, notice=settled.notice, parked=list(self._parked))

    # -- parking and release (SPEC §10.3, §17.2) -------------------------------------------
    def _stall_state(self) -> ChildState:
        """Stalled: no turn runs, nothing waking is pending, and the agent is parked or waits only
        on stalled children (every resident descendant parked or waiting on parked ones)."""
        quiet = not self._running and not self._queue.waking() and not self._releasing
        stalled = quiet and bool(self._parked or self._residents) and self._residents.stalled_below()
        parked = [self._input.session_id] if self._parked else []
        if stalled:
            parked.extend(self._residents.parked_below())
        return ChildState(child_id=self._input.session_id, stalled=stalled, parked=sorted(parked) if stalled else [],
                          seen=self._seen)

    def _stall_changed(self) -> bool:
        state = self._stall_state()
        told = self._told_stalled
        return (told.stalled if told is not None else False) != state.stalled or (
            told is not None and told.parked != state.parked)

    async def _stall_report(self) -> None:
        assert self._input.parent_id is not None
        state = self._stall_state()
        self._told_stalled = state
        target = agent_workflow_id(self._input.run.root_id, self._input.parent_id)
        await workflow.get_external_workflow_handle(target).signal(AgentWorkflow.child_state, state)

    def _release_due(self) -> bool:
        """The root of a stalled tree under `run.parked: release` lets its parked work go."""
        return (self._input.parent_id is None and self._input.run.parked == "release" and not self._releasing
                and bool(self._residents) and self._stall_state().stalled)

    def _release(self) -> None:
        """drain_descendants on Temporal: every resident child cancels, clearing its queue, and
        settles; the notices enter this closing agent as injects (§9.2 step 4)."""
        self._released = self._stall_state().parked
        self._releasing = True
        self._residents.release_all()

    @workflow.signal
    def release(self) -> None:
        """The parent releases this child (its tree is closing): no new turn, children first."""
        if not self._releasing:
            self._releasing = True
            self._residents.release_all()
            for cause in [{"kind": "parent"}] if self._running else []:
                self._interrupts.setdefault(self._ended, []).append(InterruptAt(len(self._queue), cause))

    @workflow.query
    def status(self) -> str:
        """`list_agents`' status of this agent (§12.2): `ready` once its run is closing (a query
        of a closed run replays to its end), else running, parked or idle (resident otherwise)."""
        if self._closing:
            return "ready"
        if self._running or self._queue.waking():
            return "running"
        return "parked" if self._parked else "idle"

    @workflow.query
    def view(self) -> AgentView:
        """This agent as `run.status` / `subagent.list` show it, and its stall (the root's is the
        tree's: the client prints T-CLI-STALLED and the `waiting` record from it)."""
        who = self._input
        stall = self._stall_state()
        return AgentView(
            session_id=who.session_id, parent_id=who.parent_id, label=(who.descriptor or {}).get("label"),
            depth=who.depth, status=self.status(), resident=list(self._residents),
            children=list(self._residents.started), stalled=stall.stalled, parked=list(stall.parked),
            shutting_down=self._closing or self._releasing)

    @workflow.signal
    def child_state(self, state: ChildState) -> None:
        """A resident child's stall report (a stale one is dropped: `Residents.report`)."""
        self._residents.report(state)

    def _engage(self, engaged: list[bool]) -> None:
        if len(self._engaged) < len(engaged):
            self._engaged.extend([False] * (len(engaged) - len(self._engaged)))
        for i, flag in enumerate(engaged):
            self._engaged[i] = self._engaged[i] or flag

    # -- the running turn's long-polls ------------------------------------------------------
    @workflow.update
    async def deliveries_after(self, poll: Poll) -> PollReply:
        """The running turn's long-poll: what arrived past `poll.after` and the interrupts it has
        not applied, or nothing once it has ended."""

        self._updates += 1

        def unseen() -> list[InterruptAt]:
            return self._interrupts.get(poll.seq, [])[poll.interrupts:]

        await workflow.wait_condition(
            lambda: len(self._queue) > poll.after or bool(unseen()) or self._ended > poll.seq)
        if self._ended > poll.seq:
            return PollReply()
        return PollReply(deliveries=self._queue.after(poll.after), interrupts=unseen())

    @workflow.signal
    def deliver(self, delivery: Delivery) -> None:
        """A message for this agent from another workflow of the tree (a report, a follow-up)."""
        self._queue.accept(delivery)
        if delivery.send == "followup":  # from the parent's message_child (reports steer or inject)
            self._seen += 1

    @workflow.update
    def interrupt(self, request: Interrupt) -> Answer:
        """SPEC §10.2 on this agent's workflow (its existence is residency: a settled child has no
        running workflow, so the caller answers the accepted no-op itself). Fire-and-return: the
        cancel reaches the running turn through its poll, `agent.cancel(cause, keep_inbox=True)`."""
        self._updates += 1
        if request.kind == "parent":
            if request.caller not in self._input.ancestors:
                return Answer(code="UNAUTHORIZED", text="T-ERR-NOT-DESCENDANT")
        elif request.caller != self._input.parent_id:
            return Answer(code="UNAUTHORIZED", text="T-ERR-NOT-PARENT")
        if self._releasing or self._closing:
            return Answer(status="noop")  # its disposal is open
        if not self._running and not self._queue.waking():
            return Answer(status="noop")  # idle: a cancel of an idle agent does nothing
        # The running turn, or (a waking delivery pending) the one about to start: its first poll.
        at = InterruptAt(at=len(self._queue), cause={"kind": request.kind})
        self._interrupts.setdefault(self._ended, []).append(at)
        return Answer(status="accepted")

    @workflow.update
    async def message_child(self, request: MessageChild) -> Answer:
        """§8.7 for this agent's child: a resident child gets a follow-up delivery; one that is not
        resident is started again under its id with the next epoch (a cold resume), after the
        header checks. A child whose run ended while its result is on the way (LOST): wait for the
        notice to enter here, then resume it."""
        self._updates += 1
        self._calls += 1
        try:
            return await self._message_child(request)
        finally:
            self._calls -= 1

    async def _message_child(self, request: MessageChild) -> Answer:
        run = self._input.run
        child_id = request.child_id
        delivery = Delivery(request.message)
        while True:
            if self._releasing or self._closing:
                return Answer(code="DRAINING", text="T-ERR-DRAINING-SCOPED")
            if child_id in self._residents:
                if await self._residents.deliver(child_id, delivery):
                    return Answer(status="delivered")
                await workflow.wait_condition(lambda: child_id not in self._residents)  # LOST: its result is on the way
                continue
            found = await workflow.execute_activity(
                RESUME_ACTIVITY, ResumeCheck(home=run.home, parent_id=self._input.session_id, child_id=child_id),
                result_type=ResumeFound, start_to_close_timeout=RESUME_TIMEOUT, retry_policy=TURN_RETRY,
            )
            if found.code is not None:
                return Answer(code=found.code, text=found.text)
            if child_id in self._residents:
                continue  # a parallel send resumed it meanwhile
            assert found.descriptor is not None
            await self._start(child_id, found.descriptor, delivery, found.depth, found.epoch)
            return Answer(status="started")

    @workflow.update
    async def report(self, delivery: Delivery) -> None:
        """`report` in this child's running turn: relay it to the direct parent's workflow. The
        signal is in the parent's history before this child can settle, so the report precedes
        the notice there (SPEC §11.3)."""
        assert self._input.parent_id is not None
        self._updates += 1
        self._calls += 1
        try:
            target = agent_workflow_id(self._input.run.root_id, self._input.parent_id)
            await workflow.get_external_workflow_handle(target).signal(AgentWorkflow.deliver, delivery)
        finally:
            self._calls -= 1

    # -- the fence board (root; board.py) ---------------------------------------------------
    @workflow.signal
    def fence_facts(self, facts: list[list[Any]], source: str | None = None) -> None:
        """A turn anywhere in the tree (`source`; None: a workflow) recorded these fence facts
        (root workflow only)."""
        self._board.add(facts, source)

    @workflow.update
    async def fence_facts_after(self, after: int, source: str | None = None) -> list[list[Any]]:
        """A turn's long-poll of the board: the facts past `after`, or [] once the tree closes.
        It answers once a fact past `after` comes from elsewhere than the polling turn
        (`source`; Temporal allows 2,000 updates per run; issue 12 item 7). A run about to
        continue as new answers what it has (maybe nothing): the turn polls again, the next run."""
        self._updates += 1
        await workflow.wait_condition(lambda: self._closing or self._handing_over or self._board.news_for(after, source))
        return self._board.facts[after:]

    # -- the tree's run budget (root; ledger.py) --------------------------------------------
    @workflow.update
    def charge(self, charge: Charge) -> Charged:
        """One charge of a turn (runs before signal `charges`; kept so their histories replay)."""
        self._updates += 1
        return self._ledger.count(charge)

    @workflow.update
    def charge_many(self, charges: list[Charge]) -> list[Charged]:
        """Charges batched by a worker process, each counted in order as `charge` counts it (runs
        before signal `charges`; kept so their histories replay)."""
        self._updates += 1
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

    # -- children (residents.py) ------------------------------------------------------------
    @workflow.update
    async def start_child(self, request: StartChild) -> None:
        """`subagent` in a running turn: start the child's first epoch; returns once it started."""
        self._updates += 1
        if request.child_id in self._residents:
            return  # a retried turn asked again
        await self._start(request.child_id, request.descriptor, Delivery(request.prompt), request.depth, 1)

    @workflow.update
    async def start_children(self, requests: list[StartChild]) -> None:
        """`subagent` calls of a running turn, batched: one update starts them all (their start
        commands go out in one workflow task) and returns once every one has started. Temporal
        holds at most 10 updates in flight on a workflow and 2,000 per run; one update per child
        refused starts at N=300 (issue 12 item 7)."""
        self._updates += 1
        fresh = [r for r in requests if r.child_id not in self._residents]  # a retried turn asked again
        await asyncio.gather(*(self._start(r.child_id, r.descriptor, Delivery(r.prompt), r.depth, 1) for r in fresh))

    async def _start(self, child_id: str, descriptor: dict[str, Any], first: Delivery, depth: int, epoch: int) -> None:
        await self._residents.start(child_id, descriptor, first, depth, epoch, self._settle)

    @workflow.signal
    async def settled(self, result: TreeResult) -> None:
        """A child's run ended (its result, sent before it returns): the notice reaches the run
        current now, also one that did not start the child (continued as new since)."""
        await self._settle(result.session_id, result)

    async def _settle(self, child_id: str, result: TreeResult) -> None:
        """A child's result entered once: it comes as signal `settled` and, to the run that started
        the child, as the child's result too; the notice id (`notice_id(child, epoch)`) tells."""
        key = str(result.notice["id"]) if result.notice is not None else f"{child_id}#{result.epoch}"
        if not self._residents.enter(key):
            return
        self._violations.extend(result.violations)
        self._engage(result.fences_engaged)
        if result.notice is not None:
            # A closing agent takes the notice as an inject and starts no turn for it (§9.2 step 4).
            self._queue.accept(Delivery(result.notice, send="inject" if self._releasing else "notice"))
        run = self._input.run
        if run.fences and result.agent_key is not None and (
                run.fence_agents is None or result.agent_key in run.fence_agents):
            # The fence fact `settled` (after the notice, as the local settlement edge): recorded
            # before this child stops being resident, so the tree cannot close without it.
            fact: list[Any] = ["settled", result.agent_key, result.epoch or 0]
            if self._input.parent_id is None:
                self.fence_facts([fact])
            else:
                await workflow.get_external_workflow_handle(run.root_id).signal(AgentWorkflow.fence_facts, [fact])
        self._residents.drop(child_id)

