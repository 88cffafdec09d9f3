"""Reaching an agent's workflow through the Temporal client: the turn activity's `interrupt_agent`
and `dsh interrupt` / `dsh send` on a temporal-engine run (issue 12 item 3).

The same authority rules as the Unix socket (SPEC §10.1, §18.2): the user presents the direct parent
address (`Interrupt(kind="user")`, a follow-up with source `user` through the parent's workflow);
a live ancestor goes through `interrupt_agent`. A workflow that is not running is an agent that is
not resident: interrupting it is the accepted no-op.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from temporalio.client import Client, WorkflowExecutionStatus, WorkflowQueryFailedError, WorkflowUpdateFailedError
from temporalio.service import RPCError, RPCStatusCode

from dsh.loader.agent import user_message
from dsh.loader.engines.refusals import MESSAGE_LIMIT, Backoff, oversize, server_limit, workflow_gone
from dsh.loader.engines.started import workflow_children
from dsh.loader.engines.wire import AgentView, Answer, Interrupt, MessageChild, agent_workflow_id, child_workflow_id
from dsh.loader.engines.workflow import AgentWorkflow
from dsh.loader.host.client import NotAChild, UnknownSession
from dsh.loader.host.protocol import (
    INVALID_REQUEST, RpcError, bad_request, delivery_unavailable, not_resumable, unauthorized,
)
from dsh.loader.texts import render

__all__ = ["NotRunning", "admitted", "interrupt_workflow", "locate", "message_workflow", "run_is_live", "run_status",
           "subagent_list", "user_call", "view_of", "workflow_status"]

logger = logging.getLogger(__name__)


class NotRunning(Exception):
    """The agent's workflow is not running (never started, or its run has closed)."""


# A refused update waits this long in all for the run to admit it (it continues as new between
# turns once it took `temporal.continueAsNewUpdates` updates), then the refusal is raised.
ADMIT_WAIT = 30.0


def _closed(exc: BaseException) -> bool:
    """The server's answer for an update to a workflow that does not run (closed or unknown).
    A refusal for the server's limits is not one: an interrupt it refused was never applied, and
    taking it for a closed child answered `accepted` for an interrupt that did nothing."""
    if isinstance(exc, RPCError) and exc.status == RPCStatusCode.FAILED_PRECONDITION:
        return not server_limit(exc)
    return workflow_gone(exc)


_T = TypeVar("_T")


async def admitted(call: Callable[[], Awaitable[_T]]) -> _T:
    """An update sent again, with a capped, jittered backoff, while the server refuses it for its
    limits (`refusals.server_limit`), for up to `ADMIT_WAIT` seconds. Flow control, not an ordering: a refused
    update never reached the workflow, so sending it again is its first delivery."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + ADMIT_WAIT
    backoff = Backoff()
    while True:
        try:
            return await call()
        except RPCError as exc:
            if not server_limit(exc) or loop.time() >= deadline:
                raise
            logger.info("an update was refused for the server's limits; sent again: %r", exc)
        await backoff.wait()


async def interrupt_workflow(client: Client, root_id: str, target: str, request: Interrupt) -> Answer | None:
    """The target's workflow checks and applies the interrupt; None when no workflow runs for it."""
    handle = client.get_workflow_handle_for(AgentWorkflow.run, child_workflow_id(root_id, target))
    try:
        return await admitted(lambda: handle.execute_update(AgentWorkflow.interrupt, request))
    except (RPCError, WorkflowUpdateFailedError) as exc:
        if _closed(exc):
            return None
        raise


async def message_workflow(client: Client, root_id: str, parent_id: str, request: MessageChild) -> Answer:
    """A follow-up for `parent_id`'s child, through the parent's workflow (it alone may deliver or
    cold-resume: §8.7); `NotRunning` when the parent has no running workflow (not live)."""
    handle = client.get_workflow_handle_for(AgentWorkflow.run, agent_workflow_id(root_id, parent_id))
    try:
        return await admitted(lambda: handle.execute_update(AgentWorkflow.message_child, request))
    except (RPCError, WorkflowUpdateFailedError) as exc:
        if _closed(exc):
            raise NotRunning(parent_id) from exc
        raise


