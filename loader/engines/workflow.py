"""The agent workflow (loader/engines/README.md): one run per root tree or per child epoch.

Workflow code: deterministic bookkeeping only, no I/O, no clock, no dsh runtime import (the sandbox
re-imports this module; `wire` is passed through). The turns themselves run in the `dsh.turn`
activity (turn.py), which reaches back here through the two updates.

Invariants:
- `_deliveries` only grows, in arrival order (history order): it is the agent's inbox as accepted;
  `_handed` counts the prefix some turn activity has taken. Pending = `_deliveries[_handed:]`.
- one turn activity at a time (`_turn_seq` is the running one's number, `_ended` the count of ended
  ones), so the long-poll of an ended turn returns at once and never holds the workflow open;
- a child is resident from `start_child` until its result (the settlement notice) is appended to
  `_deliveries`, once: a child workflow's result is recorded once in this history.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from dsh.loader.engines.wire import (
        TURN_TIMEOUT,
        Delivery,
        Poll,
        StartChild,
        TreeInput,
        TreeResult,
        TurnInput,
        TurnResult,
        child_workflow_id,
    )

__all__ = ["AgentWorkflow"]

TURN_ACTIVITY = "dsh.turn"
# A turn whose worker died is retried on another (issue 12 item 5); a turn that fails the same way
# five times is a bug, not a fault, and fails the tree instead of looping.
TURN_RETRY = RetryPolicy(maximum_attempts=5)


@workflow.defn(name="dsh.agent")
class AgentWorkflow:
    def __init__(self) -> None:
        self._deliveries: list[Delivery] = []
        self._handed = 0
        self._turn_seq = -1
        self._ended = 0
        self._resident: dict[str, asyncio.Task[None]] = {}
        self._input: TreeInput | None = None
        self._violations: list[dict[str, Any]] = []
        self._engaged: list[bool] = []
        self._key: str | None = None
        # The fence board (root only, transcripts with fences): every fence fact of the tree, each
        # once, in arrival order; turns mirror it through `fence_facts_after` (README "Fences").
        self._facts: list[list[Any]] = []
        self._seen_facts: set[tuple[Any, ...]] = set()
        self._closing = False

    @workflow.run
    async def run(self, input: TreeInput) -> TreeResult:
        self._input = input
        self._deliveries.extend(input.deliveries)
        last: TurnResult | None = None
        while True:
            # Quiescence (SPEC §17.2, S11 here): no turn runs, nothing pending, no child resident.
            # An injected delivery alone wakes no one (SPEC §6.2): it waits for a waking one.
            await workflow.wait_condition(lambda: self._waking() or not self._resident)
            if not self._waking():
                break
            offset = self._handed
            self._turn_seq = self._ended
            last = await workflow.execute_activity(
                TURN_ACTIVITY,
                TurnInput(agent=input, deliveries=self._deliveries[offset:], offset=offset, seq=self._turn_seq),
                result_type=TurnResult,
                start_to_close_timeout=TURN_TIMEOUT,
                heartbeat_timeout=timedelta(seconds=input.run.heartbeat_seconds),
                retry_policy=TURN_RETRY,
            )
            self._ended += 1
            self._handed = offset + last.taken
            self._violations.extend(last.violations)
            self._engage(last.fences_engaged)
            self._key = last.agent_key or self._key
        self._closing = True  # releases the board's long-polls of turns that have ended
        await workflow.wait_condition(workflow.all_handlers_finished)
        if last is None:
            return TreeResult(session_id=input.session_id, stop_reason="completed")
        return TreeResult(
            session_id=input.session_id,
            stop_reason=last.stop_reason,
            notice=last.notice,
            output=last.output,
            error=last.error,
            violations=list(self._violations),
            fences_engaged=list(self._engaged),
            agent_key=self._key,
            epoch=input.epoch,
        )

    def _waking(self) -> bool:
        return any(d.waking for d in self._deliveries[self._handed:])

    def _engage(self, engaged: list[bool]) -> None:
        if len(self._engaged) < len(engaged):
            self._engaged.extend([False] * (len(engaged) - len(self._engaged)))
        for i, flag in enumerate(engaged):
            self._engaged[i] = self._engaged[i] or flag

    @workflow.update
    async def deliveries_after(self, poll: Poll) -> list[Delivery]:
        """The running turn's long-poll: what arrived past `poll.after`, or [] once it has ended."""
        await workflow.wait_condition(lambda: len(self._deliveries) > poll.after or self._ended > poll.seq)
        if self._ended > poll.seq:
            return []
        return self._deliveries[poll.after:]

    @workflow.signal
    def deliver(self, delivery: Delivery) -> None:
        """A message for this agent from another workflow of the tree (a child's report)."""
        self._deliveries.append(delivery)

    @workflow.update
    async def report(self, delivery: Delivery) -> None:
        """`report` in this child's running turn: relay it to the direct parent's workflow. The
        signal is in the parent's history before this child can settle, so the report precedes
        the notice there (SPEC §11.3)."""
        assert self._input is not None and self._input.parent_id is not None
        run = self._input.run
        parent = self._input.parent_id
        target = run.root_id if parent == run.root_id else child_workflow_id(run.root_id, parent)
        await workflow.get_external_workflow_handle(target).signal(AgentWorkflow.deliver, delivery)

    @workflow.signal
    def fence_facts(self, facts: list[list[Any]]) -> None:
        """A turn anywhere in the tree recorded these fence facts (root workflow only)."""
        for fact in facts:
            if tuple(fact) not in self._seen_facts:
                self._seen_facts.add(tuple(fact))
                self._facts.append(fact)

    @workflow.update
    async def fence_facts_after(self, after: int) -> list[list[Any]]:
        """A turn's long-poll of the board: the facts past `after`, or [] once the tree closes."""
        await workflow.wait_condition(lambda: len(self._facts) > after or self._closing)
        return self._facts[after:]

    @workflow.update
    async def start_child(self, request: StartChild) -> None:
        """`subagent` in a running turn: start the child's first epoch; returns once it started."""
        assert self._input is not None
        if request.child_id in self._resident:
            return  # a retried turn asked again
        run = self._input.run
        handle = await workflow.start_child_workflow(
            AgentWorkflow.run,
            TreeInput(
                run=run, session_id=request.child_id, deliveries=[Delivery(request.prompt)],
                parent_id=self._input.session_id, depth=request.depth, descriptor=request.descriptor,
                epoch=1, cwd=self._input.cwd,
            ),
            id=child_workflow_id(run.root_id, request.child_id),
            task_queue=run.task_queue,
        )
        self._resident[request.child_id] = asyncio.create_task(self._settled(request.child_id, handle))

    async def _settled(self, child_id: str, handle: workflow.ChildWorkflowHandle[AgentWorkflow, TreeResult]) -> None:
        result = await handle
        self._violations.extend(result.violations)
        self._engage(result.fences_engaged)
        if result.notice is not None:
            self._deliveries.append(Delivery(result.notice, send="notice"))
        assert self._input is not None
        run = self._input.run
        if run.fences and result.agent_key is not None:
            # The fence fact `settled` (after the notice, as the local settlement edge): recorded
            # before this child stops being resident, so the tree cannot close without it.
            fact: list[Any] = ["settled", result.agent_key, result.epoch or 0]
            if self._input.parent_id is None:
                self.fence_facts([fact])
            else:
                await workflow.get_external_workflow_handle(run.root_id).signal(AgentWorkflow.fence_facts, [fact])
        del self._resident[child_id]
