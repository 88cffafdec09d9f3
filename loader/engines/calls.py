"""The agent workflow's activity calls, one helper per activity (loader/engines/README.md): where
each runs (the tree's task queue, the workflow's own), with which timeouts and retries. Workflow
code (deterministic; it may import only `wire`); the activities themselves are worker.py's.

Invariant: every activity the workflow runs goes through one of these helpers, so a change of
where activities run (a task queue per activity) is made here once."""

from __future__ import annotations

from collections.abc import Awaitable
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

from dsh.loader.engines.wire import (
    TURN_TIMEOUT, ClosedRun, FailedRun, Leftovers, ResumeCheck, ResumeFound, TreeResult, TurnInput, TurnResult,
)

__all__ = ["TURN_RETRY", "await_closed", "chain", "enter_leftovers", "first_closed", "resume_check", "run_turn",
           "settle_failed"]

# A turn whose worker died is retried on another (issue 12 item 5); a turn that fails the same way
# five times is a bug, not a fault, and fails the tree instead of looping.
TURN_RETRY = RetryPolicy(maximum_attempts=5)
TURN_ACTIVITY = "dsh.turn"
RESUME_ACTIVITY = "dsh.resume_check"
RESUME_TIMEOUT = timedelta(seconds=30)
SETTLE_ACTIVITY = "dsh.settle_failed"
SETTLE_TIMEOUT = timedelta(seconds=30)
LEFTOVERS_ACTIVITY = "dsh.enter_leftovers"
CLOSED_ACTIVITY = "dsh.await_closed"
CLOSED_HEARTBEAT = timedelta(seconds=30)
FIRST_CLOSED_ACTIVITY = "dsh.first_closed"
# The watcher reads and writes nothing, so it is retried for as long as its run waits (a server
# restart, its worker gone); past its start-to-close ceiling it starts again the same way.
WATCH_RETRY = RetryPolicy(maximum_interval=timedelta(seconds=30))


def run_turn(spec: TurnInput, task_queue: str | None = None) -> Awaitable[TurnResult]:
    """Activity `dsh.turn` (turn.py): one turn of the agent, heartbeating per model chunk, on the
    queue of its log's home (None: the workflow's; pinning.py). Not awaited here: a child's run
    shields it from a cancel by hand (`RunEnds._shielded`)."""
    return workflow.execute_activity(
        TURN_ACTIVITY, spec, result_type=TurnResult, start_to_close_timeout=TURN_TIMEOUT, task_queue=task_queue,
        heartbeat_timeout=timedelta(seconds=spec.agent.run.heartbeat_seconds), retry_policy=TURN_RETRY)


async def resume_check(check: ResumeCheck, task_queue: str | None = None) -> ResumeFound:
    """Activity `dsh.resume_check` (backends.py): the cold-resume header checks, read-only, on the
    queue of the home that may hold the child's log."""
    found: ResumeFound = await workflow.execute_activity(
        RESUME_ACTIVITY, check, result_type=ResumeFound, start_to_close_timeout=RESUME_TIMEOUT, retry_policy=TURN_RETRY,
        task_queue=task_queue)
    return found


async def settle_failed(failed: FailedRun, task_queue: str | None = None) -> TreeResult:
    """Activity `dsh.settle_failed` (settle.py): the failed epoch's `error` notice, from its log
    (on the queue of its home; None: the workflow's)."""
    result: TreeResult = await workflow.execute_activity(SETTLE_ACTIVITY, failed, result_type=TreeResult,
                                                         start_to_close_timeout=SETTLE_TIMEOUT, retry_policy=TURN_RETRY,
                                                         task_queue=task_queue)
    return result


async def enter_leftovers(leftovers: Leftovers, task_queue: str | None = None) -> None:
    """Activity `dsh.enter_leftovers` (settle.py): unread deliveries, into a log as injects (on the
    queue of that log's home)."""
    await workflow.execute_activity(LEFTOVERS_ACTIVITY, leftovers, result_type=int, task_queue=task_queue,
                                    start_to_close_timeout=SETTLE_TIMEOUT, retry_policy=TURN_RETRY)


async def await_closed(workflow_ids: list[str]) -> None:
    """Activity `dsh.await_closed` (worker.py): returns once each workflow's run has closed (it
    reads no log, so any worker on the shared queue takes it)."""
    await workflow.execute_activity(CLOSED_ACTIVITY, workflow_ids, start_to_close_timeout=TURN_TIMEOUT,
                                    heartbeat_timeout=CLOSED_HEARTBEAT, retry_policy=TURN_RETRY)


async def first_closed(workflow_ids: list[str]) -> ClosedRun:
    """Activity `dsh.first_closed` (worker.py): the first of these workflows whose run closed other
    than completed, heartbeating while none has (it reads no log, so any worker on the shared
    queue takes it)."""
    closed: ClosedRun = await workflow.execute_activity(
        FIRST_CLOSED_ACTIVITY, workflow_ids, result_type=ClosedRun, start_to_close_timeout=TURN_TIMEOUT,
        heartbeat_timeout=CLOSED_HEARTBEAT, retry_policy=WATCH_RETRY)
    return closed


def chain(exc: BaseException | None) -> str:
    """A failure's messages, outermost first (from history, so replays give the same text)."""
    parts: list[str] = []
    while exc is not None:
        parts.append(str(getattr(exc, "message", "") or type(exc).__name__))
        exc = exc.__cause__
    return ": ".join(parts)