async def workflow_status(client: Client, root_id: str, child_id: str) -> str:
    """`list_agents`' status of a child (§12.2) from its workflow's `status` query; `ready` when it
    never ran one (a one-shot child, an unknown id)."""
    handle = client.get_workflow_handle_for(AgentWorkflow.run, child_workflow_id(root_id, child_id))
    try:
        return await handle.query(AgentWorkflow.status)
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return "ready"
        raise
    except WorkflowQueryFailedError:
        return "ready"


async def run_is_live(client: Client, root_id: str) -> bool:
    """Whether the tree's root workflow is still running (a live run hosts its children)."""
    try:
        described = await client.get_workflow_handle(root_id).describe()
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return False
        raise
    return described.status == WorkflowExecutionStatus.RUNNING


async def view_of(client: Client, workflow_id: str) -> AgentView | None:
    """Query `view` of one agent's workflow (a closed run answers as of its end); None when the
    server knows no such workflow."""
    handle = client.get_workflow_handle_for(AgentWorkflow.run, workflow_id)
    try:
        return await handle.query(AgentWorkflow.view)
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return None
        raise


async def run_status(client: Client, root_id: str) -> dict[str, Any] | None:
    """`run.status` (§18.2) of a tree on Temporal, in the socket's shape; None when its root
    workflow no longer runs (no live run, as a socket that does not answer). The agents are the
    root and every resident workflow below it, each read by its own `view` query. `pid` is null:
    no one dsh process hosts the tree; `startedAt` is the root workflow's start."""
    handle = client.get_workflow_handle(root_id)
    try:
        described = await handle.describe()
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return None
        raise
    if described.status != WorkflowExecutionStatus.RUNNING:
        return None
    root = await view_of(client, root_id)
    if root is None:
        return None
    agents: list[dict[str, Any]] = []
    level = [root]
    while level:
        below: list[str] = []
        for view in level:
            row: dict[str, Any] = {"sessionId": view.session_id}
            if view.parent_id is not None:
                row["parentSessionId"] = view.parent_id
            if view.label is not None:
                row["label"] = view.label
            row["status"] = view.status
            agents.append(row)
            below += [child_workflow_id(root_id, c) for c in view.resident]
        found = await asyncio.gather(*(view_of(client, w) for w in below))
        level = [v for v in found if v is not None]
    state = "shutting-down" if root.shutting_down else "stalled" if root.stalled else "running"
    started = described.start_time
    return {"rootSessionId": root_id, "pid": None, "startedAt": round(started.timestamp() * 1000) if started else None,
            "state": state, "agents": agents}


async def subagent_list(client: Client, root_id: str, parent_id: str, scope: str = "children") -> dict[str, Any]:
    """`subagent.list` (§18.2) on Temporal, in the socket's shape: the children the parent's
    workflow started or resumed in any of its runs, in that order (started.py), each with its
    workflow's §12.2 status (`ready` when none runs); `descendants` walks each child's own
    workflow. `parentLive`: the parent's workflow runs."""
    live = await _running(client, agent_workflow_id(root_id, parent_id))
    entries: list[dict[str, Any]] = []
    seen = {parent_id}

    async def visit(parent: str, depth: int) -> None:
        refs = [c for c in await workflow_children(client, root_id, parent) if c.child_id not in seen]
        seen.update(c.child_id for c in refs)
        views = await asyncio.gather(*(view_of(client, child_workflow_id(root_id, c.child_id)) for c in refs))
        for ref, child in zip(refs, views, strict=True):
            status = "ready" if child is None else child.status  # a closed run answers `ready`
            entries.append({"sessionId": ref.child_id, "parentSessionId": parent,
                            "depth": depth, "label": str(ref.descriptor.get("label", "")), "status": status})
            if scope == "descendants":
                await visit(ref.child_id, depth + 1)

    await visit(parent_id, 1)
    return {"parentLive": live, "entries": entries}


