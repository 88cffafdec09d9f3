"""What the continuation manager is built from (SPEC §8.1, §11.1): its configuration, the agent
factory headless supplies, and the pending-materialization record quiescence reads."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Literal, Protocol

from loader.agent import Agent
from loader.errors import ConfigError
from loader.session import Session

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


@dataclass(eq=False)
class Materialization:
    """A cold resume or start between its first await and its first delivery (or rollback)."""

    lineage: list[Agent]
    settled: asyncio.Future[None]
