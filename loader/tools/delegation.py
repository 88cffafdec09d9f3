"""The `subagent` and `send_message` tools (SPEC §12.1–§12.3)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from dsh.loader.abort import AbortSignal
from dsh.loader.agent import Agent, ToolExec, ToolOutput, text_of
from dsh.loader.errors import SubagentError
from dsh.loader.models.budget import RunBudget
from dsh.loader.subagents import AncestorAuthority, CatalogueEntry, ContinuationManager, interrupt, report_from, run_one_shot
from dsh.loader.texts import TEXTS, TOOL_DESCRIPTIONS, render
from dsh.loader.tools.params import SEND_MESSAGE, SUBAGENT

if TYPE_CHECKING:  # the pydantic models; a lean record of the same fields may stand in (tools.params)
    from dsh.loader.tools.args import SendMessageArgs, SubagentArgs

__all__ = ["Delegation", "LocalDelegation", "SendMessageArgs", "SendMessageTool", "SubagentArgs", "SubagentTool"]


class Delegation(Protocol):
    """Who acts on other agents for `subagent`, `send_message`, `interrupt_agent` and `report`: the
    local `ContinuationManager` (`LocalDelegation`), or another engine's backend (the Temporal
    engine starts child workflows, delivers and interrupts through them and relays reports,
    loader/engines/README.md). The tools' texts and values are the same either way."""

    async def admit(self, parent: Agent, prompt: str) -> None:
        """Refuse a background spawn the engine cannot run now, or of a prompt it cannot carry
        (before the budget is charged)."""
        ...

    async def start_continuable(
        self, parent: Agent, label: str, prompt: str, spawn_call_id: str | None, signal: AbortSignal
    ) -> tuple[str, str]: ...

    async def report(self, child: Agent, content: str, signal: AbortSignal) -> str: ...

    async def followup(
        self, parent: Agent, child_id: str, content: str, source: dict[str, Any], signal: AbortSignal
    ) -> str: ...

    async def interrupt(self, caller: Agent, target: str) -> None: ...

    async def statuses(self, ids: list[str]) -> dict[str, str] | None:
        """`list_agents`' statuses from elsewhere (another engine's agents), or None: the manager's."""
        ...

    async def below(self, parent_id: str, *, deep: bool) -> list[CatalogueEntry]:
        """Sessions under `parent_id` whose logs the catalogue may not hold (another engine's
        homes), for `list_agents`: its children, and with `deep` every descendant; [] when the
        catalogue holds every one."""
        ...


class LocalDelegation:
    """The local engine: the manager itself. `report` runs `report_from` at once (it is sync span
    S9; the coroutine does not suspend before it)."""

    def __init__(self, manager: ContinuationManager) -> None:
        self.manager = manager

    async def admit(self, parent: Agent, prompt: str) -> None:
        return None  # the local manager runs every child it starts

    async def start_continuable(
        self, parent: Agent, label: str, prompt: str, spawn_call_id: str | None, signal: AbortSignal
    ) -> tuple[str, str]:
        return await self.manager.start_continuable(parent, label, prompt, spawn_call_id, signal)

    async def report(self, child: Agent, content: str, signal: AbortSignal) -> str:
        return report_from(self.manager, child, content, signal)

    async def followup(
        self, parent: Agent, child_id: str, content: str, source: dict[str, Any], signal: AbortSignal
    ) -> str:
        return await self.manager.followup(parent, child_id, content, source, signal)

    async def interrupt(self, caller: Agent, target: str) -> None:
        interrupt(self.manager, target, AncestorAuthority(caller))  # span S8: nothing awaited before it

    async def statuses(self, ids: list[str]) -> dict[str, str] | None:
        return None  # list_agents reads the manager's Activations itself

    async def below(self, parent_id: str, *, deep: bool) -> list[CatalogueEntry]:
        return []  # one home: the catalogue reads every log


class SubagentTool:
    name = "subagent"
    description = TOOL_DESCRIPTIONS["subagent"]
    parameters = SUBAGENT
    concurrency_safe = True
    system_section = TEXTS["T-SYSTEM-DELEGATION"]

    def __init__(
        self, manager: ContinuationManager, budget: RunBudget | None = None, delegation: Delegation | None = None
    ) -> None:
        self.manager = manager
        self.budget = budget
        # Continuable children go through `delegation` (default: the manager); foreground one-shot
        # children always run in this process under `manager`, inside the calling tool.
        self.delegation: Delegation = delegation if delegation is not None else LocalDelegation(manager)

    async def run(self, args: SubagentArgs, exec: ToolExec) -> ToolOutput:
        if args.run_in_background:  # refused here, before anything is charged or created
            await self.delegation.admit(exec.agent, args.prompt)
        if self.budget is not None:  # refused here, before the manager creates anything
            await self.budget.charge_child()
        if args.run_in_background:
            child_id, _ = await self.delegation.start_continuable(
                exec.agent, args.label, args.prompt, exec.call_id, exec.signal
            )
            return ToolOutput(
                text=render("T-SPAWN-BG", id=child_id), value={"kind": "continuable", "sessionId": child_id}
            )
        result = await run_one_shot(self.manager, exec.agent, args.label, args.prompt, exec.call_id, exec.signal)
        text = text_of(result.output)
        if result.stop_reason != "completed":
            message = render("T-ERR-INCOMPLETE", stopReason=result.stop_reason)
            if text:
                message += render("T-ERR-INCOMPLETE-PARTIAL", text=text)
            raise SubagentError("SUBAGENT_INCOMPLETE", message)
        value: dict[str, Any] = {
            "kind": "foreground",
            "sessionId": result.session_id,
            "stopReason": "completed",
            "output": result.output,
        }
        return ToolOutput(text=text or TEXTS["T-SPAWN-FG-EMPTY"], value=value)


class SendMessageTool:
    name = "send_message"
    description = TOOL_DESCRIPTIONS["send_message"]
    parameters = SEND_MESSAGE
    concurrency_safe = True
    system_section = None

    def __init__(self, manager: ContinuationManager, delegation: Delegation | None = None) -> None:
        self.manager = manager
        self.delegation: Delegation = delegation if delegation is not None else LocalDelegation(manager)

    async def run(self, args: SendMessageArgs, exec: ToolExec) -> ToolOutput:
        source = {"kind": "coordinator", "form": "relay", "senderSessionId": exec.agent.id}
        message_id = await self.delegation.followup(
            exec.agent, args.agent_id, args.message, source, exec.signal
        )
        return ToolOutput(
            text=render("T-SEND", id=args.agent_id, messageId=message_id), value={"messageId": message_id}
        )


def __getattr__(name: str) -> object:
    if name in ("SendMessageArgs", "SubagentArgs"):  # the pydantic models, on first use
        from dsh.loader.tools import args

        return getattr(args, name)
    raise AttributeError(f"module 'dsh.loader.tools.delegation' has no attribute {name!r}")
