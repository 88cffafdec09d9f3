"""The one kit for tests that drive agent trees (`make_tree`, the continuation manager, whole runs).

Ordering comes from facts, never from time: a `Hold` parks a chosen (agent, turn, step) in a pre-step
hook until the test releases it (or until that turn's signal aborts, so a drain never waits on a
hold); hangs, lifecycle edges and inbox facts are observed through the runtime's own emitters.
`reach` wraps an await in a generous backstop so a broken ordering fails loudly instead of hanging.

Log readers take a *source*: an `Agent` (its in-memory log) or a list of events (`log(tree, id)`
reads a durable one), so one helper serves live and disposed agents alike.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, overload

from dsh.loader.abort import AbortController, AbortSignal
from dsh.loader.agent import Agent, PreStep, text_of
from dsh.loader.session import FileIO, read

T = TypeVar("T")
Events = list[dict[str, Any]]
Source = Agent | Events

BACKSTOP_SECONDS = 5.0


@overload
async def reach(awaitable: asyncio.Event) -> None: ...
@overload
async def reach(awaitable: Awaitable[T]) -> T: ...
async def reach(awaitable: Awaitable[T] | asyncio.Event) -> T | None:
    """Await a fact; the timeout is a backstop that fails the test, never a sequencing device."""
    if isinstance(awaitable, asyncio.Event):
        await asyncio.wait_for(awaitable.wait(), BACKSTOP_SECONDS)
        return None
    return await asyncio.wait_for(awaitable, BACKSTOP_SECONDS)


def fresh_signal() -> AbortSignal:
    """A caller signal that never aborts."""
    return AbortController().signal


# -- replies -------------------------------------------------------------------------------------
def call(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "name": name, "arguments": arguments}


def spawn(call_id: str, label: str | None = None, prompt: str | None = None, **extra: Any) -> dict[str, Any]:
    """One `subagent` call (background unless `run_in_background=False`); label defaults to the id."""
    return call(call_id, "subagent", label=label or call_id, prompt=prompt or f"task of {call_id}", **extra)


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


def failing_release(broken: set[str]) -> type[Agent]:
    """The real agent, except that releasing a handle whose id is in `broken` fails after the
    close: a child's disposal failure, for the teardown and notice rules that must survive it."""

    class FailingRelease(Agent):
        def _release(self) -> asyncio.Future[None]:
            closed = super()._release()
            if self.id not in broken:
                return closed
            failure = RuntimeError(f"handle of {self.id} broke")

            async def broke() -> None:
                await closed
                raise failure

            return asyncio.ensure_future(broke())

    return FailingRelease


# -- holds ---------------------------------------------------------------------------------------
@dataclass(eq=False)
class Hold:
    """Holds the pre-step `(turn, step)` of one agent (`None` matches any) until `release()`.

    `reached` is set when the step's hook runs (`ctx` and `claimed` say what it saw). With
    `respect_abort` the hold also ends when the held turn's signal aborts, so teardown stays clean."""

    turn: int | None = 1
    step: int | None = 1
    respect_abort: bool = True
    reached: asyncio.Event = field(default_factory=asyncio.Event)
    opened: asyncio.Event = field(default_factory=asyncio.Event)
    ctx: PreStep | None = None
    claimed: list[dict[str, Any]] = field(default_factory=list)

    def release(self) -> None:
        self.opened.set()

    def matches(self, ctx: PreStep) -> bool:
        return (self.turn is None or ctx.turn == self.turn) and (self.step is None or ctx.step == self.step)

    async def hook(self, ctx: PreStep) -> None:
        if not self.matches(ctx) or self.opened.is_set():
            return None
        self.ctx = ctx
        self.claimed = list(ctx.claimed)
        self.reached.set()
        opened = asyncio.ensure_future(self.opened.wait())
        waits: set[asyncio.Future[Any]] = {opened}
        if self.respect_abort:
            waits.add(ctx.signal.wait())
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            opened.cancel()
        return None


