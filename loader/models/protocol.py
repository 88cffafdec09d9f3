"""The model seam (SPEC §13.1): what the agent loop asks of a provider and the chunks it gets back.

`agent/` imports only this module from `models/`; providers (OpenAI-compatible, replay) implement
`ModelProvider` structurally. Chunks are frozen values so a recorder can pass them through unchanged
while also keeping them.

Contract every provider keeps:
- `stream` is an async generator; nothing happens until the first `__anext__`.
- Failures raise `ProviderError(code, message, status=...)`; an abort raises `Aborted`. Callers
  classify by `signal.aborted`, never by exception type (§4.1).
- A well-formed stream ends with a `Finish`; the assembler turns a missing one into
  `INCOMPLETE_STREAM`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from dsh.loader.abort import AbortSignal

__all__ = [
    "Chunk",
    "Finish",
    "FinishReason",
    "ModelProvider",
    "ModelRequest",
    "OnRetry",
    "ReasoningDelta",
    "TextDelta",
    "ToolCallDelta",
    "Usage",
]

FinishReason = Literal["stop", "tool-calls", "max-tokens"]


@dataclass(frozen=True)
class TextDelta:
    text: str


@dataclass(frozen=True)
class ReasoningDelta:
    text: str


@dataclass(frozen=True)
class ToolCallDelta:
    """One fragment of tool call `index`; `id` and `name` usually arrive only on the first one."""

    index: int
    id: str | None
    name: str | None
    arguments_delta: str


@dataclass(frozen=True)
class Usage:
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int | None = None


@dataclass(frozen=True)
class Finish:
    reason: FinishReason


Chunk = TextDelta | ReasoningDelta | ToolCallDelta | Usage | Finish


@dataclass
class ModelRequest:
    """One model call: step `step` of turn `turn` of session `session_id`.

    `messages` are the derived request messages (§5.3) and `tools` are `{name, description,
    parameters}` mappings; both are plain JSON-shaped data so every provider maps them itself.
    """

    session_id: str
    turn: int
    step: int
    system: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    model: str
    max_tokens: int | None = None
    temperature: float | None = None


OnRetry = Callable[[int, int, str, int | None], None]
"""`on_retry(attempt, delay_ms, code, status)`, called before each retry sleep (`llm/retry`)."""


class ModelProvider(Protocol):
    name: str
    """Recorded as the assistant message's `source.provider`."""

    def stream(
        self, request: ModelRequest, signal: AbortSignal, on_retry: OnRetry
    ) -> AsyncIterator[Chunk]: ...

    async def aclose(self) -> None: ...
