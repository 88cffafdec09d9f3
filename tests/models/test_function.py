"""`FunctionProvider`: a model scripted by a plain function, driving the real tree runtime.

The tree tests run the real `Tree` (store, manager, tools) over a tmp home with the function at the
model seam; the stream tests drive `FunctionProvider.stream` itself, the unit under test, with a
real `AbortController`. Ordering is by events the function sets, never by sleeps.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from dsh.loader.abort import AbortController, Aborted
from dsh.loader.agent import Agent, text_of, user_message
from dsh.loader.errors import ProviderError
from dsh.loader.models import (
    DEFAULT_USAGE,
    Finish,
    FunctionInfo,
    FunctionProvider,
    FunctionReply,
    ModelRequest,
    ReasoningDelta,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    Usage,
)
from dsh.loader.tree import Tree

BACKSTOP = 10  # seconds; only ever reached when a test is failing


@pytest.fixture
async def function_tree(home: Path) -> AsyncIterator[Callable[..., Tree]]:
    trees: list[Tree] = []

    def build(fn: Any) -> Tree:
        tree = Tree(home=home, provider=FunctionProvider(fn))
        trees.append(tree)
        return tree

    yield build
    for tree in trees:
        await tree.shutdown()


def last_user_text(request: ModelRequest) -> str:
    users = [m for m in request.messages if m["role"] == "user"]
    return text_of(users[-1]["content"], " ")


def turn_ends(agent: Agent) -> list[dict[str, Any]]:
    return [e["data"]["reason"] for e in agent.session.events if e["type"] == "turn/end"]


def request(session_id: str = "s-1") -> ModelRequest:
    return ModelRequest(session_id=session_id, turn=1, step=1, system="", messages=[], tools=[], model="m")


async def test_a_plain_function_scripts_a_tree_root_spawns_child_child_replies_notice_arrives(function_tree):
    seen: list[tuple[str, int, str]] = []

    def model(req: ModelRequest, info: FunctionInfo) -> str | FunctionReply:
        if info.root:
            seen.append(("root", info.call, last_user_text(req)))
            if info.call == 1:
                return FunctionReply(tool_calls=[ToolCall("subagent", {"label": "c", "prompt": "count to 3"})])
            if info.call == 2:
                return "STARTED"
            return "NOTED"
        assert info.descriptor is not None
        seen.append((f"child of {info.descriptor['spawnCallId']}", info.call, last_user_text(req)))
        return "1 2 3"

    tree = function_tree(model)
    root = await tree.create_root()
    root.followup(user_message("go"))
    await asyncio.wait_for(tree.wait_quiet(root), BACKSTOP)

    assert ("child of call-1-0", 1, "count to 3") in seen
    assert [call for who, call, _ in seen if who == "root"] == [1, 2, 3]
    notice = seen[-1][2] if seen[-1][0] == "root" else ""
    assert "is done and now idle" in notice and notice.endswith("1 2 3")
    settled = [e["data"]["source"] for e in root.session.events
               if e["type"] == "user/message" and e["data"]["source"]["kind"] == "subagent-settled"]
    assert [s["stopReason"] for s in settled] == ["completed"]
    assert text_of(root.session.derive_messages()[-1]["content"]) == "NOTED"
    assert tree.manager.activations == {}


async def test_an_async_function_awaiting_forever_is_cancelled_when_the_turn_is_cancelled(function_tree):
    entered, cancelled = asyncio.Event(), asyncio.Event()

    async def model(req: ModelRequest, info: FunctionInfo) -> str:
        entered.set()
        try:
            await asyncio.Event().wait()  # never set: only the abort ends this call
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "unreachable"

    tree = function_tree(model)
    root = await tree.create_root()
    root.followup(user_message("go"))
    await asyncio.wait_for(entered.wait(), BACKSTOP)
    root.cancel({"kind": "user"})
    await asyncio.wait_for(root.when_idle(), BACKSTOP)
    assert turn_ends(root) == [{"kind": "aborted", "reason": {"kind": "user"}}]
    await asyncio.wait_for(cancelled.wait(), BACKSTOP)


async def test_a_provider_error_raised_by_the_function_ends_the_turn_with_its_code(function_tree):
    def model(req: ModelRequest, info: FunctionInfo) -> str:
        raise ProviderError("RATE_LIMITED", "scripted: slow down", status=429)

    tree = function_tree(model)
    root = await tree.create_root()
    root.followup(user_message("go"))
    await asyncio.wait_for(root.when_idle(), BACKSTOP)
    assert turn_ends(root) == [
        {"kind": "error", "error": {"code": "RATE_LIMITED", "message": "scripted: slow down", "status": 429}}
    ]


async def test_no_chunk_is_yielded_once_the_signal_aborts_mid_stream():
    provider = FunctionProvider(lambda req, info: FunctionReply(text="a", tool_calls=[ToolCall("t")]))
    controller = AbortController()
    stream = provider.stream(request(), controller.signal, lambda *a: None)
    assert await anext(stream) == TextDelta("a")
    controller.abort({"kind": "user"})
    with pytest.raises(Aborted) as err:
        await anext(stream)
    assert err.value.reason == {"kind": "user"}


async def test_replies_default_ids_usage_and_finish_and_calls_count_per_session():
    infos: list[FunctionInfo] = []

    def model(req: ModelRequest, info: FunctionInfo) -> str | FunctionReply:
        infos.append(info)
        if req.session_id == "s-1" and info.call == 1:
            return FunctionReply(tool_calls=[ToolCall("a", {"x": 1}), ToolCall("b", '{"raw": true}', id="mine")],
                                 usage=Usage(3, 4))
        return "plain"

    provider = FunctionProvider(model)
    signal = AbortController().signal
    first = [c async for c in provider.stream(request("s-1"), signal, lambda *a: None)]
    assert first == [ToolCallDelta(0, "call-1-0", "a", '{"x":1}'), ToolCallDelta(1, "mine", "b", '{"raw": true}'),
                     Usage(3, 4), Finish("tool-calls")]
    other = [c async for c in provider.stream(request("s-2"), signal, lambda *a: None)]
    again = [c async for c in provider.stream(request("s-1"), signal, lambda *a: None)]
    assert other == again == [TextDelta("plain"), DEFAULT_USAGE, Finish("stop")]
    assert [(len(provider.requests), i.call) for i in infos] == [(3, 1), (3, 1), (3, 2)]
    assert not any(i.root for i in infos) and all(i.descriptor is None for i in infos)


async def test_an_async_function_that_returns_streams_like_a_sync_one():
    async def model(req: ModelRequest, info: FunctionInfo) -> FunctionReply:
        await asyncio.sleep(0)  # a real suspension: the reply arrives on a later loop iteration
        return FunctionReply(text="hi", reasoning="think", finish="max-tokens")

    provider = FunctionProvider(model)
    chunks = [c async for c in provider.stream(request(), AbortController().signal, lambda *a: None)]
    assert chunks == [ReasoningDelta("think"), TextDelta("hi"), DEFAULT_USAGE, Finish("max-tokens")]
