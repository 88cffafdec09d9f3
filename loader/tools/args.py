"""The tools' parameter models (SPEC §12.1), in pydantic: the one definition of each tool's
arguments. The runtime reaches them through `loader.tools.params` (`Parameters`), which validates
without pydantic when it is sure and imports this module only for the rest (issue 13).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from dsh.loader.texts import TOOL_PARAMS

__all__ = ["AgentIdArgs", "ListAgentsArgs", "ReportArgs", "SendMessageArgs", "SubagentArgs"]


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SubagentArgs(_Args):
    prompt: Annotated[str, Field(min_length=1, description=TOOL_PARAMS["subagent"]["prompt"])]
    label: Annotated[str, Field(min_length=1, max_length=80, description=TOOL_PARAMS["subagent"]["label"])]
    run_in_background: Annotated[bool, Field(description=TOOL_PARAMS["subagent"]["run_in_background"])] = True


class SendMessageArgs(_Args):
    agent_id: str
    message: Annotated[str, Field(min_length=1)]


class ListAgentsArgs(_Args):
    scope: Annotated[
        Literal["children", "descendants"], Field(description=TOOL_PARAMS["list_agents"]["scope"])
    ] = "children"


class AgentIdArgs(_Args):
    agent_id: str


class ReportArgs(_Args):
    output: Annotated[str, Field(min_length=1, description=TOOL_PARAMS["report"]["output"])]
