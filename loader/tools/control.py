"""The `list_agents`, `interrupt_agent` and `report` tools (SPEC §12.1–§12.3)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dsh.loader.agent import ToolExec, ToolOutput
from dsh.loader.subagents import Catalogue, ContinuationManager, list_agents
from dsh.loader.tools.delegation import Delegation, LocalDelegation
from dsh.loader.tools.params import AGENT_ID, LIST_AGENTS, REPORT
from dsh.loader.texts import TEXTS, TOOL_DESCRIPTIONS, render

if TYPE_CHECKING:  # the pydantic models; a lean record of the same fields may stand in (tools.params)
    from dsh.loader.tools.args import AgentIdArgs, ListAgentsArgs, ReportArgs

__all__ = ["InterruptAgentTool", "ListAgentsTool", "ReportTool"]


class ListAgentsTool:
    name = "list_agents"
    description = TOOL_DESCRIPTIONS["list_agents"]
    parameters = LIST_AGENTS
    concurrency_safe = True
    system_section = None

    def __init__(self, manager: ContinuationManager, catalogue: Catalogue, delegation: Delegation | None = None) -> None:
        self.manager = manager
        self.catalogue = catalogue
        self.delegation: Delegation = delegation if delegation is not None else LocalDelegation(manager)

    async def run(self, args: ListAgentsArgs, exec: ToolExec) -> ToolOutput:
        below = await self.delegation.below(exec.agent.id, deep=args.scope == "descendants")
        rows = list_agents(self.manager, self.catalogue, exec.agent.id, args.scope, extra=below)
        statuses = await self.delegation.statuses([row["id"] for row in rows if "status" in row])
        if statuses is not None:  # another engine's residency (the Temporal workflows)
            for row in rows:
                if "status" in row:
                    row["status"] = statuses.get(row["id"], "ready")
        lines = []
        for row in rows:
            if "diagnostic" in row:
                lines.append(render("T-LIST-UNREADABLE", id=row["id"]))
            elif args.scope == "descendants":
                lines.append(render("T-LIST-DESC", **row))
            else:
                lines.append(render("T-LIST-ROW", **row))
        return ToolOutput(text="\n".join(lines) or TEXTS["T-LIST-EMPTY"], value=rows)


class InterruptAgentTool:
    name = "interrupt_agent"
    description = TOOL_DESCRIPTIONS["interrupt_agent"]
    parameters = AGENT_ID
    concurrency_safe = True
    system_section = None

    def __init__(self, manager: ContinuationManager, delegation: Delegation | None = None) -> None:
        self.manager = manager
        self.delegation: Delegation = delegation if delegation is not None else LocalDelegation(manager)

    async def run(self, args: AgentIdArgs, exec: ToolExec) -> ToolOutput:
        await self.delegation.interrupt(exec.agent, args.agent_id)
        return ToolOutput(text=render("T-INTERRUPT", id=args.agent_id), value={"accepted": True})


class ReportTool:
    name = "report"
    description = TOOL_DESCRIPTIONS["report"]
    parameters = REPORT
    concurrency_safe = True
    system_section = TEXTS["T-SYSTEM-REPORTING"]

    def __init__(self, manager: ContinuationManager, delegation: Delegation | None = None) -> None:
        self.manager = manager
        self.delegation: Delegation = delegation if delegation is not None else LocalDelegation(manager)

    async def run(self, args: ReportArgs, exec: ToolExec) -> ToolOutput:
        message_id = await self.delegation.report(exec.agent, args.output, exec.signal)
        return ToolOutput(text=render("T-REPORT-OK", messageId=message_id), value={"messageId": message_id})


def __getattr__(name: str) -> object:
    if name in ("AgentIdArgs", "ListAgentsArgs", "ReportArgs"):  # the pydantic models, on first use
        from dsh.loader.tools import args

        return getattr(args, name)
    raise AttributeError(f"module 'dsh.loader.tools.control' has no attribute {name!r}")
