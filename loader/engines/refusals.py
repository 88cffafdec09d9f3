"""What the server's refusal of a call means, and the wait before asking again.

A call to a workflow is refused because the workflow has closed (`workflow_gone`: nothing will
answer it, so the caller stops) or because the server is at one of its limits (`server_limit`:
the call never reached the workflow, so asking again later is its first delivery). The retries
wait with `Backoff`: flow control, never an ordering (a replay's order comes from its fences).
Runs outside the workflow sandbox.
"""

from __future__ import annotations

import asyncio
import random

from temporalio.client import WorkflowUpdateFailedError
from temporalio.service import RPCError, RPCStatusCode

__all__ = ["Backoff", "server_limit", "workflow_gone"]


def workflow_gone(exc: BaseException) -> bool:
    """The server's answer for a call to a workflow that has closed (or never ran)."""
    if isinstance(exc, RPCError):
        return exc.status == RPCStatusCode.NOT_FOUND
    return isinstance(exc, WorkflowUpdateFailedError) and "completed" in str(exc.cause or exc)


def server_limit(exc: BaseException) -> bool:
    """The server refused the call for one of its limits, not because the workflow closed: the
    run's cap of updates (`history.maxTotalUpdates`: FAILED_PRECONDITION, "limit on the total
    number of distinct updates") or the updates in flight (RESOURCE_EXHAUSTED)."""
    if not isinstance(exc, RPCError):
        return False
    return exc.status == RPCStatusCode.RESOURCE_EXHAUSTED or (
        exc.status == RPCStatusCode.FAILED_PRECONDITION and "limit on the total number" in exc.message)


class Backoff:
    """Capped, jittered, doubling waits between the tries of a refused call."""

    def __init__(self, first: float = 0.05, cap: float = 2.0) -> None:
        self.delay = first
        self.cap = cap

    async def wait(self) -> None:
        await asyncio.sleep(random.uniform(self.delay / 2, self.delay))  # flow control, not an ordering
        self.delay = min(2 * self.delay, self.cap)