def maintenance_until(finish: asyncio.Event) -> Any:
    """A maintenance task that runs until `finish` is set or its own signal aborts."""

    async def task(signal: AbortSignal) -> None:
        done = asyncio.ensure_future(finish.wait())
        try:
            await asyncio.wait({done, signal.wait()}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            done.cancel()

    return task


# -- per-tree hooks by script key (install before the agents are built) --------------------------
def key_of(tree: Any, agent: Agent) -> str | None:
    return tree.provider.inner.agent_key_of(agent.id)


def on_agent(tree: Any, key: str, fn: Callable[[Agent], Any]) -> None:
    """Call `fn(agent)` for every agent the tree builds for script `key` (every epoch)."""

    def install(agent: Agent) -> None:
        if key_of(tree, agent) == key:
            fn(agent)

    tree.agent_hooks.append(install)


def hold(tree: Any, key: str, turn: int | None = 1, step: int | None = 1) -> Hold:
    """A `Hold` on every epoch of script `key`'s agent, installed before it is built."""
    held = Hold(turn, step)
    on_agent(tree, key, lambda agent: agent.pre_step.add(held.hook))
    return held


def agents_of(tree: Any) -> dict[str, list[Agent]]:
    """Every agent the tree builds, by script key, in build order (one per epoch)."""
    built: dict[str, list[Agent]] = {}

    def install(agent: Agent) -> None:
        built.setdefault(key_of(tree, agent) or "?", []).append(agent)

    tree.agent_hooks.append(install)
    return built


@dataclass
class Lifecycle:
    """Records the manager's `subagent/start` / `subagent/end` edges; `ended(id)` is a monotone fact."""

    starts: Events = field(default_factory=list)
    ends: Events = field(default_factory=list)
    _waiters: dict[str, asyncio.Event] = field(default_factory=dict)

    def _on_end(self, edge: dict[str, Any]) -> None:
        self.ends.append(edge)
        self.ended(edge["sessionId"]).set()

    def ended(self, session_id: str) -> asyncio.Event:
        return self._waiters.setdefault(session_id, asyncio.Event())

    def end_of(self, session_id: str) -> Events:
        return [e for e in self.ends if e["sessionId"] == session_id]


def lifecycle(tree: Any) -> Lifecycle:
    rec = Lifecycle()
    tree.manager.events.on("subagent/start", rec.starts.append)
    tree.manager.events.on("subagent/end", rec._on_end)
    return rec


class TreeWatch:
    """Installed on a tree before its root is created: agents by script key (latest epoch), pre-step
    holds that may be added at any time, hang events and settlement (`subagent/end`) events."""

    def __init__(self, tree: Any) -> None:
        self.tree = tree
        self.replay = tree.provider.inner
        self.agents: dict[str, Agent] = {}
        self.ends: Events = []
        self._holds: dict[tuple[str, int, int], Hold] = {}
        self._hangs: dict[str, asyncio.Event] = {}
        self._ended: dict[str, asyncio.Event] = {}
        self._idle_after_run: dict[str, asyncio.Event] = {}
        tree.agent_hooks.append(self._install)
        self.replay.add_hang_listener(lambda key: self.hang(key).set())
        tree.manager.events.on("subagent/end", self._on_end)

    def _install(self, agent: Agent) -> None:
        key = self.replay.agent_key_of(agent.id)
        if key is None:
            return
        self.agents[key] = agent

        async def hook(ctx: PreStep) -> None:
            held = self._holds.get((key, ctx.turn, ctx.step))
            if held is not None:
                await held.hook(ctx)

        agent.pre_step.add(hook)

        def on_status(payload: dict[str, Any]) -> None:
            if payload["status"] == "idle":
                self.idle_after_run(key).set()

        agent.events.on("agent/status", on_status)

    def id_of(self, key: str) -> str:
        session_id = self.replay.session_of(key)
        assert session_id is not None, f"script {key} is not bound"
        return session_id

    def hold(self, key: str, turn: int = 1, step: int = 1, *, respect_abort: bool = True) -> Hold:
        held = Hold(turn, step, respect_abort=respect_abort)
        self._holds[(key, turn, step)] = held
        return held

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

    def requests_of(self, key: str) -> list[Any]:
        session_id = self.replay.session_of(key)
        return [r for r in self.tree.provider.requests if r.session_id == session_id]


async def build(make_tree: Any, agents: dict[str, Any], **kw: Any) -> tuple[Any, TreeWatch, Agent]:
    """A tree of `RecordingAgent`s with a `TreeWatch` installed, and its root (not yet prompted)."""
    tree = await make_tree(agents, agent_class=RecordingAgent, **kw)
    watch = TreeWatch(tree)
    root = await tree.create_root()
    return tree, watch, root


def requests_of(tree: Any, session_id: str) -> int:
    return sum(1 for r in tree.provider.requests if r.session_id == session_id)


def assert_script_consumed(tree: Any) -> None:
    """Every reply of every script was served, and nothing else was asked for (§15.4)."""
    tree.provider.inner.finish_checks()
    assert tree.provider.inner.violations == []


# -- log queries ---------------------------------------------------------------------------------
def log(tree: Any, who: Agent | str) -> Events:
    """The in-memory log of a live or disposed agent, or the durable log of a session id."""
    if isinstance(who, Agent):
        return list(who.session.events)
    return list(read(tree.store.path(who)).events)


def _events(source: Source) -> Events:
    return list(source.session.events) if isinstance(source, Agent) else source


def events_of(source: Source, kind: str) -> Events:
    """The `data` of every event of type `kind`, in log order."""
    return [e["data"] for e in _events(source) if e["type"] == kind]


def entered(source: Source, kind: str | None = None) -> Events:
    """`user/message` data, optionally only those whose source kind is `kind`."""
    return [m for m in events_of(source, "user/message") if kind is None or m["source"]["kind"] == kind]


def texts(message: dict[str, Any]) -> list[str]:
    return [b["text"] for b in message["content"] if b.get("type") == "text"]


def first_texts(source: Source) -> list[str]:
    """The first text block of every `user/message`, in log order."""
    return [texts(m)[0] for m in entered(source)]


def user_texts(source: Source) -> list[str]:
    """The whole text of every `user/message`, blocks joined by newlines."""
    return [text_of(m["content"], "\n") for m in entered(source)]


def inserts(source: Source, kind: str | None = None) -> list[tuple[str, dict[str, Any]]]:
    """`(target, message)` for every inbox insert, optionally filtered by source kind."""
    found: list[tuple[str, dict[str, Any]]] = []
    for splice in events_of(source, "agent/inbox/spliced"):
        found.extend((splice["target"], m) for m in splice.get("inserted", [])
                     if kind is None or m["source"]["kind"] == kind)
    return found


def turn_ends(source: Source) -> Events:
    """The `reason` of every `turn/end`."""
    return [e["reason"] for e in events_of(source, "turn/end")]


def turn_end_kinds(source: Source) -> list[str]:
    return [reason["kind"] for reason in turn_ends(source)]


def source_kinds(messages: Events) -> list[str]:
    return [m["source"]["kind"] for m in messages]


def step_batches(agent: Agent) -> list[tuple[int, int, Events]]:
    """`(turn, step, user messages entered by that step)` for every started step."""
    batches: list[tuple[int, int, Events]] = []
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


# -- a failing file seam -------------------------------------------------------------------------
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
