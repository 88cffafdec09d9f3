"""What the server's refusal of a call means, the wait before asking again, and the message too
large to ask with.

A call to a workflow is refused because the workflow has closed (`workflow_gone`: nothing will
answer it, so the caller stops) or because the server is at one of its limits (`server_limit`:
the call never reached the workflow, so asking again later is its first delivery). The retries
wait with `Backoff`: flow control, never an ordering (a replay's order comes from its fences).
A message that goes by value in a payload (a user's task or follow-up, a `subagent` prompt, a
`send_message`) is refused before it is sent past `MESSAGE_LIMIT` (`oversize`): the server
refuses a payload over 2 MB ("Blob data size exceeds limit"), and a turn's input carries a message
whole. Runs outside the workflow sandbox.
"""

from __future__ import annotations

import asyncio
import json
import random
from typing import Any

from temporalio.client import WorkflowUpdateFailedError
from temporalio.service import RPCError, RPCStatusCode

from dsh.loader.host.protocol import MAX_LINE_BYTES

__all__ = ["MESSAGE_LIMIT", "Backoff", "json_bytes", "oversize", "server_limit", "workflow_gone"]

# The JSON bytes of one message a payload carries by value: the control socket's line limit, so
# `dsh send` refuses the same messages on both engines, and half the server's 2 MB, so a turn's
# input holding one such message whole stays under it.
MESSAGE_LIMIT = MAX_LINE_BYTES


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


def json_bytes(value: Any) -> int:
    """A value's size as a payload carries it: its JSON, UTF-8 encoded."""
    return len(json.dumps(value, ensure_ascii=False).encode("utf-8"))


def oversize(message: Any) -> int | None:
    """The message's JSON size when it is over `MESSAGE_LIMIT`, else None."""
    size = json_bytes(message)
    return size if size > MESSAGE_LIMIT else None
