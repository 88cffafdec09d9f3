"""`dsh worker` (issue 12 item 3): a Temporal worker serving dsh's workflow and turn activity.

The turn activity is `run_turn` (turn.py) over a `WorkflowLink` made of this client: updates on the
workflow that runs the turn, and the activity heartbeat.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from temporalio import activity
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ApplicationError, CancelledError, TerminatedError, TimeoutError
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import Worker

from dsh.loader.engines.backends import resume_check
from dsh.loader.engines.client import connect
from dsh.loader.engines.homes import home_id, home_queue
from dsh.loader.engines.link import TurnLink
from dsh.loader.config import ModelConfig
from dsh.loader.engines.pages import Page, PageAsk
from dsh.loader.engines.projection import Quiet, has_lines, read_page
from dsh.loader.engines.reader import StreamReader
from dsh.loader.engines.settle import enter_leftovers, settle_failed
from dsh.loader.engines.turn import LiveModel, run_turn
from dsh.loader.engines.turn_run import TurnRunWorkflow
from dsh.loader.engines.wire import (
    ClosedRun,
    FailedRun,
    Leftovers,
    Homed,
    ResumeCheck,
    ResumeFound,
    TreeInput,
    TreeResult,
    TurnInput,
    TurnResult,
    agent_workflow_id,
)
from dsh.loader.engines.workflow import AgentWorkflow
from dsh.loader.errors import ConfigError
from dsh.loader.session import SessionStore

if TYPE_CHECKING:
    from dsh.loader.models.openai import ModelSettings

__all__ = ["TurnActivities", "Workers", "connect", "make_worker", "run_worker"]  # connect: client.py's

logger = logging.getLogger(__name__)


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
        # The agent's workflow by id (its current run), also from a turn in a workflow of its own.
        workflow_id = agent_workflow_id(run.root_id, spec.agent.session_id)
        handle = self.client.get_workflow_handle_for(AgentWorkflow.run, workflow_id)
        root = self.client.get_workflow_handle_for(AgentWorkflow.run, spec.agent.run.root_id)
        alive = asyncio.create_task(_keep_alive(spec.agent.run.heartbeat_seconds / 3))
        try:
            return await run_turn(spec, TurnLink(self.client, handle, root, spec.seq),
                                  retry=activity.info().attempt > 1, live=self.live)
        except ConfigError as exc:
            # This worker's configuration (a missing key): retrying cannot help, the client says why.
            raise ApplicationError(exc.message, type=exc.code, non_retryable=True) from exc
        finally:
            alive.cancel()

    @activity.defn(name="dsh.create_session")
    async def create_session(self, agent: TreeInput) -> Homed:
        """A session's first activity (pinning.py): it claims this worker's home for the session's
        log and writes nothing; the session's first turn, pinned to the queue answered, makes the
        log there (turn._open_agent: header, a child's descriptor, §8.2). So a claim whose worker
        died before answering, retried on another home, leaves nothing behind: the log is made
        once, in the one home the workflow was told (README "Homes"). (Its name is the histories'.)"""
        return Homed(home_queue=self.claim(agent))

    def claim(self, agent: TreeInput) -> str | None:
        """The home queue a session's log goes to: this worker's (a seam for the tests' placement)."""
        return self.home_queue

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
            settled.claimed = True  # its log is made: a next epoch creates none
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

    @activity.defn(name="dsh.first_closed")
    async def first_closed(self, workflow_ids: list[str]) -> ClosedRun:
        """The first of these workflows (a parent's resident children that no run of it holds a
        handle to) whose run closed other than completed, heartbeating while none has. A completed
        run signalled its notice to its parent before it returned, so it is watched no more; the
        parent settles the one answered unless its notice entered (README "Failed child runs")."""
        waits = {asyncio.ensure_future(self._closed(wid)): wid for wid in workflow_ids}
        try:
            while waits:
                activity.heartbeat()
                done, _ = await asyncio.wait(set(waits), timeout=CLOSED_BEAT, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    workflow_id = waits.pop(task)
                    if (status := task.result()) != "completed":
                        return ClosedRun(workflow_id=workflow_id, status=status)
            return ClosedRun()
        finally:
            for task in waits:
                task.cancel()

    async def _closed(self, workflow_id: str) -> str:
        """How the workflow's run closed (its continue-as-new chain followed), once it has."""
        try:
            await self.client.get_workflow_handle(workflow_id).result()
        except WorkflowFailureError as exc:
            cause = exc.cause
            if isinstance(cause, TerminatedError):
                return "terminated"
            if isinstance(cause, CancelledError):
                return "cancelled"
            return "timed out" if isinstance(cause, TimeoutError) else "failed"
        except RPCError as exc:
            if exc.status != RPCStatusCode.NOT_FOUND:
                raise
            return "not found"
        return "completed"

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
        quiet = Quiet()  # this long-poll's re-reads leave a big tree's quiet logs to its sweeps
        while True:
            page = await asyncio.to_thread(read_page, sessions, ask.root_id, ask.cursor, headers,
                                           ask.max_bytes, ask.max_lines, quiet=quiet)
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
                                        activities.first_closed, activities.stream_page]
    workers = [Worker(client, task_queue=task_queue, workflows=[AgentWorkflow, TurnRunWorkflow, StreamReader], activities=served,
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
