"""The `list_agents`, `interrupt_agent` and `report` tools (SPEC §12.1–§12.3)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from dsh.loader.agent import ToolExec, ToolOutput
from dsh.loader.subagents import Catalogue, ContinuationManager, list_agents
from dsh.loader.tools.delegation import Delegation, LocalDelegation
from dsh.loader.texts import TEXTS, TOOL_DESCRIPTIONS, TOOL_PARAMS, render

__all__ = ["InterruptAgentTool", "ListAgentsTool", "ReportTool"]


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ListAgentsArgs(_Args):
    scope: Annotated[
        Literal["children", "descendants"], Field(description=TOOL_PARAMS["list_agents"]["scope"])
    ] = "children"


class ListAgentsTool:
    name = "list_agents"
    description = TOOL_DESCRIPTIONS["list_agents"]
    parameters = ListAgentsArgs
    concurrency_safe = True
    system_section = None

    def __init__(self, manager: ContinuationManager, catalogue: Catalogue, delegation: Delegation | None = None) -> None:
        self.manager = manager
        self.catalogue = catalogue
        self.delegation: Delegation = delegation if delegation is not None else LocalDelegation(manager)

    async def run(self, args: ListAgentsArgs, exec: ToolExec) -> ToolOutput:
        rows = list_agents(self.manager, self.catalogue, exec.agent.id, args.scope)
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


class AgentIdArgs(_Args):
    agent_id: str


class InterruptAgentTool:
    name = "interrupt_agent"
    description = TOOL_DESCRIPTIONS["interrupt_agent"]
    parameters = AgentIdArgs
    concurrency_safe = True
    system_section = None

    def __init__(self, manager: ContinuationManager, delegation: Delegation | None = None) -> None:
        self.manager = manager
        self.delegation: Delegation = delegation if delegation is not None else LocalDelegation(manager)

    async def run(self, args: AgentIdArgs, exec: ToolExec) -> ToolOutput:
        await self.delegation.interrupt(exec.agent, args.agent_id)
        return ToolOutput(text=render("T-INTERRUPT", id=args.agent_id), value={"accepted": True})


class ReportArgs(_Args):
    output: Annotated[str, Field(min_length=1, description=TOOL_PARAMS["report"]["output"])]


class ReportTool:
    name = "report"
    description = TOOL_DESCRIPTIONS["report"]
    parameters = ReportArgs
    concurrency_safe = True
    system_section = TEXTS["T-SYSTEM-REPORTING"]

    def __init__(self, manager: ContinuationManager, delegation: Delegation | None = None) -> None:
        self.manager = manager
        self.delegation: Delegation = delegation if delegation is not None else LocalDelegation(manager)

    async def run(self, args: ReportArgs, exec: ToolExec) -> ToolOutput:
        message_id = await self.delegation.report(exec.agent, args.output, exec.signal)
        return ToolOutput(text=render("T-REPORT-OK", messageId=message_id), value={"messageId": message_id})
