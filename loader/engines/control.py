"""Reaching an agent's workflow through the Temporal client: the turn activity's `interrupt_agent`
and `dsh interrupt` / `dsh send` on a temporal-engine run (issue 12 item 3).

The same authority rules as the Unix socket (SPEC §10.1, §18.2): the user presents the direct parent
address (`Interrupt(kind="user")`, a follow-up with source `user` through the parent's workflow);
a live ancestor goes through `interrupt_agent`. A workflow that is not running is an agent that is
not resident: interrupting it is the accepted no-op.
"""

from __future__ import annotations

from typing import Any

from temporalio.client import Client, WorkflowExecutionStatus, WorkflowQueryFailedError, WorkflowUpdateFailedError
from temporalio.service import RPCError, RPCStatusCode

from dsh.loader.agent import user_message
from dsh.loader.engines.wire import Answer, Interrupt, MessageChild, agent_workflow_id, child_workflow_id
from dsh.loader.engines.workflow import AgentWorkflow
from dsh.loader.host.protocol import RpcError, delivery_unavailable, not_resumable, unauthorized

__all__ = ["NotRunning", "interrupt_workflow", "message_workflow", "run_is_live", "user_call", "workflow_status"]


class NotRunning(Exception):
    """The agent's workflow is not running (never started, or its run has closed)."""


def _closed(exc: BaseException) -> bool:
    """The server's answer for an update to a workflow that does not run (closed or unknown)."""
    if isinstance(exc, RPCError):
        return exc.status in (RPCStatusCode.NOT_FOUND, RPCStatusCode.FAILED_PRECONDITION)
    return isinstance(exc, WorkflowUpdateFailedError) and "completed" in str(exc.cause or exc)


async def interrupt_workflow(client: Client, root_id: str, target: str, request: Interrupt) -> Answer | None:
    """The target's workflow checks and applies the interrupt; None when no workflow runs for it."""
    handle = client.get_workflow_handle_for(AgentWorkflow.run, child_workflow_id(root_id, target))
    try:
        return await handle.execute_update(AgentWorkflow.interrupt, request)
    except (RPCError, WorkflowUpdateFailedError) as exc:
        if _closed(exc):
            return None
        raise


async def message_workflow(client: Client, root_id: str, parent_id: str, request: MessageChild) -> Answer:
    """A follow-up for `parent_id`'s child, through the parent's workflow (it alone may deliver or
    cold-resume: §8.7); `NotRunning` when the parent has no running workflow (not live)."""
    handle = client.get_workflow_handle_for(AgentWorkflow.run, agent_workflow_id(root_id, parent_id))
    try:
        return await handle.execute_update(AgentWorkflow.message_child, request)
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


async def user_call(client: Client, root_id: str, method: str, params: dict[str, Any]) -> dict[str, Any] | None:
    """`subagent.interrupt` / `subagent.prompt` (§18.2) answered by the tree's workflows: the
    socket's result, None when no live run hosts the child (the socket's NoLiveRun), and the
    socket's `RpcError`s for refusals, so `dsh interrupt` / `dsh send` print and exit the same."""
    parent, child = str(params["parentSessionId"]), str(params["childSessionId"])
    if method == "subagent.interrupt":
        answer = await interrupt_workflow(client, root_id, child, Interrupt(kind="user", caller=parent))
        if answer is None:  # the child is not resident: accepted, if a run hosts the tree at all
            return {"accepted": True} if await run_is_live(client, root_id) else None
        if answer.code is not None:
            raise unauthorized(child)
        return {"accepted": True}
    message = dict(user_message(str(params["message"]), {"kind": "user"}))
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
