"""Read-only calls on a workflow, asked again until they answer: an update that met its run
continuing as new (`resent`), and the fence board's long-poll (`board_after`), which a turn's
board mirror (turn.py `_Board`) and the transcript user's (remote_user.py) keep on the root.

The board's long-poll is an update, and every answer counts against the root run's cap
(`history.maxTotalUpdates`, 2,000 by default) and its 10 in flight. A mirror whose update the
server refused ended, and the agent held on a fence never saw the fact it waited for
(FENCE_TIMEOUT; tests/temporal/test_root_continue.py, tests/temporal/test_board_refused.py). So a
mirror long-polls by update while the root's run admits it, and reads the board by query (query
`fence_board_since`, nothing in history) while the run refuses it: its updates spent (the
update's validator, `BOARD_SPENT`: the rest of the cap stays for child starts and messages), or
the server at a limit. A query is answered after the workflow task in flight (~1 s under load),
so it is the fallback, not the first ask. Runs in the worker or client process, outside the
workflow sandbox.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from temporalio.client import WorkflowHandle, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError

from dsh.loader.engines.refusals import workflow_gone
from dsh.loader.engines.wire import BOARD_SPENT, TreeResult
from dsh.loader.engines.workflow import AgentWorkflow

__all__ = ["BOARD_POLL", "TreeClosed", "board_after", "resent", "unless_cancelled"]

logger = logging.getLogger(__name__)

# A mirror reading the board by query (the run's updates spent, or the update refused) asks again
# this often at most: a fact reaches a held agent this late.
BOARD_POLL = 0.25


class TreeClosed(Exception):
    """The root's workflow has closed: the board learns nothing more."""


def unless_cancelled(exc: BaseException) -> None:
    """Raise `exc` again when the current task is being cancelled (a poll the ended turn abandons):
    the SDK turns a cancelled call into its own error type, which must not be retried."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise exc


# What the server says of an update that met a run closing (continuing as new), unanswered.
CLOSING_RUN = ("aborted by closing workflow", "unexpected workflow task failure")


def run_closed(exc: BaseException) -> bool:
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


_T = TypeVar("_T")


async def resent(call: Callable[[], Awaitable[_T]]) -> _T:
    """A read-only long-poll, sent again while the runs it reaches continue as new."""
    while True:
        try:
            return await call()
        except (RPCError, WorkflowUpdateFailedError) as exc:
            if not run_closed(exc):
                raise
            logger.info("an update met a run continuing as new; sent again: %r", exc)


def board_spent(exc: BaseException) -> bool:
    """The root refused the board's long-poll: its run's updates are spent (`BOARD_SPENT`)."""
    if not isinstance(exc, WorkflowUpdateFailedError):
        return False
    cause = exc.cause
    return isinstance(cause, ApplicationError) and cause.type == BOARD_SPENT


async def board_after(root: WorkflowHandle[AgentWorkflow, TreeResult], after: int, source: str) -> list[list[Any]]:
    """The board's facts past `after`, once there are any (they may include `source`'s own);
    `TreeClosed` once the root's workflow has closed. By update, or by query while the root's run
    refuses the update; every call is read-only, so a failed one is asked again: only the tree's
    end stops a mirror."""
    failing = 0
    by_query = False
    while True:
        try:
            if not by_query:
                facts: list[list[Any]] = await resent(
                    lambda: root.execute_update(AgentWorkflow.fence_facts_after, args=[after, source]))
                if facts:
                    return facts
                continue  # the run handed over or is closing: the next update reaches the new one
            view = await root.query(AgentWorkflow.fence_board_since, after)
            if view.facts:
                return view.facts
            by_query = view.spent  # a new run (not spent): by update again
            failing = 0
        except Exception as exc:
            unless_cancelled(exc)
            if workflow_gone(exc):
                raise TreeClosed(root.id) from exc
            by_query = True
            if board_spent(exc):
                logger.info("the board poll of %s is spent, reading by query", root.id)
                continue
            # Refused (the server's cap or in-flight limit, a server under load) or timed out.
            failing += 1
            if failing == 1 or failing % 100 == 0:
                logger.warning("the board poll of %s for %s failed (%d in a row), reading by query: %r",
                               root.id, source, failing, exc)
        await asyncio.sleep(random.uniform(BOARD_POLL / 2, BOARD_POLL))  # a query cannot wait for the next fact
