"""The registry of live agents, keyed by id (SPEC §2, §8.5).

Identity matters: `get(id) is agent` is how stale handles are told from live ones. The registry
re-emits each member's status changes so the runner and fences observe the whole tree from one place.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from dsh.loader.emitter import Emitter
from dsh.loader.errors import DshError

if TYPE_CHECKING:
    from dsh.loader.agent.agent import Agent

__all__ = ["AgentRegistry"]

# Re-emitted from each member, tagged with the agent; registered together, after the agent's own
# earlier listeners and before later ones, in this order.
_FORWARDED = ("agent/status", "agent/error", "agent/inbox/inserted", "agent/inbox/claimed",
              "agent/inbox/discarded", "agent/maintenance-end", "agent/converged")


class AgentRegistry:
    def __init__(self) -> None:
        self._agents: dict[str, Agent] = {}
        self._offs: dict[str, Callable[[], None]] = {}
        self.events = Emitter()

    def get(self, agent_id: str) -> Agent | None:
        return self._agents.get(agent_id)

    def __contains__(self, agent_id: object) -> bool:
        return agent_id in self._agents

    def __iter__(self) -> Iterator[Agent]:
        return iter(list(self._agents.values()))

    def __len__(self) -> int:
        return len(self._agents)

    def register(self, agent: Agent) -> None:
        if agent.id in self._agents:
            raise DshError("DUPLICATE_AGENT", f"an agent with id {agent.id} is already registered")
        self._agents[agent.id] = agent
        forward = functools.partial(self._forward, agent)
        self._offs[agent.id] = agent.events.on_each({name: functools.partial(forward, name) for name in _FORWARDED})
        self.events.emit("agent/registered", {"agent": agent})

    def unregister(self, agent: Agent) -> None:
        if self._agents.get(agent.id) is not agent:
            return
        del self._agents[agent.id]
        off = self._offs.pop(agent.id, None)
        if off is not None:
            off()
        self.events.emit("agent/disposed", {"agent": agent})

    def _forward(self, agent: Agent, name: str, payload: Any) -> None:
        self.events.emit(name, {**(payload if isinstance(payload, dict) else {}), "agent": agent})
