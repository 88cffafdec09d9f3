"""`dsh worker` (issue 12 item 3): a Temporal worker serving dsh's workflow and turn activity.

The turn activity is `run_turn` (turn.py) over a `WorkflowLink` made of this client: updates on the
workflow that runs the turn, and the activity heartbeat.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import os
import random
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from temporalio import activity
from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import Worker

from dsh.loader.engines.backends import resume_check
from dsh.loader.engines.client import connect
from dsh.loader.engines.control import interrupt_workflow, workflow_status
from dsh.loader.engines.homes import home_id, home_queue
from dsh.loader.config import ModelConfig
from dsh.loader.engines.pages import Page, PageAsk
from dsh.loader.engines.projection import has_lines, read_page
from dsh.loader.engines.reader import StreamReader
from dsh.loader.engines.settle import enter_leftovers, settle_failed
from dsh.loader.engines.turn import LiveModel, create_log, run_turn
from dsh.loader.engines.wire import (
    Answer,
    Charge,
    Charged,
    Delivery,
    FailedRun,
    Leftovers,
    Homed,
    Interrupt,
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
)
from dsh.loader.engines.workflow import AgentWorkflow
from dsh.loader.errors import ConfigError
from dsh.loader.session import SessionStore

if TYPE_CHECKING:
    from dsh.loader.models.openai import ModelSettings

__all__ = ["TurnActivities", "Workers", "connect", "make_worker", "run_worker"]  # connect: client.py's

logger = logging.getLogger(__name__)


# Temporal holds at most 10 updates in flight on one workflow (more are refused, ResourceExhausted,
# and the client retries them with a backoff of seconds: the ~10 s stalls; issue 12 item 7). A turn
# keeps its two long-polls and one batch of child starts in flight, and at most this many other
# updates (send_message, report) on its workflow, so callers from elsewhere (interrupts, `dsh send`,
# other turns' board polls on the root) keep room.
OTHER_UPDATES = 4


class _Link:
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
        self._starts: _Batched[StartChild, None] = _Batched(self._send_starts)

    async def poll(self, after: int, interrupts: int) -> PollReply:
        return await self.handle.execute_update(
            AgentWorkflow.deliveries_after, Poll(seq=self.seq, after=after, interrupts=interrupts))

    async def message_child(self, request: MessageChild) -> Answer:
        async with self._others:
            return await self.handle.execute_update(AgentWorkflow.message_child, request)

    async def interrupt(self, target: str, request: Interrupt) -> Answer | None:
        return await interrupt_workflow(self.client, self.root.id, target, request)

    async def statuses(self, ids: list[str]) -> dict[str, str]:
        found = await asyncio.gather(*(workflow_status(self.client, self.root.id, i) for i in ids))
        return dict(zip(ids, found, strict=True))

    async def start_child(self, request: StartChild) -> None:
        await self._starts.ask(request)

    async def _send_starts(self, batch: list[StartChild]) -> list[None]:
        await _pressed(lambda: self.handle.execute_update(AgentWorkflow.start_children, batch))
        return [None] * len(batch)

    async def report(self, delivery: Delivery) -> None:
        async with self._others:
            await self.handle.execute_update(AgentWorkflow.report, delivery)

    def heartbeat(self) -> None:
        activity.heartbeat()

    async def publish_facts(self, facts: list[list[Any]]) -> None:
        await self.root.signal(AgentWorkflow.fence_facts, args=[facts, self.source])

    async def facts_after(self, after: int) -> list[list[Any]]:
        return await _resent(lambda: self.root.execute_update(AgentWorkflow.fence_facts_after, args=[after, self.source]))

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
    delay = 0.05
    for _ in range(CHARGE_READS):
        answers = await root.query(AgentWorkflow.charged, args=[_SOURCE, number])
        if answers is not None:
            return answers
        # Flow control, not an ordering: a query answered before the signal's workflow task ran.
        logger.info("charge batch %d of %s not counted yet on %s", number, _SOURCE, root.id)
        await asyncio.sleep(random.uniform(0.0, delay))
        delay = min(2 * delay, 1.0)
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
    delay = 0.05
    while True:
        try:
            return await call()
        except RPCError as exc:
            if exc.status != RPCStatusCode.RESOURCE_EXHAUSTED:
                raise
        await asyncio.sleep(random.uniform(0.0, delay))
        delay = min(2 * delay, 2.0)


# What the server says of an update that met a run closing (continuing as new), unanswered.
CLOSING_RUN = ("aborted by closing workflow", "unexpected workflow task failure")


def _run_closed(exc: BaseException) -> bool:
    """The update met the end of the run it reached (the workflow continued as new): refused
    before it was accepted (also when the server refused the closing task for a signal that came
    meanwhile: "unexpected workflow task failure"), or accepted and never answered. Either way
    no run has answered it, so a read-only update is sent again (to the workflow id: the run
    current now)."""
    if isinstance(exc, RPCError):
        return any(text in exc.message for text in CLOSING_RUN)
    if isinstance(exc, WorkflowUpdateFailedError):
        cause = exc.cause
        return isinstance(cause, ApplicationError) and "AcceptedUpdateCompletedWorkflow" in str(cause)
    return False


async def _resent(call: Callable[[], Awaitable[_T]]) -> _T:
    """A read-only long-poll, sent again while the runs it reaches continue as new."""
    while True:
        try:
            return await call()
        except (RPCError, WorkflowUpdateFailedError) as exc:
            if not _run_closed(exc):
                raise
            logger.info("an update met a run continuing as new; sent again: %r", exc)


class TurnActivities:
    """The activity needs the client to reach its own workflow, so it is a bound method; it also
    holds this worker's live model (its settings and environment: the key never leaves here)."""

    def __init__(self, client: Client, live: LiveModel, home: Path | None = None, home_queue: str | None = None) -> None:
        self.client = client
        self.live = live
        self.home = str(home.resolve()) if home is not None else None
        self.home_queue = home_queue  # this home's queue (homes.py); None: every home is the submitter's

    def _at_home(self, home: str) -> str:
        """The tree's home on this machine: the worker's own `--home` when it was given one (every
        worker of a tree shares it), else the submitter's."""
        return self.home if self.home is not None else home

    @activity.defn(name="dsh.turn")
    async def turn(self, spec: TurnInput) -> TurnResult:
        run = spec.agent.run
        if self._at_home(run.home) != run.home:
            agent = dataclasses.replace(spec.agent, run=dataclasses.replace(run, home=self._at_home(run.home)))
            spec = dataclasses.replace(spec, agent=agent)
        workflow_id = activity.info().workflow_id
        assert workflow_id is not None, "dsh.turn runs only inside the agent workflow"
        handle = self.client.get_workflow_handle_for(AgentWorkflow.run, workflow_id)
        root = self.client.get_workflow_handle_for(AgentWorkflow.run, spec.agent.run.root_id)
        alive = asyncio.create_task(_keep_alive(spec.agent.run.heartbeat_seconds / 3))
        try:
            return await run_turn(spec, _Link(self.client, handle, root, spec.seq),
                                  retry=activity.info().attempt > 1, live=self.live)
        except ConfigError as exc:
            # This worker's configuration (a missing key): retrying cannot help, the client says why.
            raise ApplicationError(exc.message, type=exc.code, non_retryable=True) from exc
        finally:
            alive.cancel()

    @activity.defn(name="dsh.create_session")
    async def create_session(self, agent: TreeInput) -> Homed:
        """A session's first activity (pinning.py): its log made here, on this worker's home, as
        the local engine makes it (a child: header, then descriptor, §8.2); every later activity of
        the session runs on the queue answered. A log already here (a retry) is left as it is."""
        await create_log(dataclasses.replace(agent, run=dataclasses.replace(agent.run, home=self._at_home(agent.run.home))))
        return Homed(home_queue=self.home_queue)

    @activity.defn(name="dsh.resume_check")
    async def resume_check(self, check: ResumeCheck) -> ResumeFound:
        """The cold-resume header checks (backends.resume_check), off the event loop."""
        found = await asyncio.to_thread(resume_check, dataclasses.replace(check, home=self._at_home(check.home)))
        if found.code is None:
            found.home_queue = self.home_queue  # the log is here: the next epoch runs here
        return found

    @activity.defn(name="dsh.settle_failed")
    async def settle_failed(self, failed: FailedRun) -> TreeResult:
        """A child's failed run, settled from its log (settle.py)."""
        home = self._at_home(failed.home)
        settled = await settle_failed(dataclasses.replace(failed, home=home))
        if SessionStore(Path(home)).exists(failed.child_id):  # else settled from the failure alone
            settled.home_queue = self.home_queue
        return settled

    @activity.defn(name="dsh.enter_leftovers")
    async def enter_leftovers(self, leftovers: Leftovers) -> int:
        """A failing root's unread deliveries, entered into its log as injects (settle.py)."""
        return await enter_leftovers(dataclasses.replace(leftovers, home=self._at_home(leftovers.home)))

    @activity.defn(name="dsh.await_closed")
    async def await_closed(self, workflow_ids: list[str]) -> None:
        """Each workflow's current run closed (a failed child's released children), heartbeating."""
        for workflow_id in workflow_ids:
            handle = self.client.get_workflow_handle(workflow_id)
            waiting = asyncio.ensure_future(handle.result())
            while not waiting.done():
                activity.heartbeat()
                await asyncio.wait({waiting}, timeout=CLOSED_BEAT)
            if not waiting.cancelled():
                waiting.exception()  # closed, however it ended: retrieved, not raised

    @activity.defn(name="dsh.stream_page")
    async def stream_page(self, ask: PageAsk) -> Page:
        """A page of a tree's logs for a client without this home (stream.py): read from the
        cursor; with nothing new, read again every STREAM_EVERY, heartbeating, until a line comes
        or `wait_seconds` passed (a long-poll: the client does not spin)."""
        sessions = Path(self._at_home(ask.home)) / "sessions"
        headers = _HEADERS.setdefault(str(sessions), {})
        if len(headers) > HEADERS_KEPT:
            headers.clear()  # a cache only: the headers are read again
        loop = asyncio.get_running_loop()
        deadline = loop.time() + ask.wait_seconds
        while True:
            page = await asyncio.to_thread(read_page, sessions, ask.root_id, ask.cursor, headers,
                                           ask.max_bytes, ask.max_lines)
            if has_lines(page) or loop.time() >= deadline:
                return page
            activity.heartbeat()
            await asyncio.sleep(STREAM_EVERY)  # a periodic read of a quiet log, not an ordering


