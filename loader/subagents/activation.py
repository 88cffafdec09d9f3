"""The Activation record (SPEC §8.3): one residency (epoch) of a continuable child, process-local.

Invariant: `disposal is None` <=> teardown has not begun. Its presence is the admission cutoff that
span S4 checks, so it is assigned in the same span that opens the teardown (S5).
Invariant: `accepted` holds ids of waking messages the manager submitted that are still in the
child's inbox; while non-empty the child reads `running` and cannot settle.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from dsh.loader.agent import Agent

__all__ = ["Activation", "ActivationState", "Ancestry", "state_of"]

ActivationState = Literal["running", "waiting", "settled"]


class Ancestry:
    """The child and its live ancestors at materialization, held weakly (a disposed ancestor must not
    be kept alive by its descendants' records); membership is identity, as a `WeakSet`'s is for
    agents. Plain weak references (CPython shares one per agent) instead of a `WeakSet`: ~1 KB and
    a callback closure less per child (issue 13 rows 1 and 6)."""

    __slots__ = ("_refs",)

    def __init__(self, agents: Iterable[Agent]) -> None:
        self._refs = tuple(weakref.ref(agent) for agent in agents)

    def __contains__(self, agent: object) -> bool:
        return any(ref() is agent for ref in self._refs)


@dataclass(eq=False)
class Activation:
    child_id: str
    parent_session: str
    agent: Agent
    ancestry: Ancestry
    boundary: int
    epoch: int
    owned_children: set[str] = field(default_factory=set)
    disposal: asyncio.Future[None] | None = None
    accepted: set[str] = field(default_factory=set)
    announced: bool = False
    resident: bool = False  # materialization finished; interrupts before this are accepted no-ops
    poke: asyncio.Future[None] = field(default_factory=lambda: asyncio.get_running_loop().create_future())

    def renew_poke(self) -> None:
        """Resolve-and-replace: wakes whoever awaits the current poke; later waiters get a new one."""
        old = self.poke
        self.poke = asyncio.get_running_loop().create_future()
        if not old.done():
            old.set_result(None)

    @property
    def parked(self) -> bool:
        """Resident, idle, holding accepted waking work no driver runs (§10.3)."""
        from dsh.loader.agent import Idle

        return isinstance(self.agent.phase, Idle) and bool(self.accepted) and self.disposal is None


def state_of(a: Activation) -> ActivationState:
    if a.agent.status == "running" or a.accepted:
        return "running"
    if a.owned_children:
        return "waiting"
    return "settled"
