"""The Temporal backends of the tools that act on other agents (loader/engines/README.md).

`subagent`, `send_message`, `interrupt_agent` and `report` are the shared tools (same names,
descriptions, parameters and result texts); on Temporal their `Delegation` is `WorkflowDelegation`,
which asks the workflows instead of an in-process manager. `list_agents` still answers
ENGINE_UNSUPPORTED (`not_yet`). `resume_check` is the body of activity `dsh.resume_check`: the
read-only header checks of a cold resume (§8.7), so a refused send writes nothing.

Knows Temporal only through `WorkflowLink` (implemented in worker.py), so it imports no temporalio.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, Protocol, cast

from dsh.loader.abort import AbortSignal
from dsh.loader.agent import Agent, Message, Tool, ToolExec, ToolOutput, user_message
from dsh.loader.engines.wire import (
    Answer,
    Delivery,
    Interrupt,
    MessageChild,
    PollReply,
    ResumeCheck,
    ResumeFound,
    StartChild,
)
from dsh.loader.errors import SessionError, SubagentCode, SubagentError
from dsh.loader.ids import is_valid_session_id, new_child_id
from dsh.loader.session import SessionStore
from dsh.loader.subagents import ManagerConfig, report_message
from dsh.loader.subagents.epochs import next_epoch
from dsh.loader.texts import render

__all__ = ["WorkflowDelegation", "WorkflowLink", "not_yet", "plain", "raise_refusal", "resume_check"]


class WorkflowLink(Protocol):
    """What a turn asks of the workflows of its tree (updates and signals), and the heartbeat."""

    async def poll(self, after: int, interrupts: int) -> PollReply: ...
    async def start_child(self, request: StartChild) -> None: ...
    async def report(self, delivery: Delivery) -> None: ...
    async def message_child(self, request: MessageChild) -> Answer: ...
    # `target`'s own workflow; None when it runs no workflow (settled, unknown, one-shot).
    async def interrupt(self, target: str, request: Interrupt) -> Answer | None: ...
    def heartbeat(self) -> None: ...
    # The root's fence board (transcripts with fences only): publish facts, long-poll the tree's.
    async def publish_facts(self, facts: list[list[Any]]) -> None: ...
    async def facts_after(self, after: int) -> list[list[Any]]: ...


def plain(message: Message) -> dict[str, Any]:
    """A message as the wire's JSON dict (a TypedDict is one already, typed narrower)."""
    return dict(message)


def raise_refusal(answer: Answer, **values: object) -> None:
    """A workflow's typed refusal as the error the local manager raises (same code and text)."""
    if answer.code is not None:
        raise SubagentError(cast(SubagentCode, answer.code), render(answer.text, **values))


class WorkflowDelegation:
    """The tools' backend on Temporal: the same ids, descriptors and messages the manager would
    make, handed to the workflows. `bind` is the replay provider's `bind_child` (or None): a child
    is bound when it is started, so `{{child:...}}` resolves in the steps that follow."""

    def __init__(self, link: WorkflowLink, config: ManagerConfig, root_id: str,
                 bind: Callable[[str, dict[str, Any]], None] | None = None) -> None:
        self.link = link
        self.config = config
        self.root_id = root_id
        self.bind = bind

    async def start_continuable(
        self, parent: Agent, label: str, prompt: str, spawn_call_id: str | None, signal: AbortSignal
    ) -> tuple[str, str]:
        signal.throw_if_aborted()
        depth = self.config.child_depth(parent)
        child_id = new_child_id()
        descriptor = self.config.descriptor("continuable", label, spawn_call_id)
        message = user_message(prompt, {"kind": "user"})
        await self.link.start_child(
            StartChild(child_id=child_id, descriptor=descriptor, prompt=plain(message), depth=depth)
        )
        if self.bind is not None:
            self.bind(child_id, descriptor)
        return child_id, str(message["id"])

    async def report(self, child: Agent, content: str, signal: AbortSignal) -> str:
        """`report_from` on Temporal: the same message, relayed by this child's workflow to its
        parent's; `reportDelivery` picks steer (wakeup) or inject (quiet) as it does locally."""
        signal.throw_if_aborted()
        message = report_message(child.id, content)
        send: Literal["steer", "inject"] = "inject" if self.config.report_delivery == "quiet" else "steer"
        await self.link.report(Delivery(plain(message), send=send))
        return str(message["id"])

    async def followup(
        self, parent: Agent, child_id: str, content: str, source: dict[str, Any], signal: AbortSignal
    ) -> str:
        """`send_message` (§8.7): the caller's own workflow delivers to its resident child or
        cold-resumes a settled one; a refusal carries the manager's code and text."""
        signal.throw_if_aborted()
        message = user_message(content, source)
        answer = await self.link.message_child(MessageChild(child_id=child_id, message=plain(message)))
        raise_refusal(answer, id=child_id, root=self.root_id)
        return str(message["id"])

    async def interrupt(self, caller: Agent, target: str) -> None:
        """`interrupt_agent` (§10.2, ancestor authority): the caller is this turn's live agent, so
        the staleness check holds by construction; the target's workflow checks the lineage."""
        if caller.id == target:
            raise SubagentError("UNAUTHORIZED", render("T-ERR-SELF", aid=caller.id))
        answer = await self.link.interrupt(target, Interrupt(kind="parent", caller=caller.id))
        if answer is not None:  # None: no running workflow, the accepted no-op of a settled child
            raise_refusal(answer, aid=caller.id, id=target)


# Tools whose Temporal half is a later slice (README "Not yet"): same name, description and schema
# for the model, so its requests are the local engine's, but a typed error instead of reaching
# the turn's in-process manager, which holds no other agent of the tree.
NOT_YET = frozenset({"list_agents"})


class _NotYet:
    def __init__(self, tool: Tool) -> None:
        self.name = tool.name
        self.description = tool.description
        self.parameters = tool.parameters
        self.concurrency_safe = tool.concurrency_safe
        self.system_section = tool.system_section

    async def run(self, args: Any, exec: ToolExec) -> ToolOutput:
        raise SubagentError("ENGINE_UNSUPPORTED", render("T-ENGINE-UNSUPPORTED", what=f"the {self.name} tool"))


def not_yet(agent: Agent) -> None:
    agent.tools = [_NotYet(t) if t.name in NOT_YET else t for t in agent.tools]


def resume_check(check: ResumeCheck) -> ResumeFound:
    """Read-only, as `read_resumable` (§8.7, §22): the child's log, authorized against its header
    before anything is written or repaired; the turn that runs the new epoch loads it."""
    child_id = check.child_id
    if not is_valid_session_id(child_id):
        return ResumeFound(code="NOT_RESUMABLE", text="T-ERR-NOT-FOUND")
    try:
        found = SessionStore(Path(check.home)).read(child_id)
    except SessionError:
        return ResumeFound(code="NOT_RESUMABLE", text="T-ERR-NOT-FOUND")
    if found.header.get("parentSession") != check.parent_id:
        return ResumeFound(code="UNAUTHORIZED", text="T-ERR-NOT-PARENT")
    descriptor = next((e["data"] for e in found.events if e["type"] == "subagent/descriptor"), None)
    if descriptor is None or descriptor.get("mode") != "continuable":
        return ResumeFound(code="NOT_RESUMABLE", text="T-ERR-NOT-CONTINUABLE")
    depth = found.header.get("delegationDepth")
    return ResumeFound(descriptor=dict(descriptor), depth=depth if isinstance(depth, int) else 1,
                       epoch=next_epoch(found.events))
