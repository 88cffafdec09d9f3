"""What the continuation manager is built from (SPEC §8.1, §11.1): its configuration, the agent
factory headless supplies, and the pending-materialization record quiescence reads."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from dsh.loader.agent import Agent
from dsh.loader.errors import ConfigError
from dsh.loader.session import Session
from dsh.loader.subagents.errors import err

__all__ = ["REPORT_DELIVERIES", "AgentFactory", "AgentMode", "ManagerConfig", "Materialization"]

AgentMode = Literal["root", "continuable", "one-shot"]

REPORT_DELIVERIES = ("wakeup", "quiet")


class AgentFactory(Protocol):
    """Builds an Agent for a session with the tools its shape may see (§8.1); supplied by headless."""

    def __call__(self, session: Session, mode: AgentMode) -> Agent: ...


@dataclass(frozen=True)
class ManagerConfig:
    max_depth: int = 3
    report_delivery: Literal["wakeup", "quiet"] = "wakeup"
    model: str | None = None

    def __post_init__(self) -> None:
        # §11.1 / §24 item 1: exactly these two spellings; anything else is a configuration error.
        if self.report_delivery not in REPORT_DELIVERIES:
            raise ConfigError(
                f"subagents.reportDelivery: expected 'wakeup' or 'quiet', got {self.report_delivery!r}"
            )

    def child_depth(self, parent: Agent) -> int:
        """The delegation depth of a new child of `parent`; refused past `max_depth` (§8.6)."""
        depth = int(parent.header.get("delegationDepth", 0)) + 1
        if depth > self.max_depth:
            raise err("DEPTH_EXCEEDED", "T-ERR-DEPTH", depth=depth, max=self.max_depth)
        return depth

    def descriptor(self, mode: str, label: str, spawn_call_id: str | None) -> dict[str, Any]:
        d: dict[str, Any] = {"version": 1, "mode": mode, "provider": "spawn", "label": label}
        if self.model:
            d["model"] = self.model
        if spawn_call_id:
            d["spawnCallId"] = spawn_call_id
        return d


@dataclass(eq=False)
class Materialization:
    """A cold resume or start between its first await and its first delivery (or rollback)."""

    lineage: list[Agent]
    settled: asyncio.Future[None]
