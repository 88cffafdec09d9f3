"""The agent's view of tools (SPEC §6.9): a `Protocol` the higher `tools/` layer implements.

The agent runs tools but must not import them (dependencies point one way), so it declares what it
needs here: a name, its parameters (a pydantic model, or anything with its two methods:
`loader.tools.params` validates without importing pydantic, issue 13), a description, whether the call may run in the rolling
pool, an optional system-prompt section, and `run(args, exec)`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from dsh.loader.abort import AbortSignal
from dsh.loader.agent.inbox import Message

if TYPE_CHECKING:
    from dsh.loader.agent.agent import Agent

__all__ = ["Tool", "ToolExec", "ToolOutput", "ToolParameters"]


class ToolParameters(Protocol):
    """A tool's arguments: validated (raising pydantic's `ValidationError` when invalid) and their
    JSON schema for the model. A pydantic model class is one."""

    def model_validate(self, obj: Any) -> Any: ...
    def model_json_schema(self) -> dict[str, Any]: ...
    def __hash__(self) -> int: ...  # the agent caches the schema per parameters


@dataclass(frozen=True)
class ToolOutput:
    """`value` is stored in `tool/result.value`; `text` is all the model sees."""

    text: str
    value: Any = None
    concludes_turn: bool = False


@dataclass
class ToolExec:
    agent: Agent
    call_id: str
    signal: AbortSignal
    staged: list[Message] = field(default_factory=list)

    def stage(self, message: Message) -> None:
        """Queue input for this agent; it is inserted into next-step after this call's result."""
        self.staged.append(message)


class Tool(Protocol):
    # Read-only members, so a tool may declare them as plain class attributes.
    @property
    def name(self) -> str: ...
    @property
    def description(self) -> str: ...
    @property
    def parameters(self) -> ToolParameters: ...
    @property
    def concurrency_safe(self) -> bool: ...
    @property
    def system_section(self) -> str | None: ...

    async def run(self, args: Any, exec: ToolExec) -> ToolOutput: ...


ToolsFor = Callable[["Agent"], list[Tool]]
