"""A turn's side of its workflows (`TurnLink`, the `WorkflowLink` of backends.py that turn.py's `run_turn` uses): updates on the
workflow that runs the turn, signals and batched updates on the root (charges, the fence board),
and the retries of flow control (a refused update under backpressure, a run that was closing).
Runs in the worker process, outside the workflow sandbox.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

from temporalio import activity
from temporalio.client import Client, WorkflowHandle
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from dsh.loader.engines.control import admitted, interrupt_workflow, workflow_status
from dsh.loader.engines.started import workflow_children
from dsh.loader.engines.long_polls import board_after, resent, unless_cancelled
from dsh.loader.engines.refusals import Backoff, workflow_gone
from dsh.loader.engines.wire import (
    Answer, Charge, Charged, ChildRef, Delivery, Interrupt, MessageChild, Poll, PollReply, StartChild, TreeResult,
)
from dsh.loader.engines.workflow import AgentWorkflow

__all__ = ["OTHER_UPDATES", "TurnLink"]

logger = logging.getLogger(__name__)


# Temporal holds at most 10 updates in flight on one workflow (more are refused, ResourceExhausted,
# and the client retries them with a backoff of seconds: the ~10 s stalls; issue 12 item 7). A turn
# keeps its two long-polls and one batch of child starts in flight, and at most this many other
# updates (send_message, report) on its workflow, so callers from elsewhere (interrupts, `dsh send`,
# other turns' board polls on the root) keep room.
OTHER_UPDATES = 4
# A turn whose run has spent its updates asks for deliveries by query this often: a notice or an
# interrupt reaches it at most this late (a long-poll update answers at once).
QUERY_POLL = 0.25
# Signals of fence facts sent before the turn gives a batch up (its log says so).
PUBLISH_TRIES = 6


class TurnLink:
    """A turn's side of its workflow. Child starts are batched: the first `start_child` goes out
    at once, the ones asked while a batch is in flight go together in the next (update
    `start_children`), so a reply of N `subagent` calls costs a few updates, not N."""

    def __init__(self, client: Client, handle: WorkflowHandle[AgentWorkflow, TreeResult],
                 root: WorkflowHandle[AgentWorkflow, TreeResult], seq: int) -> None:
        self.client = client
        self.handle = handle
        self.root = root
        self.seq = seq
        self.source = f"{handle.id}#{seq}"  # this turn, as the fence board knows its facts
        self._others = asyncio.Semaphore(OTHER_UPDATES)
        self._starts: _Batched[StartChild, bool] = _Batched(self._send_starts)
        self._by_query = False  # the run's updates are spent: poll by query (`poll`)
        self._moving = False  # its run is continuing as new mid-turn, told what the log holds (`poll`)

    async def poll(self, after: int, interrupts: int, *, durable: bool = False, pages: bool = False) -> PollReply:
        """The turn's long-poll (update `deliveries_after`); once the run's updates are spent
        (`PollReply.spent`), or an update poll failed, a query asked every `QUERY_POLL` seconds
        until it answers something. Both are read-only, so a failed one is asked again: a poll
        that raised would leave the rest of the turn without its deliveries and interrupts.

        A run continuing as new mid-turn answers `moved` (README "A turn across runs"): the turn
        flushes its log and says so (`durable`, always an update), and from that answer on asks by
        query until a run answers that is not moving (the new one, or this one, the move off)."""
        poll = Poll(seq=self.seq, after=after, interrupts=interrupts, durable=durable, pages=pages)
        if durable or not self._by_query:
            try:
                reply = await self.handle.execute_update(AgentWorkflow.deliveries_after, poll)
            except Exception as exc:
                unless_cancelled(exc)
                # Refused (the run's updates spent elsewhere, a server under load): by query from now.
                logger.warning("the long-poll of %s failed, polling by query: %r", self.handle.id, exc)
                self._by_query = True
            else:
                self._moving = durable and reply.moved
                self._by_query = reply.spent or self._moving
                return reply
        failing = 0
        while True:
            try:
                reply = await self.handle.query(AgentWorkflow.deliveries_now, poll)
            except Exception as exc:
                unless_cancelled(exc)
                # A query waits for the worker to answer it, and a busy one (a big fan-out's
                # activations in the same process) can time it out: the next one is asked anyway.
                failing += 1
                if failing == 1 or failing % 100 == 0:
                    logger.warning("polling %s by query failed (%d in a row): %r", self.handle.id, failing, exc)
            else:
                failing = 0
                if reply.moved != self._moving or reply.deliveries or reply.interrupts or reply.ended:
                    # moved: the turn says what its log holds; no longer moved: by update again, unless spent
                    self._by_query = reply.spent or reply.moved
                    self._moving = False
                    return reply
            await asyncio.sleep(QUERY_POLL)  # a query cannot wait for the next delivery: asked again

    async def message_child(self, request: MessageChild) -> Answer:
        async with self._others:
            return await admitted(lambda: self.handle.execute_update(AgentWorkflow.message_child, request))

    async def interrupt(self, target: str, request: Interrupt) -> Answer | None:
        return await interrupt_workflow(self.client, self.root.id, target, request)

    async def statuses(self, ids: list[str]) -> dict[str, str]:
        found = await asyncio.gather(*(workflow_status(self.client, self.root.id, i) for i in ids))
        return dict(zip(ids, found, strict=True))

    async def started_by(self, ids: list[str]) -> dict[str, list[ChildRef]]:
        found = await asyncio.gather(*(workflow_children(self.client, self.root.id, i) for i in ids))
        return dict(zip(ids, found, strict=True))

    async def start_child(self, request: StartChild) -> bool:
        return await self._starts.ask(request)

    async def _send_starts(self, batch: list[StartChild]) -> list[bool]:
        # Sent again if it met the run continuing as new (mid-turn): a start asked twice is made once.
        refused = await resent(lambda: _pressed(lambda: self.handle.execute_update(AgentWorkflow.start_children, batch)))
        return [r.child_id not in (refused or ()) for r in batch]  # None: a worker before RUNNING_LIMIT

    async def running_children(self) -> int:
        return await self.handle.query(AgentWorkflow.running_children)

    async def report(self, delivery: Delivery) -> None:
        async with self._others:
            await admitted(lambda: self.handle.execute_update(AgentWorkflow.report, delivery))

    def heartbeat(self) -> None:
        activity.heartbeat()

    async def publish_facts(self, facts: list[list[Any]]) -> None:
        """Sent again after a refusal (a server under load): the board counts a fact once, and a
        fact lost here is one a held agent waits for until its fence times out."""
        backoff = Backoff()
        for attempt in range(1, PUBLISH_TRIES + 1):
            try:
                await self.root.signal(AgentWorkflow.fence_facts, args=[facts, self.source])
                return
            except Exception as exc:
                unless_cancelled(exc)
                if workflow_gone(exc) or attempt == PUBLISH_TRIES:
                    raise
                logger.info("publishing fence facts to %s failed (try %d), sent again: %r", self.root.id, attempt, exc)
            await backoff.wait()

    async def facts_after(self, after: int) -> list[list[Any]]:
        return await board_after(self.root, after, self.source)

    async def charge(self, charge: Charge) -> Charged:
        if charge.kind == "tokens":  # nothing to answer: a signal, outside the update limit
            await self.root.signal(AgentWorkflow.spent, charge.tokens)
            return Charged()
        return await _charges(self.root).ask(charge)


_CHARGES: dict[str, _Batched[Charge, Charged]] = {}  # root workflow id -> its batcher here, while busy
# This process as a source of charges, and its batches' numbers (one batch in flight per root).
_SOURCE = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
_BATCHES = itertools.count(1)
# Queries that found their batch not yet counted, before the charge fails loudly.
CHARGE_READS = 20


def _charges(root: WorkflowHandle[AgentWorkflow, TreeResult]) -> _Batched[Charge, Charged]:
    """This worker process's charges to one root's budget, batched: signal `charges`, then query
    `charged` for the answers. A signal, not an update: a server caps the updates of one workflow
    run (2,000 by default) and a tree's charges are one per model request and spawn; a query
    adds nothing to history and sees every signal accepted before it (the server answers it
    after the workflow task that takes the signal)."""
    found = _CHARGES.get(root.id)
    if found is None:
        async def send(batch: list[Charge]) -> list[Charged]:
            number = next(_BATCHES)
            await root.signal(AgentWorkflow.charges, args=[_SOURCE, number, batch])
            return await _answers(root, number)

        def idle() -> None:
            if _CHARGES.get(root.id) is found:
                del _CHARGES[root.id]

        found = _CHARGES[root.id] = _Batched(send, on_idle=idle)
    return found


async def _answers(root: WorkflowHandle[AgentWorkflow, TreeResult], number: int) -> list[Charged]:
    backoff = Backoff(cap=1.0)
    for _ in range(CHARGE_READS):
        answers = await root.query(AgentWorkflow.charged, args=[_SOURCE, number])
        if answers is not None:
            return answers
        # Flow control, not an ordering: a query answered before the signal's workflow task ran.
        logger.info("charge batch %d of %s not counted yet on %s", number, _SOURCE, root.id)
        await backoff.wait()
    # Typed, and retryable: the turn activity fails and Temporal runs it again.
    raise ApplicationError(f"the root {root.id} never counted charge batch {number} of {_SOURCE}",
                           type="CHARGE_UNCOUNTED")


_Q = TypeVar("_Q")
_A = TypeVar("_A")


class _Batched(Generic[_Q, _A]):
    """Requests batched into updates: the first goes out at once, those asked while a batch is in
    flight go together in the next, one batch in flight at a time (Temporal admits 10 updates in
    flight per workflow and 2,000 per run). `send` answers a batch with one answer per request,
    in order; each caller gets its own, or its batch's error."""

    def __init__(self, send: Callable[[list[_Q]], Awaitable[list[_A]]],
                 on_idle: Callable[[], None] | None = None) -> None:
        self._send = send
        self._on_idle = on_idle
        self._queue: list[tuple[_Q, asyncio.Future[_A]]] = []
        self._sending: asyncio.Task[None] | None = None

    async def ask(self, request: _Q) -> _A:
        done: asyncio.Future[_A] = asyncio.get_running_loop().create_future()
        self._queue.append((request, done))
        if self._sending is None:
            self._sending = asyncio.create_task(self._drain())
        return await done

    async def _drain(self) -> None:
        try:
            while self._queue:
                # --- S-batch begin --- (take the batch: no await between the read and the reset)
                batch, self._queue = self._queue, []
                # --- S-batch end ---
                try:
                    answers = await self._send([r for r, _ in batch])
                except BaseException as exc:
                    for _, done in batch:
                        if not done.done():
                            done.set_exception(exc)
                    if not isinstance(exc, Exception):
                        raise
                    continue
                for (_, done), answer in zip(batch, answers, strict=True):
                    if not done.done():
                        done.set_result(answer)
        finally:
            self._sending = None
            for _, done in self._queue:  # only when this task itself was cancelled
                done.cancel()
            self._queue = []
            if self._on_idle is not None:
                self._on_idle()


_T = TypeVar("_T")


async def _pressed(call: Callable[[], Awaitable[_T]]) -> _T:
    """An update the server refuses for backpressure (RESOURCE_EXHAUSTED: a workflow admits only
    so many in-flight updates, 10 on the dev server, and a fan-out's turns all charge the root) is
    sent again after a capped, jittered backoff. Flow control, not an ordering: the update is
    refused before the workflow sees it, so sending it again is its first delivery."""
    backoff = Backoff()
    while True:
        try:
            return await call()
        except RPCError as exc:
            if exc.status != RPCStatusCode.RESOURCE_EXHAUSTED:
                raise
        await backoff.wait()
