"""One agent's residency as its workflow run keeps it (loader/engines/README.md, "Workflow code",
"Continue-as-new", "Stalls"): the turn counters and flags, what its result accumulates, and the
rules over them: when the main loop has something to do, when the run continues as new and what
it carries, when the agent is stalled. Workflow code (deterministic, no I/O; it may import only
`wire` and the other workflow-side state modules); the handlers and commands stay on
`AgentWorkflow`, which reads and sets these fields.

Invariants:
- one turn activity at a time (`turn_seq` is the running one's number, `ended` the count of ended
  ones), so the long-poll of an ended turn returns at once and never holds the workflow open;
- `interrupts[seq]` lists the interrupts accepted for turn `seq` in arrival order; each is handed
  to that turn once (the poll counts what the turn applied);
- `parked` is the last turn's queued waking work: non-empty means parked (SPEC §10.3), so the run
  neither settles nor starts a turn until a waking delivery arrives or the tree releases it;
- `told_stalled` is what the parent last heard (children only), so a change is signalled once and
  an unchanged state costs no history event; `seen` counts the parent's follow-ups this residency
  received (a `followup` delivery comes only from its `message_child`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from temporalio import workflow

from dsh.loader.engines.board import FenceBoard
from dsh.loader.engines.ledger import ChargeLedger
from dsh.loader.engines.pinning import Homes
from dsh.loader.engines.queue import PAGE_BYTES, DeliveryQueue
from dsh.loader.engines.residents import Residents
from dsh.loader.engines.wire import (
    AgentView, Carried, ChildState, InterruptAt, TreeInput, TreeResult, TurnInFlight, TurnOutcome, TurnResult,
)

__all__ = ["MOVE_FLOOR", "Residency"]

# A run continues as new mid-turn only once its own history holds this many events.
MOVE_FLOOR = 64


class Residency:
    """The state of one agent's workflow run beside its queue, children, ledger and board."""

    def __init__(self, input: TreeInput, carried: Carried, queue: DeliveryQueue, residents: Residents,
                 ledger: ChargeLedger, board: FenceBoard, *, anywhere: bool) -> None:
        self.input, self.queue, self.residents, self.ledger, self.board = input, queue, residents, ledger, board
        self.anywhere = anywhere  # HANDOVER_PATCH
        self.turn_seq = -1
        self.ended = 0
        self.running = False
        self.closing = False
        self.interrupts: dict[int, list[InterruptAt]] = {}
        self.releasing = False
        self.released: list[str] = []
        self.stopped = False  # a root cancelled by hand (ROOT_CANCEL_PATCH): releasing, then no turn
        self.last: TurnResult | None = None  # the last turn this run took (a stopped root's result)
        self.updates = 0  # updates this run accepted (a server caps a run's: history.maxTotalUpdates)
        self.calls = 0  # handlers in flight other than the board's long-polls (`_handover`)
        self.handing_over = False  # about to continue as new: the board's long-polls return
        self.paged = False  # PAGED_PATCH: payloads carry deliveries in pages (queue.PAGE_BYTES)
        # The bookkeeping of the runs before (`carry`): no child's notice is lost between the
        # runs, since each is signalled to the workflow id, whichever run is current.
        self.parked: list[str] = list(carried.parked)
        self.told_stalled: ChildState | None = carried.told_stalled
        self.key: str | None = carried.agent_key
        self.violations: list[dict[str, Any]] = list(carried.violations)
        self.engaged: list[bool] = list(carried.fences_engaged)
        self.seen = carried.seen  # the parent's follow-ups this residency has received (ChildState.seen)
        # A child: the parent's run that started this epoch continued as new (signal `parent_moved`),
        # so only a signal carries the notice to it (QUIET_SETTLE_PATCH).
        self.parent_moved = carried.parent_moved
        # A turn in its own workflow (turn_run.py, README "A turn across runs"): its id, whether it
        # was told this agent's run moved, where its polls had reached, its outcome once heard;
        # `moving`: this run continues as new mid-turn once the turn says its log holds
        # `deliveries[:acked]` (`Poll.durable`).
        self.turn_id: str | None = None
        self.turn_told = False
        self.turn_offset = 0
        self.movable = False  # the running turn is one the main loop's waking branch started
        self.polled = 0
        self.outcome: TurnOutcome | None = None
        self.moving = False
        self.acked: int | None = None
        turn = carried.turn
        if turn is not None:  # this run began mid-turn: the turn goes on, its polls reach this run
            self.ended = self.turn_seq = turn.seq
            self.running = self.movable = self.turn_told = True
            self.turn_id, self.turn_offset, self.polled = turn.turn_id, turn.offset, turn.base
            self.interrupts[turn.seq] = list(turn.interrupts)

    def result(self, last: TurnResult | None) -> TreeResult:
        input = self.input
        if last is None:
            return TreeResult(session_id=input.session_id, stop_reason="completed")
        return TreeResult(
            session_id=input.session_id, stop_reason=last.stop_reason, notice=last.notice, output=last.output,
            output_in_log=last.output_in_log, error=last.error, violations=list(self.violations),
            fences_engaged=list(self.engaged), agent_key=self.key, epoch=input.epoch,
            released=sorted(self.released),
            budget=self.ledger.budget.summary() if input.parent_id is None else {},
        )

    def continue_due(self) -> bool:
        """An agent's run continues as new between turns, before the server's limits: when
        Temporal suggests it, its history reached `temporal.continueAsNewAfter` events or it took
        `temporal.continueAsNewUpdates` updates. Only while it has work ahead (parked, waking
        deliveries pending, or children resident) and no turn runs, no interrupt waits for the
        next turn and it is not releasing. Before HANDOVER_PATCH: only a child, no child resident."""
        if self.running or self.releasing or not self.ended or self.residents.settling:
            # `not self.ended`: each run takes at least one turn, so runs cannot chain idly;
            # `settling`: the watcher settles a child without a handle (WATCH_PATCH) first.
            return False
        if not self.anywhere and (self.input.parent_id is None or self.residents):
            return False
        if not (self.parked or self.queue.waking() or self.residents) or self.interrupts.get(self.ended):
            return False
        info = workflow.info()
        run = self.input.run
        limit = run.continue_as_new_after
        due = (info.is_continue_as_new_suggested() or (limit is not None and info.get_current_history_length() >= limit)
               or (self.anywhere and self.updates >= run.continue_as_new_updates))
        # The new run's input carries the pending deliveries by value: not past a page (the next
        # turn takes them first, and the run continues after it).
        return due and not (self.paged and self.queue.pending_bytes() > PAGE_BYTES)

    def move_due(self) -> bool:
        """A run continues as new mid-turn (its turn in a workflow of its own, TURN_RUN_PATCH) by
        the rules of `continue_due`, once it holds MOVE_FLOOR events of its own (so runs cannot
        chain on a tiny `temporal.continueAsNewAfter`), not while releasing or settling, and only
        while what arrived past the turn's polls fits the new run's input."""
        if not (self.running and self.movable and self.turn_id) or self.releasing or self.closing:
            return False
        if self.stopped or self.residents.settling:
            return False
        info = workflow.info()
        length = info.get_current_history_length()
        if length < MOVE_FLOOR:
            return False
        run = self.input.run
        limit = run.continue_as_new_after
        due = (info.is_continue_as_new_suggested() or (limit is not None and length >= limit)
               or self.updates >= run.continue_as_new_updates)
        return due and self.queue.bytes_from(self.polled) <= PAGE_BYTES // 2

    def moved_turn(self) -> TurnInFlight:
        """The running turn as the new run takes it on: its deliveries from the turn's ack on."""
        assert self.turn_id is not None and self.acked is not None
        return TurnInFlight(seq=self.turn_seq, offset=self.turn_offset, base=self.acked, turn_id=self.turn_id,
                            interrupts=list(self.interrupts.get(self.turn_seq, [])))

    def carry(self, runs: int, homes: Homes, turn: TurnInFlight | None = None) -> TreeInput:
        """The new run's input: between turns the pending deliveries, indexed from 0; mid-turn
        (`turn`) those from the turn's ack on, indexed as here."""
        quiet = self.queue.quiet if turn is not None else max(0, self.queue.quiet - self.queue.handed)
        carried = Carried(parked=list(self.parked), told_stalled=self.told_stalled,
                          violations=list(self.violations), fences_engaged=list(self.engaged), agent_key=self.key,
                          runs=runs + 1, seen=self.seen, parent_moved=self.parent_moved,
                          **self.residents.carry(), **self.ledger.carry(),
                          facts=list(self.board.facts), fact_last=self.board.carried_last(),
                          quiet=quiet, turn=turn, **homes.carry(self.residents))
        deliveries = self.queue.after(turn.base) if turn is not None else self.queue.pending()
        return dataclasses.replace(self.input, deliveries=deliveries, carried=carried,
                                   home_queue=homes.mine, known_homes=list(homes.known), claimed=homes.claimed)

    def due(self) -> bool:
        """Something for the main loop to do (see `run`)."""
        if self.input.parent_id is not None and self.stall_changed():
            return True
        if self.anywhere and self.continue_due():  # e.g. a root waiting on children, its updates spent
            return True
        if self.releasing:
            return not self.residents
        return self.queue.waking() or self.release_due() or (not self.residents and not self.parked)

    def stall_state(self) -> ChildState:
        """Stalled: no turn runs, nothing waking is pending, and the agent is parked or waits only
        on stalled children (every resident descendant parked or waiting on parked ones)."""
        quiet = not self.running and not self.queue.waking() and not self.releasing
        stalled = quiet and bool(self.parked or self.residents) and self.residents.stalled_below()
        parked = [self.input.session_id] if self.parked else []
        if stalled:
            parked.extend(self.residents.parked_below())
        return ChildState(child_id=self.input.session_id, stalled=stalled, parked=sorted(parked) if stalled else [],
                          seen=self.seen)

    def stall_changed(self) -> bool:
        state = self.stall_state()
        told = self.told_stalled
        return (told.stalled if told is not None else False) != state.stalled or (
            told is not None and told.parked != state.parked)

    def release_due(self) -> bool:
        """The root of a stalled tree under `run.parked: release` lets its parked work go."""
        return (self.input.parent_id is None and self.input.run.parked == "release" and not self.releasing
                and bool(self.residents) and self.stall_state().stalled)

    def status(self) -> str:
        """`list_agents`' status of this agent (§12.2): `ready` once its run is closing (a query
        of a closed run replays to its end), else running, parked or idle (resident otherwise)."""
        if self.closing:
            return "ready"
        if self.running or self.queue.waking():
            return "running"
        return "parked" if self.parked else "idle"

    def view(self) -> AgentView:
        """The agent as `run.status` / `subagent.list` show it, and its stall (the root's is the
        tree's: the client prints T-CLI-STALLED and the `waiting` record from it)."""
        who = self.input
        stall = self.stall_state()
        return AgentView(
            session_id=who.session_id, parent_id=who.parent_id, label=(who.descriptor or {}).get("label"),
            depth=who.depth, status=self.status(), resident=list(self.residents),
            stalled=stall.stalled, parked=list(stall.parked),
            shutting_down=self.closing or self.releasing)

    def engage(self, engaged: list[bool]) -> None:
        if len(self.engaged) < len(engaged):
            self.engaged.extend([False] * (len(engaged) - len(self.engaged)))
        for i, flag in enumerate(engaged):
            self.engaged[i] = self.engaged[i] or flag
