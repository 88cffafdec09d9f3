"""Helpers for tests that drive a whole agent tree (`make_tree`): reply builders, pre-step holds,
hang and settlement events, and a spy `Agent` subclass.

Ordering comes from facts, never from time: a hold parks a chosen (agent, turn, step) in a pre-step
hook until the test releases it; hangs and `subagent/end` edges set events. `reach` wraps an await
in a generous backstop so a broken ordering fails loudly instead of hanging the suite.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from loader.abort import AbortController, AbortSignal
from loader.agent import Agent, PreStep

T = TypeVar("T")

BACKSTOP_SECONDS = 5.0


async def reach(awaitable: Awaitable[T] | asyncio.Event) -> T | None:
    """Await a fact; the timeout is a backstop that fails the test, never a sequencing device."""
    if isinstance(awaitable, asyncio.Event):
        await asyncio.wait_for(awaitable.wait(), BACKSTOP_SECONDS)
        return None
    return await asyncio.wait_for(awaitable, BACKSTOP_SECONDS)


# -- replies -------------------------------------------------------------------------------------
def call(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "name": name, "arguments": arguments}


def spawn(call_id: str, label: str = "task", prompt: str = "do it", **extra: Any) -> dict[str, Any]:
    return call(call_id, "subagent", label=label, prompt=prompt, **extra)


def calls(*tool_calls: dict[str, Any]) -> dict[str, Any]:
    return {"toolCalls": list(tool_calls)}


def text(value: str) -> dict[str, Any]:
    return {"text": value}


HANG: dict[str, Any] = {"hang": {}}


# -- a spy at the agent seam ---------------------------------------------------------------------
class RecordingAgent(Agent):
    """The real Agent; records every `cancel` it receives and can be told to refuse sends."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.cancels: list[tuple[dict[str, Any], bool]] = []
        self.fail_sends: BaseException | None = None

    def cancel(self, cause: dict[str, Any], *, keep_inbox: bool = False) -> None:
        self.cancels.append((dict(cause), keep_inbox))
        super().cancel(cause, keep_inbox=keep_inbox)

    def send(self, message: dict[str, Any], target: Any, wake: bool) -> str:
        if self.fail_sends is not None:
            raise self.fail_sends
        return super().send(message, target, wake)


# -- holds and watches ---------------------------------------------------------------------------
@dataclass
class Hold:
    """One pre-step hold. `reached` is set when the step's hook runs; `release` lets it continue.
    With `respect_abort` the hold also ends when the turn's signal aborts (teardown stays clean)."""

    respect_abort: bool = True
    reached: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)
    claimed: list[dict[str, Any]] = field(default_factory=list)

    async def wait(self, signal: AbortSignal) -> None:
        release = asyncio.ensure_future(self.release.wait())
        waits: set[asyncio.Future[Any]] = {release}
        if self.respect_abort:
            waits.add(signal.wait())
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            release.cancel()


