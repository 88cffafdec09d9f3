"""Agent core over the JSONL store: checkpoints (§5.5) and rebuild on load (§6.1, §6.5).

Write failures come from a `FileIO` subclass at the store's I/O seam; the agent and store are real.
A large batch delay keeps the write-behind timer out of the way, so each flush is one known write.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from dsh.loader.agent import Agent, AgentOptions, ToolExec, ToolOutput, user_message
from dsh.loader.session import FileIO

LONG_DELAY_MS = 5000


class ScriptedIO(FileIO):
    """Fails the writes whose 1-based numbers are in `fail`, and can block write number `block_at`."""

    def __init__(self, fail: set[int] = frozenset(), block_at: int | None = None) -> None:  # type: ignore[assignment]
        self.fail = set(fail)
        self.block_at = block_at
        self.writes = 0
        self.entered = threading.Event()
        self.release = threading.Event()

    def write(self, path: Path, data: bytes, fsync: bool) -> None:
        self.writes += 1
        if self.writes == self.block_at:
            self.entered.set()
            self.release.wait(10)
        if self.writes in self.fail:
            raise OSError(f"simulated write failure #{self.writes}")
        super().write(path, data, fsync)


def kinds(agent: Agent) -> list[str]:
    return [e["type"] for e in agent.session.events]


def ends(agent: Agent) -> list[dict[str, Any]]:
    return [e["data"]["reason"] for e in agent.session.events if e["type"] == "turn/end"]


async def test_failed_pre_step_checkpoint_ends_the_turn_and_parks_the_rest(make_runtime):
    """Matrix 15."""
    io = ScriptedIO(fail={1})
    rt = await make_runtime([{"text": "never"}], batch_delay_ms=LONG_DELAY_MS, io=io)
    agent = await rt.new_agent()
    agent.followup(user_message("first"))
    agent.followup(user_message("second"))
    errors: list[Any] = []
    agent.events.on("agent/error", errors.append)
    await agent.when_idle()
    reason = ends(agent)[0]
    assert reason["kind"] == "error" and reason["error"]["code"] == "CHECKPOINT_FAILED"
    assert "step/start" not in kinds(agent) and "user/message" not in kinds(agent)
    assert rt.provider.requests == []
    assert [m["content"][0]["text"] for m in agent.inbox.next_turn] == ["second"]
    assert agent.status == "idle" and len(errors) == 1


async def test_model_request_waits_for_its_checkpoint(make_runtime):
    """Matrix 27 (first half): the provider is not called until the flush after step/start resolves."""
    io = ScriptedIO(block_at=2)
    rt = await make_runtime([{"text": "ok"}], batch_delay_ms=LONG_DELAY_MS, io=io)
    agent = await rt.new_agent()
    agent.followup(user_message("go"))
    await asyncio.to_thread(io.entered.wait, 10)
    assert "step/start" in kinds(agent)
    assert rt.provider.requests == []
    io.release.set()
    await agent.when_idle()
    assert len(rt.provider.requests) == 1
    assert ends(agent) == [{"kind": "completed"}]


async def test_failed_model_request_checkpoint_never_calls_the_provider(make_runtime):
    """Matrix 27 (second half)."""
    io = ScriptedIO(fail={2})
    rt = await make_runtime([{"text": "never"}], batch_delay_ms=LONG_DELAY_MS, io=io)
    agent = await rt.new_agent()
    agent.followup(user_message("go"))
    await agent.when_idle()
    assert rt.provider.requests == []
    types = kinds(agent)
    assert "step/start" in types and "assistant/message" not in types
    assert ends(agent)[0]["error"]["code"] == "CHECKPOINT_FAILED"


class Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


class BodyTool:
    name = "body"
    description = "records whether its body ran"
    parameters = Args
    concurrency_safe = True
    system_section = None

    def __init__(self) -> None:
        self.ran = 0

    async def run(self, args: Any, exec: ToolExec) -> ToolOutput:
        self.ran += 1
        return ToolOutput(text="ran")


async def test_failed_tool_checkpoint_skips_the_body_and_the_turn_continues(make_runtime):
    """Matrix 29: writes are pre-step (1), model request (2), tool execution (3)."""
    io = ScriptedIO(fail={3})
    rt = await make_runtime(
        [{"toolCalls": [{"id": "b1", "name": "body", "arguments": {}}]}, {"text": "after"}],
        batch_delay_ms=LONG_DELAY_MS,
        io=io,
    )
    agent = await rt.new_agent()
    tool = BodyTool()
    agent.tools = [tool]
    agent.followup(user_message("go"))
    await agent.when_idle()
    assert tool.ran == 0
    result = [e["data"] for e in agent.session.events if e["type"] == "tool/result"][0]
    assert result["error"]["code"] == "CHECKPOINT_FAILED"
    assert len(rt.provider.requests) == 2
    assert ends(agent) == [{"kind": "completed"}]


async def test_loaded_session_restores_a_pending_inject_without_a_turn(make_runtime):
    """Matrix 20."""
    rt = await make_runtime([{"text": "saw it"}])
    first = await rt.new_agent()
    first.inject(user_message("remember me"))
    await rt.store.close(first.session)
    rt.forget(first)
    session = await rt.store.load(first.id)
    again = Agent(session, store=rt.store, provider=rt.provider, options=AgentOptions())
    assert [m["content"][0]["text"] for m in again.inbox.next_step] == ["remember me"]
    assert again.status == "idle" and "turn/start" not in kinds(again)
    again.followup(user_message("now"))
    await again.when_idle()
    texts = [m["content"][0]["text"] for m in rt.provider.requests[0].messages if m["role"] == "user"]
    assert texts == ["remember me", "now"]
    await again.dispose()


async def test_loaded_session_continues_turn_numbering(make_runtime):
    """Matrix 21."""
    rt = await make_runtime([{"text": "one"}, {"text": "two"}])
    first = await rt.new_agent()
    first.followup(user_message("a"))
    await first.when_idle()
    await rt.store.close(first.session)
    rt.forget(first)
    session = await rt.store.load(first.id)
    again = Agent(session, store=rt.store, provider=rt.provider, options=AgentOptions())
    again.followup(user_message("b"))
    await again.when_idle()
    await again.dispose()
    events = rt.store.read(first.id).events
    assert [e["data"]["turn"] for e in events if e["type"] == "turn/start"] == [1, 2]
    assert [e["seq"] for e in events] == list(range(len(events)))
