"""A provider driven by a plain function (after pydantic-ai's `FunctionModel`), beside the replay one.

`FunctionProvider(fn)` answers each model call with `fn(request, info)`, sync or async, returning a
`str` (a text reply) or a `FunctionReply` (text, reasoning, tool calls, usage, finish). Tests and
users script a model, or a whole tree, in Python instead of a transcript: `request.session_id`
and `info.root` / `info.descriptor` tell the agents apart, `request.messages` is what the model
would see. To script a provider failure, raise `ProviderError` from `fn`.

Decisions:
- One delta per field, like the replay provider: reasoning, text, each tool call, usage, finish.
- A tool call without an `id` gets `call-<n>-<i>` (n counts this session's calls, i the call's
  index), unique within the session and stable from run to run.
- `finish` defaults to `tool-calls` when there are tool calls, else `stop`; `usage` to the replay
  provider's `DEFAULT_USAGE`.

Invariants:
- The abort signal is honoured throughout (§4.1): an awaitable `fn` races the signal and is
  cancelled when it loses, and no chunk is yielded once the signal has aborted; both end in
  `Aborted(signal.reason)`. The signal's shared future is never cancelled.
- `info.call` counts the requests served to a session, from 1, when `fn` is called.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dsh.loader.abort import Aborted, AbortSignal
from dsh.loader.models.protocol import (
    Chunk,
    Finish,
    FinishReason,
    ModelRequest,
    OnRetry,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    Usage,
)
from dsh.loader.models.replay import DEFAULT_USAGE

__all__ = ["FunctionInfo", "FunctionProvider", "FunctionReply", "ModelFunction", "ToolCall"]


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: Mapping[str, Any] | str = field(default_factory=dict)  # a str is sent verbatim
    id: str | None = None


@dataclass(frozen=True)
class FunctionReply:
    text: str = ""
    tool_calls: Sequence[ToolCall] = ()
    reasoning: str = ""
    usage: Usage | None = None
    finish: FinishReason | None = None


@dataclass(frozen=True)
class FunctionInfo:
    """What `fn` knows besides the request."""

    call: int
    """This session's n-th request, from 1."""
    root: bool
    """The session is a root (`Tree.create_root` noted it)."""
    descriptor: Mapping[str, Any] | None
    """A child's `subagent/descriptor` (label, mode, spawnCallId, …); None for a root."""
    tools: tuple[str, ...]
    """Names of the tools offered in this request."""
    signal: AbortSignal


Reply = str | FunctionReply
ModelFunction = Callable[[ModelRequest, FunctionInfo], Reply | Awaitable[Reply]]


class FunctionProvider:
    """A `ModelProvider` that calls `fn` once per model request."""

    __test__ = False  # not a pytest test class, despite living where tests import it

    def __init__(self, fn: ModelFunction, *, name: str = "function") -> None:
        self.fn = fn
        self.name = name
        self.requests: list[ModelRequest] = []
        self._calls: dict[str, int] = {}
        self._roots: set[str] = set()
        self._descriptors: dict[str, Mapping[str, Any]] = {}

    # Tree hooks (the recorder's names: nothing is bound, the tree's shape is only noted).
    def note_root(self, session_id: str) -> None:
        self._roots.add(session_id)

    def note_child(self, session_id: str, descriptor: dict[str, Any]) -> None:
        self._descriptors.setdefault(session_id, dict(descriptor))

    async def stream(
        self, request: ModelRequest, signal: AbortSignal, on_retry: OnRetry
    ) -> AsyncGenerator[Chunk, None]:
        signal.throw_if_aborted()
        n = self._calls[request.session_id] = self._calls.get(request.session_id, 0) + 1
        self.requests.append(request)
        info = FunctionInfo(
            call=n,
            root=request.session_id in self._roots,
            descriptor=self._descriptors.get(request.session_id),
            tools=tuple(str(t["name"]) for t in request.tools),
            signal=signal,
        )
        produced = self.fn(request, info)
        reply = await _until_aborted(produced, signal) if inspect.isawaitable(produced) else produced
        for chunk in _chunks(reply, n):
            signal.throw_if_aborted()
            yield chunk

    async def aclose(self) -> None:
        return None


async def _until_aborted(pending: Awaitable[Reply], signal: AbortSignal) -> Reply:
    task: asyncio.Future[Reply] = asyncio.ensure_future(pending)
    waits: set[asyncio.Future[Any]] = {task, signal.wait()}
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            return task.result()
        raise Aborted(signal.reason)
    finally:
        # Abandon an unfinished fn (lost the race, or this read was cancelled); asyncio.wait never
        # cancels what it waits on, so the signal's shared future stays intact.
        if not task.done():
            task.cancel()


def _chunks(reply: Reply, n: int) -> list[Chunk]:
    if isinstance(reply, str):
        reply = FunctionReply(text=reply)
    chunks: list[Chunk] = []
    if reply.reasoning:
        chunks.append(ReasoningDelta(reply.reasoning))
    if reply.text:
        chunks.append(TextDelta(reply.text))
    for index, call in enumerate(reply.tool_calls):
        arguments = call.arguments if isinstance(call.arguments, str) else json.dumps(
            dict(call.arguments), separators=(",", ":"), ensure_ascii=False
        )
        chunks.append(ToolCallDelta(index, call.id or f"call-{n}-{index}", call.name, arguments))
    chunks.append(reply.usage or DEFAULT_USAGE)
    chunks.append(Finish(reply.finish or ("tool-calls" if reply.tool_calls else "stop")))
    return chunks
