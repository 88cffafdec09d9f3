"""Small helpers shared by the continuation-manager tests (matrix 36–67).

Ordering is by facts, never by time: a `Gate` holds one pre-step of one scripted agent until the test
releases it (or until that turn is cancelled, so a drain never waits on a gate); lifecycle and inbox
facts are observed through the manager's and the agents' own emitters. `within` is only a backstop
that fails loudly; it never sequences anything.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from loader.abort import AbortController, AbortSignal
from loader.agent import Agent, PreStep, text_of
from loader.session import FileIO, read

T = TypeVar("T")

BACKSTOP_SECONDS = 5.0


async def within(aw: Awaitable[T], seconds: float = BACKSTOP_SECONDS) -> T:
    """Backstop only: a test that would hang fails loudly instead."""
    return await asyncio.wait_for(aw, seconds)


def signal() -> AbortSignal:
    """A caller signal nobody aborts."""
    return AbortController().signal


# -- transcript replies -------------------------------------------------------------------------


def sa(call_id: str, label: str | None = None, prompt: str | None = None, **extra: Any) -> dict[str, Any]:
    """One `subagent` tool call (background unless `run_in_background=False` is passed)."""
    arguments = {"label": label or call_id, "prompt": prompt or f"task of {call_id}", **extra}
    return {"id": call_id, "name": "subagent", "arguments": arguments}


def calls(*tool_calls: dict[str, Any]) -> dict[str, Any]:
    return {"toolCalls": list(tool_calls)}


def say(text: str) -> dict[str, Any]:
    return {"text": text}


# -- holds ----------------------------------------------------------------------------------------


@dataclass(eq=False)
class Gate:
    """Holds the pre-step `(turn, step)` of one scripted agent (`None` matches any) until released.

    The hold also ends when the held turn's signal aborts, so teardown never waits on a gate."""

    key: str
    turn: int | None = 1
    step: int | None = 1
    reached: asyncio.Event = field(default_factory=asyncio.Event)
    opened: asyncio.Event = field(default_factory=asyncio.Event)
    ctx: PreStep | None = None

    def release(self) -> None:
        self.opened.set()

    def matches(self, ctx: PreStep) -> bool:
        return (self.turn is None or ctx.turn == self.turn) and (self.step is None or ctx.step == self.step)

    async def hook(self, ctx: PreStep) -> None:
        if not self.matches(ctx) or self.opened.is_set():
            return None
        self.ctx = ctx
        self.reached.set()
        opened = asyncio.ensure_future(self.opened.wait())
        try:
            await asyncio.wait({opened, ctx.signal.wait()}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            opened.cancel()
        return None


def key_of(tree: Any, agent: Agent) -> str | None:
    return tree.provider.inner.agent_key_of(agent.id)


def on_agent(tree: Any, key: str, fn: Any) -> None:
    """Call `fn(agent)` for every agent the tree builds for script `key` (every epoch)."""

    def install(agent: Agent) -> None:
        if key_of(tree, agent) == key:
            fn(agent)

    tree.agent_hooks.append(install)


def hold(tree: Any, key: str, turn: int | None = 1, step: int | None = 1) -> Gate:
    gate = Gate(key, turn, step)
    on_agent(tree, key, lambda agent: agent.pre_step.add(gate.hook))
    return gate


def agents_of(tree: Any) -> dict[str, list[Agent]]:
    """Every agent the tree builds, by script key, in build order (one per epoch)."""
    built: dict[str, list[Agent]] = {}

    def install(agent: Agent) -> None:
        built.setdefault(key_of(tree, agent) or "?", []).append(agent)

    tree.agent_hooks.append(install)
    return built


# -- lifecycle ------------------------------------------------------------------------------------


@dataclass
class Lifecycle:
    """Records the manager's `subagent/start` / `subagent/end` edges; `ended(id)` is a monotone fact."""

    starts: list[dict[str, Any]] = field(default_factory=list)
    ends: list[dict[str, Any]] = field(default_factory=list)
    _waiters: dict[str, asyncio.Event] = field(default_factory=dict)

    def _on_end(self, edge: dict[str, Any]) -> None:
        self.ends.append(edge)
        self.ended(edge["sessionId"]).set()

    def ended(self, session_id: str) -> asyncio.Event:
        return self._waiters.setdefault(session_id, asyncio.Event())

    def end_of(self, session_id: str) -> list[dict[str, Any]]:
        return [e for e in self.ends if e["sessionId"] == session_id]


def lifecycle(tree: Any) -> Lifecycle:
    rec = Lifecycle()
    tree.manager.events.on("subagent/start", rec.starts.append)
    tree.manager.events.on("subagent/end", rec._on_end)
    return rec


# -- reading logs ---------------------------------------------------------------------------------


def log(tree: Any, who: Agent | str) -> list[dict[str, Any]]:
    """The in-memory log of a live or disposed agent, or the durable log of a session id."""
    if isinstance(who, Agent):
        return list(who.session.events)
    return list(read(tree.store.path(who)).events)


def of_type(events: list[dict[str, Any]], type_: str) -> list[dict[str, Any]]:
    return [e["data"] for e in events if e["type"] == type_]


def user_texts(events: list[dict[str, Any]]) -> list[str]:
    return [text_of(m["content"], "\n") for m in of_type(events, "user/message")]


def entered(events: list[dict[str, Any]], kind: str | None = None) -> list[dict[str, Any]]:
    """`user/message` data, optionally only those whose source kind is `kind`."""
    return [m for m in of_type(events, "user/message") if kind is None or m["source"]["kind"] == kind]


def inserts(events: list[dict[str, Any]], kind: str | None = None) -> list[tuple[str, dict[str, Any]]]:
    """`(target, message)` for every inbox insert, optionally filtered by source kind."""
    found = []
    for splice in of_type(events, "agent/inbox/spliced"):
        for m in splice["inserted"]:
            if kind is None or m["source"]["kind"] == kind:
                found.append((splice["target"], m))
    return found


def turn_ends(events: list[dict[str, Any]]) -> list[str]:
    return [e["reason"]["kind"] for e in of_type(events, "turn/end")]


def requests_of(tree: Any, session_id: str) -> int:
    return sum(1 for r in tree.provider.requests if r.session_id == session_id)


def assert_script_consumed(tree: Any) -> None:
    """Every reply of every script was served, and nothing else was asked for (§15.4)."""
    tree.provider.inner.finish_checks()
    assert tree.provider.inner.violations == []


# -- a failing file seam --------------------------------------------------------------------------


class FailOnceIO(FileIO):
    """The real file I/O, except that the next write to an armed path raises once (disk full)."""

    def __init__(self) -> None:
        self.armed: set[Path] = set()
        self.failed: list[Path] = []

    def arm(self, path: Path) -> None:
        self.armed.add(path)

    def write(self, path: Path, data: bytes, fsync: bool) -> None:
        if path in self.armed:
            self.armed.discard(path)
            self.failed.append(path)
            raise OSError("simulated disk full")
        super().write(path, data, fsync)
