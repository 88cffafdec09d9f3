"""The model-facing tools (SPEC §12) and their visibility per agent shape (§8.1).

The root sees `subagent`, `send_message`, `list_agents` and `interrupt_agent`; continuable children
see those plus `report`; one-shot children see none, so they cannot orphan descendants.
"""

from __future__ import annotations

from typing import Literal

from dsh.loader.agent import Tool
from dsh.loader.models.budget import RunBudget
from dsh.loader.subagents import Catalogue, ContinuationManager
from dsh.loader.tools.control import InterruptAgentTool, ListAgentsTool, ReportTool
from dsh.loader.tools.delegation import Delegation, SendMessageTool, SubagentTool
from dsh.loader.tools.lint import TOOL_PARAMETERS, lint_transcript

__all__ = [
    "Delegation",
    "InterruptAgentTool",
    "ListAgentsTool",
    "ReportTool",
    "SendMessageTool",
    "SubagentTool",
    "TOOL_PARAMETERS",
    "lint_transcript",
    "tools_for",
]


def tools_for(
    mode: Literal["root", "continuable", "one-shot"], manager: ContinuationManager, catalogue: Catalogue,
    budget: RunBudget | None = None, delegation: Delegation | None = None,
) -> list[Tool]:
    if mode == "one-shot":
        return []
    tools: list[Tool] = [
        SubagentTool(manager, budget, delegation),
        SendMessageTool(manager, delegation),
        ListAgentsTool(manager, catalogue, delegation),
        InterruptAgentTool(manager, delegation),
    ]
    if mode == "continuable":
        tools.append(ReportTool(manager, delegation))
    return tools
