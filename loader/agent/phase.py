"""An agent's phases and the pre-step context (SPEC §6.1, §6.7): the leaf both `agent.py` and
`loop.py` build on, so the driver imports agent types without importing the agent.

Invariants:
- `Idle` carries no abort controller: nothing is in flight, so there is nothing to cancel;
- `wake_requested` (the latch) is only ever set on `Maintenance` or `Running`, and is replayed at
  most once, at convergence (`Agent.converge`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from dsh.loader.abort import AbortController, AbortSignal
from dsh.loader.agent.inbox import Message

if TYPE_CHECKING:
    from dsh.loader.agent.agent import Agent

__all__ = ["Idle", "Maintenance", "Phase", "PreStep", "PreStepHook", "Running"]


@dataclass
class Idle:
    last_turn: int


@dataclass
class Maintenance:
    abort: AbortController
    last_turn: int
    wake_requested: bool = False


@dataclass
class Running:
    abort: AbortController
    turn: int
    step: int = 0
    wake_requested: bool = False


Phase = Idle | Maintenance | Running


@dataclass
class PreStep:
    """What a pre-step listener sees. A listener returns `"reject"` to block the step."""

    agent: Agent
    turn: int
    step: int
    claimed: list[Message]
    signal: AbortSignal
    data: dict[str, Any] = field(default_factory=dict)


PreStepHook = Callable[[PreStep], Awaitable[Literal["reject"] | None]]
