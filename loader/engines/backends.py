"""The Temporal backends of the tools that act on other agents (loader/engines/README.md).

`subagent`, `send_message`, `interrupt_agent`, `list_agents` and `report` are the shared tools
(same names, descriptions, parameters and result texts); on Temporal their `Delegation` is
`WorkflowDelegation`, which asks the workflows instead of an in-process manager (`list_agents`
reads the same catalogue and takes each row's status from the child's workflow). `resume_check` is
the body of activity `dsh.resume_check`: the read-only header checks of a cold resume (§8.7), so a
refused send writes nothing.

Knows Temporal only through `WorkflowLink` (implemented in worker.py), so it imports no temporalio.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Literal, Protocol, cast

from dsh.loader.abort import AbortSignal
from dsh.loader.agent import Agent, Message, user_message
from dsh.loader.engines.refusals import MESSAGE_LIMIT, oversize
from dsh.loader.engines.settle import NOTICE_LIMIT, bounded_report
from dsh.loader.engines.wire import (
    Answer,
    ChildRef,
    Charge,
    Charged,
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
from dsh.loader.session import SessionStore, make_header
from dsh.loader.subagents import CatalogueEntry, ManagerConfig, report_message
from dsh.loader.subagents.epochs import next_epoch
from dsh.loader.texts import render

__all__ = ["RunningRoom", "WorkflowDelegation", "WorkflowLink", "plain", "raise_refusal", "resume_check"]


class WorkflowLink(Protocol):
    """What a turn asks of the workflows of its tree (updates and signals), and the heartbeat."""

    async def poll(self, after: int, interrupts: int, *, durable: bool = False, pages: bool = False) -> PollReply: ...
    # False: refused, this agent's run already runs `temporal.maxRunningChildren` children.
    async def start_child(self, request: StartChild) -> bool: ...
    async def running_children(self) -> int: ...
    async def report(self, delivery: Delivery) -> None: ...
    async def message_child(self, request: MessageChild) -> Answer: ...
    # `target`'s own workflow; None when it runs no workflow (settled, unknown, one-shot).
    async def interrupt(self, target: str, request: Interrupt) -> Answer | None: ...
    # `list_agents`: each child's status from its workflow (`ready` when none runs).
    async def statuses(self, ids: list[str]) -> dict[str, str]: ...
    async def started_by(self, ids: list[str]) -> dict[str, list[ChildRef]]: ...
    def heartbeat(self) -> None: ...
    # The root's fence board (transcripts with fences only): publish facts, long-poll the tree's.
    async def publish_facts(self, facts: list[list[Any]]) -> None: ...
    async def facts_after(self, after: int) -> list[list[Any]]: ...
    # The tree's run budget, kept by the root workflow: a spawn, a model request or a reply's tokens.
    async def charge(self, charge: Charge) -> Charged: ...


def plain(message: Message) -> dict[str, Any]:
    """A message as the wire's JSON dict (a TypedDict is one already, typed narrower)."""
    return dict(message)


def raise_refusal(answer: Answer, **values: object) -> None:
    """A workflow's typed refusal as the error the local manager raises (same code and text)."""
    if answer.code is not None:
        raise SubagentError(cast(SubagentCode, answer.code), render(answer.text, **values))


def too_large(message: Message, what: str) -> None:
    """MESSAGE_TOO_LARGE for a message no payload carries (refusals.MESSAGE_LIMIT), nothing sent."""
    if (size := oversize(message)) is not None:
        raise SubagentError("MESSAGE_TOO_LARGE", render("T-ENGINE-MESSAGE-TOO-LARGE", what=what, size=size,
                                                        limit=MESSAGE_LIMIT))


class RunningRoom:
    """How many more children a turn may start before it asks its workflow how many run
    (`temporal.maxRunningChildren`; loader/engines/README.md "Scale"). Only the turn's own starts
    and cold resumes add running children to its agent's run, and a child that closes only makes
    room, so a count read once stays a safe bound while every start and resume since is taken off
    it: the workflow is asked again only when it runs out, and a turn far below the limit never
    asks. A start still in flight when it asks is counted twice, so near the limit a start may be
    refused that would just have fit, never admitted past it. The workflow checks again as it
    starts (residents.py), the last word."""

    def __init__(self, limit: int, running: int) -> None:
        self.limit = limit
        self.left = limit - running  # `running`: the agent's run's children open as the turn started
        self.unconfirmed = 0  # admitted, their start not answered yet
        self._asking = asyncio.Lock()

    async def admit(self, running: Callable[[], Awaitable[int]]) -> bool:
        async with self._asking:
            if self.left <= 0:
                self.left = self.limit - await running() - self.unconfirmed
            if self.left <= 0:
                return False
            self.left -= 1
            self.unconfirmed += 1
            return True

    def answered(self) -> None:
        """An admitted start was answered (started or refused): the workflow counts it now."""
        self.unconfirmed -= 1

    def resuming(self) -> None:
        """A `send_message` may cold-resume a child: one more may run."""
        self.left -= 1