def maintenance_until(finish: asyncio.Event) -> Any:
    """A maintenance task that runs until `finish` is set or its own signal aborts."""

    async def task(signal: AbortSignal) -> None:
        done = asyncio.ensure_future(finish.wait())
        try:
            await asyncio.wait({done, signal.wait()}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            done.cancel()

    return task


class TreeWatch:
    """Installed on a tree before its root is created: agents by script key, pre-step holds, hang
    events and settlement (`subagent/end`) events."""

    def __init__(self, tree: Any) -> None:
        self.tree = tree
        self.replay = tree.provider.inner
        self.agents: dict[str, Agent] = {}
        self.ends: list[dict[str, Any]] = []
        self._holds: dict[tuple[str, int, int], Hold] = {}
        self._hangs: dict[str, asyncio.Event] = {}
        self._ended: dict[str, asyncio.Event] = {}
        self._idle_after_run: dict[str, asyncio.Event] = {}
        tree.agent_hooks.append(self._install)
        self.replay.add_hang_listener(lambda key: self.hang(key).set())
        tree.manager.events.on("subagent/end", self._on_end)

    # agents
    def _install(self, agent: Agent) -> None:
        key = self.replay.agent_key_of(agent.id)
        if key is None:
            return
        self.agents[key] = agent

        async def hook(ctx: PreStep) -> None:
            hold = self._holds.get((key, ctx.turn, ctx.step))
            if hold is None:
                return
            hold.claimed = list(ctx.claimed)
            hold.reached.set()
            await hold.wait(ctx.signal)

        agent.pre_step.add(hook)

        def on_status(payload: dict[str, Any]) -> None:
            if payload["status"] == "idle":
                self.idle_after_run(key).set()

        agent.events.on("agent/status", on_status)

    def id_of(self, key: str) -> str:
        session_id = self.replay.session_of(key)
        assert session_id is not None, f"script {key} is not bound"
        return session_id

    # holds
    def hold(self, key: str, turn: int = 1, step: int = 1, *, respect_abort: bool = True) -> Hold:
        hold = Hold(respect_abort=respect_abort)
        self._holds[(key, turn, step)] = hold
        return hold

    # events
    def hang(self, key: str) -> asyncio.Event:
        return self._hangs.setdefault(key, asyncio.Event())

    def ended(self, key: str) -> asyncio.Event:
        """Set at the first `subagent/end` of the child bound to `key`."""
        return self._ended.setdefault(key, asyncio.Event())

    def idle_after_run(self, key: str) -> asyncio.Event:
        """Set the first time the agent bound to `key` goes from running to idle."""
        return self._idle_after_run.setdefault(key, asyncio.Event())

    def _on_end(self, edge: dict[str, Any]) -> None:
        self.ends.append(edge)
        key = self.replay.agent_key_of(edge["sessionId"])
        if key is not None:
            self.ended(key).set()

    # requests
    def requests_of(self, key: str) -> list[Any]:
        session_id = self.replay.session_of(key)
        return [r for r in self.tree.provider.requests if r.session_id == session_id]


async def build(make_tree: Any, agents: dict[str, Any], **kw: Any) -> tuple[Any, TreeWatch, Agent]:
    """A tree of `RecordingAgent`s with a `TreeWatch` installed, and its root (not yet prompted)."""
    tree = await make_tree(agents, agent_class=RecordingAgent, **kw)
    watch = TreeWatch(tree)
    root = await tree.create_root()
    return tree, watch, root


def fresh_signal() -> AbortSignal:
    """A caller signal that never aborts."""
    return AbortController().signal


# -- log queries ---------------------------------------------------------------------------------
def events_of(agent: Agent, kind: str) -> list[dict[str, Any]]:
    return [e["data"] for e in agent.session.events if e["type"] == kind]


def user_messages(agent: Agent) -> list[dict[str, Any]]:
    return events_of(agent, "user/message")


def texts(message: dict[str, Any]) -> list[str]:
    return [b["text"] for b in message["content"] if b.get("type") == "text"]


def first_texts(agent: Agent) -> list[str]:
    """The first text block of every `user/message`, in log order."""
    return [texts(m)[0] for m in user_messages(agent)]


def turn_ends(agent: Agent) -> list[dict[str, Any]]:
    return [e["reason"] for e in events_of(agent, "turn/end")]


def source_kinds(messages: list[dict[str, Any]]) -> list[str]:
    return [m["source"]["kind"] for m in messages]


def step_batches(agent: Agent) -> list[tuple[int, int, list[dict[str, Any]]]]:
    """`(turn, step, user messages entered by that step)` for every started step."""
    batches: list[tuple[int, int, list[dict[str, Any]]]] = []
    for e in agent.session.events:
        if e["type"] == "step/start":
            batches.append((e["data"]["turn"], e["data"]["step"], []))
        elif e["type"] == "user/message":
            batches[-1][2].append(e["data"])
    return batches


def tool_results(agent: Agent) -> dict[str, dict[str, Any]]:
    return {r["callId"]: r for r in events_of(agent, "tool/result")}


def result_text(result: dict[str, Any]) -> str:
    block = result["message"]["content"][0]
    return "".join(b["text"] for b in block["content"])


def inserted(agent: Agent) -> list[tuple[str, dict[str, Any]]]:
    """`(target, message)` for every inbox insert, in log order."""
    out: list[tuple[str, dict[str, Any]]] = []
    for e in events_of(agent, "agent/inbox/spliced"):
        out.extend((e["target"], m) for m in e.get("inserted", []))
    return out
