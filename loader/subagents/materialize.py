"""The durable half of a materialization (SPEC §8.2, §8.8): a child's session and its registered
Agent. The manager decides when a child becomes resident; this makes the Agent it then installs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dsh.loader.agent import Agent
from dsh.loader.session import Session
from dsh.loader.subagents.config import AgentFactory, AgentMode

if TYPE_CHECKING:
    from dsh.loader.agent import AgentRegistry
    from dsh.loader.session import SessionStore

__all__ = ["ChildAgents"]


@dataclass
class ChildAgents:
    """Every Agent it returns is registered; a session it cannot give an Agent is closed (or, for
    `adopt`, left to the caller that loaded it)."""

    store: SessionStore
    registry: AgentRegistry
    factory: AgentFactory | None
    descriptor_hook: Callable[[str, dict[str, Any]], None] | None

    async def create(self, header: dict[str, Any], descriptor: dict[str, Any], mode: AgentMode) -> Agent:
        """Create the durable child session (descriptor first, §8.2) and its registered agent."""
        assert self.factory is not None, "the manager needs an agent factory"
        session = await self.store.create(header)
        try:
            # The agent exists before the descriptor is appended so that observers attached by the
            # factory (e.g. `--json`) see every event of the session; nothing runs until a send.
            if self.descriptor_hook is not None:
                self.descriptor_hook(session.id, descriptor)
            agent = self.factory(session, mode)
            session.append("subagent/descriptor", descriptor)
            self.registry.register(agent)
        except BaseException:
            await self.store.close(session)
            raise
        return agent

    def adopt(self, session: Session, descriptor: dict[str, Any]) -> Agent:
        """A loaded continuable session gets its registered Agent; the caller owns the session."""
        assert self.factory is not None, "the manager needs an agent factory"
        if self.descriptor_hook is not None:
            self.descriptor_hook(session.id, descriptor)
        agent = self.factory(session, "continuable")
        self.registry.register(agent)
        return agent

    async def adopt_or_close(self, session: Session, descriptor: dict[str, Any]) -> Agent:
        try:
            return self.adopt(session, descriptor)
        except BaseException:
            await self.store.close(session)
            raise