# The page activity's reads of a quiet tree while it waits (the stream's latency only).
STREAM_EVERY = 0.05
# Per home, the parents of the session directories outside a tree (stream_page's scans).
_HEADERS: dict[str, dict[str, str | None]] = {}
HEADERS_KEPT = 100_000


CLOSED_BEAT = 5.0  # seconds between heartbeats of dsh.await_closed


async def _keep_alive(every: float) -> None:
    """Heartbeat while this process runs the turn, chunks or not: a turn held by a fence, a tool or a
    slow first token is alive as long as its worker is. A timer, not an ordering: it only keeps
    the server from retrying a live turn; a dead worker stops it with everything else."""
    while True:
        activity.heartbeat()
        await asyncio.sleep(every)


class Workers:
    """One worker process's Temporal workers: the shared task queue (workflows and any session's
    first activity) and, with a home, its home queue (the activities of the sessions whose logs
    are here, README "Homes"). Entered and left together."""

    def __init__(self, workers: list[Worker]) -> None:
        self.workers = workers

    async def __aenter__(self) -> Workers:
        for w in self.workers:
            await w.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        for w in reversed(self.workers):
            await w.__aexit__(None, None, None)


def make_worker(client: Client, task_queue: str, *, max_concurrent_activities: int = 100,
                model: ModelSettings | None = None, environ: Mapping[str, str] | None = None,
                home: Path | None = None) -> Workers:
    """A worker; `model` and `environ` build its live provider (default: the default `model.*`
    settings and this process's environment); `home`, the trees' home here (default: each
    submitter's `--home`), which it also serves as `<task_queue>@<home id>`."""
    live = LiveModel(model if model is not None else ModelConfig(), environ if environ is not None else os.environ)
    own = home_queue(task_queue, home_id(home)) if home is not None else None
    activities = TurnActivities(client, live, home, own)
    served: list[Callable[..., Any]] = [activities.turn, activities.create_session, activities.resume_check,
                                        activities.settle_failed, activities.enter_leftovers, activities.await_closed,
                                        activities.stream_page]
    workers = [Worker(client, task_queue=task_queue, workflows=[AgentWorkflow, StreamReader], activities=served,
                      max_concurrent_activities=max_concurrent_activities)]
    if own is not None:
        workers.append(Worker(client, task_queue=own, activities=served,
                              max_concurrent_activities=max_concurrent_activities))
    return Workers(workers)


async def run_worker(client: Client, task_queues: Sequence[str], stop: asyncio.Event,
                     model: ModelSettings | None = None, home: Path | None = None) -> None:
    """Serve until `stop` is set, then finish in-flight tasks (Worker's own graceful shutdown)."""
    workers = [make_worker(client, q, model=model, home=home) for q in task_queues]
    for w in workers:
        await w.__aenter__()
    try:
        await stop.wait()
    finally:
        for w in workers:
            await w.__aexit__()