async def _running(client: Client, workflow_id: str) -> bool:
    try:
        described = await client.get_workflow_handle(workflow_id).describe()
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return False
        raise
    return described.status == WorkflowExecutionStatus.RUNNING


async def locate(client: Client, parent_id: str, child_id: str, home: Path) -> str:
    """The root of the tree whose workflows hold `child_id`, for a client whose home has no log
    of it (issue 12 item 3): the server keeps the tree, so the address is checked against it.
    The child's workflow `<root>/<child>` is found by id (the parent is the root: one describe;
    else a visibility listing of dsh's workflows), and its parent workflow must be the presented
    parent's, else NotAChild (T-CLI-UNAUTHORIZED, exit 2) as the saved headers refuse locally;
    no such workflow is UnknownSession (exit 2). The workflow's own check stays authoritative."""
    candidates = [child_workflow_id(parent_id, child_id)]
    try:
        described = await client.get_workflow_handle(candidates[0]).describe()
    except RPCError as exc:
        if exc.status != RPCStatusCode.NOT_FOUND:
            raise
        found = [w.id async for w in client.list_workflows('WorkflowType = "dsh.agent"')
                 if w.id.endswith(f"/{child_id}")]
        if not found:
            raise UnknownSession(child_id, home) from None
        described = await client.get_workflow_handle(found[0]).describe()
    root_id = described.id.split("/", 1)[0]
    if described.parent_id != agent_workflow_id(root_id, parent_id):
        raise NotAChild(child_id, parent_id)
    return root_id


async def user_call(client: Client, root_id: str, method: str, params: dict[str, Any]) -> dict[str, Any] | None:
    """The socket's methods (§18.2) answered by the tree's workflows: the socket's result, None
    when no live run hosts the child (the socket's NoLiveRun), and the socket's `RpcError`s for
    refusals, so `dsh interrupt` / `dsh send` print and exit the same."""
    if method == "run.status":
        return await run_status(client, root_id)
    if method == "subagent.list":
        return await subagent_list(client, root_id, str(params["parentSessionId"]), str(params.get("scope", "children")))
    parent, child = str(params["parentSessionId"]), str(params["childSessionId"])
    message = {} if method == "subagent.interrupt" else dict(user_message(str(params["message"]), {"kind": "user"}))
    if (size := oversize(message)) is not None:
        # Refused as the socket refuses a line past its limit: first, nothing sent.
        raise bad_request(INVALID_REQUEST, render("T-ENGINE-MESSAGE-TOO-LARGE", what="the message", size=size,
                                                  limit=MESSAGE_LIMIT))
    # No live run hosts the tree once its root has closed (the socket's NoLiveRun), whatever its
    # other workflows still do: a child's run signals its notice, then closes, and one left open
    # (its workers gone) would hold an update without an answer.
    if not await run_is_live(client, root_id):
        return None
    if method == "subagent.interrupt":
        answer = await interrupt_workflow(client, root_id, child, Interrupt(kind="user", caller=parent))
        if answer is None:  # the child is not resident: accepted, the run hosts the tree
            return {"accepted": True}
        if answer.code is not None:
            raise unauthorized(child)
        return {"accepted": True}
    try:
        answer = await message_workflow(client, root_id, parent, MessageChild(child_id=child, message=message))
    except NotRunning:
        if not await run_is_live(client, root_id):
            return None
        raise delivery_unavailable(child, "parent-not-live") from None
    if answer.code is not None:
        raise _refusal(answer, child)
    return {"messageId": message["id"]}


def _refusal(answer: Answer, child: str) -> RpcError:
    """§18.3's translation of the manager's codes, as host/methods.py makes it."""
    if answer.code == "UNAUTHORIZED":
        return unauthorized(child)
    if answer.code == "NOT_RESUMABLE":
        return not_resumable(child)
    return delivery_unavailable(child, "draining" if answer.code == "DRAINING" else "closing")