class WorkflowDelegation:
    """The tools' backend on Temporal: the same ids, descriptors and messages the manager would
    make, handed to the workflows. `bind` is the replay provider's `bind_child` (or None): a child
    is bound when it is started, so `{{child:...}}` resolves in the steps that follow."""

    def __init__(self, link: WorkflowLink, config: ManagerConfig, root_id: str, store: SessionStore,
                 bind: Callable[[str, dict[str, Any]], None] | None = None,
                 listed: Callable[[dict[str, Any], dict[str, Any]], None] | None = None,
                 *, room: RunningRoom) -> None:
        self.link = link
        self.room = room  # `temporal.maxRunningChildren` for this turn's `subagent` calls
        self.config = config
        self.root_id = root_id
        self.store = store
        self.bind = bind
        # Homes (README "Homes"): a child's log is made by its own create activity on its own home,
        # from the header made here; `listed` lists it meanwhile. None: written here, as before.
        self.listed = listed

    async def admit(self, parent: Agent, prompt: str) -> None:
        """Refuse a `subagent` whose prompt no payload carries, or past `temporal.maxRunningChildren`,
        before anything is charged or written: the server would refuse the start, and past its
        pending-children limit the start command would stall the run."""
        too_large(user_message(prompt, {"kind": "user"}), "the prompt")
        if not await self.room.admit(self.link.running_children):
            raise SubagentError("RUNNING_LIMIT", render("T-ENGINE-RUNNING-LIMIT", limit=self.room.limit))

    async def start_continuable(
        self, parent: Agent, label: str, prompt: str, spawn_call_id: str | None, signal: AbortSignal
    ) -> tuple[str, str]:
        signal.throw_if_aborted()
        depth = self.config.child_depth(parent)
        child_id = new_child_id()
        descriptor = self.config.descriptor("continuable", label, spawn_call_id)
        message = user_message(prompt, {"kind": "user"})
        header = make_header(child_id, parent_session=parent.id, origin="subagent", delegation_depth=depth,
                             cwd=parent.header.get("cwd"))
        if self.listed is None:
            # The durable child session as the manager makes it (§8.2: header, then the descriptor),
            # before the workflow starts: `list_agents` and `dsh interrupt` find it at once; the
            # child's first turn loads it.
            session = await self.store.create(header)
            try:
                session.append("subagent/descriptor", descriptor)
            finally:
                await self.store.close(session)
        else:
            self.listed(header, descriptor)  # its log: made by its create activity, on its home
        try:
            started = await self.link.start_child(StartChild(child_id=child_id, descriptor=descriptor, prompt=plain(message),
                                                             depth=depth, header=header if self.listed is not None else None))
        finally:
            self.room.answered()
        if not started:  # a cold resume from elsewhere took the last place meanwhile
            raise SubagentError("RUNNING_LIMIT", render("T-ENGINE-RUNNING-LIMIT", limit=self.room.limit))
        if self.bind is not None:
            self.bind(child_id, descriptor)
        return child_id, str(message["id"])

    async def report(self, child: Agent, content: str, signal: AbortSignal) -> str:
        """`report_from` on Temporal: the same message, relayed by this child's workflow to its
        parent's; `reportDelivery` picks steer (wakeup) or inject (quiet) as it does locally."""
        signal.throw_if_aborted()
        # Relayed through workflow payloads (2 MB at most): a larger report points to the log.
        message = bounded_report(report_message(child.id, content), child.id, NOTICE_LIMIT)
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
        too_large(message, "the message")
        self.room.resuming()
        answer = await self.link.message_child(MessageChild(child_id=child_id, message=plain(message)))
        raise_refusal(answer, id=child_id, root=self.root_id, limit=self.room.limit)
        return str(message["id"])

    async def statuses(self, ids: list[str]) -> dict[str, str] | None:
        return await self.link.statuses(ids) if ids else {}

    async def below(self, parent_id: str, *, deep: bool) -> list[CatalogueEntry]:
        """The sessions under `parent_id` as the workflows know them (the `children` of each
        epoch's residency, level by level with `deep`, with the headers and descriptors their logs
        begin with), for a `list_agents` whose rows' logs are on other homes (README "Homes"): the
        catalogue lists this run's own children, not an earlier epoch's. None asked when the logs
        are all in this home (`listed` None: no homes)."""
        if self.listed is None:
            return []
        found: dict[str, CatalogueEntry] = {}
        frontier = [parent_id]
        while frontier:
            answers = await self.link.started_by(frontier)
            frontier = []
            for refs in answers.values():
                for ref in refs:
                    if ref.child_id not in found and ref.child_id != parent_id and ref.header is not None:
                        found[ref.child_id] = CatalogueEntry(ref.child_id, dict(ref.header), dict(ref.descriptor))
                        frontier.append(ref.child_id)
            if not deep:
                break
        return list(found.values())

    async def interrupt(self, caller: Agent, target: str) -> None:
        """`interrupt_agent` (§10.2, ancestor authority): the caller is this turn's live agent, so
        the staleness check holds by construction; the target's workflow checks the lineage."""
        if caller.id == target:
            raise SubagentError("UNAUTHORIZED", render("T-ERR-SELF", aid=caller.id))
        answer = await self.link.interrupt(target, Interrupt(kind="parent", caller=caller.id))
        if answer is not None:  # None: no running workflow, the accepted no-op of a settled child
            raise_refusal(answer, aid=caller.id, id=target)


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
                       epoch=next_epoch(found.events), header=dict(found.header))
