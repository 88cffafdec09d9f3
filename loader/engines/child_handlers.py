"""An agent workflow's handlers for its children (loader/engines/README.md, "The mapping",
"Children running at once"): starting them, where their logs live, and their results entered
once. Workflow code (deterministic, no I/O).

`ChildHandlers` is a base class of `AgentWorkflow`, whose `__init__` sets the state; the SDK
collects inherited handlers under their registered names (root_handlers.py says why that changes
no command).
"""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio import workflow

from dsh.loader.engines.root_handlers import RootHandlers
from dsh.loader.engines.wire import Delivery, StartChild, TreeResult

__all__ = ["ChildHandlers"]


class ChildHandlers(RootHandlers):
    """Handlers of the children this agent runs (residents.py keeps the table)."""

    # -- children (residents.py) ------------------------------------------------------------
    @workflow.update
    async def start_child(self, request: StartChild) -> None:
        """`subagent` in a running turn: start the child's first epoch; returns once it started."""
        self._s.updates += 1
        if request.child_id in self._residents:
            return  # a retried turn asked again
        await self._start(request.child_id, request.descriptor, Delivery(request.prompt), request.depth, 1, request.header)

    @workflow.update
    async def start_children(self, requests: list[StartChild]) -> list[str]:
        """`subagent` calls of a running turn, batched: one update starts them all (their start
        commands go out in one workflow task) and returns once every one has started. Temporal
        holds at most 10 updates in flight on a workflow and 2,000 per run; one update per child
        refused starts at N=300 (issue 12 item 7). Answers the ids refused for the running limit
        (`temporal.maxRunningChildren`; the turn admits none past it, so only a parallel cold
        resume from elsewhere can leave one here)."""
        self._s.updates += 1
        fresh = [r for r in requests if r.child_id not in self._residents]  # a retried turn asked again
        started = await asyncio.gather(*(self._start(r.child_id, r.descriptor, Delivery(r.prompt), r.depth, 1, r.header)
                                         for r in fresh))
        return [r.child_id for r, ok in zip(fresh, started, strict=True) if not ok]

    @workflow.query
    def running_children(self) -> int:
        """The agent's children running now (this run's started and not closed, and the resident
        ones an earlier run started): what a turn near `temporal.maxRunningChildren` asks before
        it admits another `subagent`."""
        return self._residents.open()

    async def _start(self, child_id: str, descriptor: dict[str, Any], first: Delivery, depth: int, epoch: int,
                     header: dict[str, Any] | None = None) -> bool:
        return await self._residents.start(child_id, descriptor, first, depth, epoch, self._settle, header)

    @workflow.signal
    def homed(self, session_id: str, queue: str) -> None:
        """A session of the tree found its log a home its parent did not know (the root: the
        stream reads a page on each home, query `homes`)."""
        self._homes.learn(session_id, queue)

    @workflow.query
    def homes(self) -> list[str]:
        return list(self._homes.tree)

    @workflow.signal
    async def settled(self, result: TreeResult) -> None:
        """A child's run ended (its result, sent before it returns): the notice reaches the run
        current now, also one that did not start the child (continued as new since)."""
        await self._settle(result.session_id, result)

    async def _settle(self, child_id: str, result: TreeResult) -> None:
        """A child's result entered once: it comes as signal `settled` and, to the run that started
        the child, as the child's result too; the notice id (`notice_id(child, epoch)`) tells."""
        key = str(result.notice["id"]) if result.notice is not None else f"{child_id}#{result.epoch}"
        self._homes.learn(child_id, result.home_queue, claimed=result.claimed)  # its next epoch and resume check go there
        self._homes.heard_from(child_id, result.known_homes)  # and its next epoch's resume checks
        if not self._residents.enter(key, child_id):
            return
        self._s.violations.extend(result.violations)
        self._s.engage(result.fences_engaged)
        if result.notice is not None:
            # A closing agent takes the notice as an inject and starts no turn for it (§9.2 step 4).
            self._queue.accept(Delivery(result.notice, send="inject" if self._s.releasing else "notice"))
        run = self._input.run
        if run.fences and result.agent_key is not None and (
                run.fence_agents is None or result.agent_key in run.fence_agents):
            # The fence fact `settled` (after the notice, as the local settlement edge): recorded
            # before this child stops being resident, so the tree cannot close without it.
            fact: list[Any] = ["settled", result.agent_key, result.epoch or 0]
            if self._input.parent_id is None:
                self.fence_facts([fact])
            else:
                await workflow.get_external_workflow_handle(run.root_id).signal(RootHandlers.fence_facts, [fact])
        self._residents.drop(child_id)
