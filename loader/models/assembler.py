"""Assembly of a chunk stream into one assistant message's content (SPEC §13.1).

Invariants of `result().content`:
- block order is reasoning, text, tool calls; at most one reasoning and one text block, each the
  concatenation of its deltas, omitted when empty;
- tool calls appear in ascending `index`; for each index the first non-empty `id` and `name` seen
  win and `arguments` is the concatenation of its deltas (an empty string becomes `"{}"`, the JSON
  object every tool accepts, so a later `json.loads` never sees an empty document);
- a call whose stream never carried an id gets `call-<index>` (Decision: the index is stable and
  unique within the message; if a provider already used that id for another call, `-<k>` is
  appended). A call that never carried a name keeps `""`; tool execution then reports the
  unknown tool.

Chunks after `Finish` are accepted: OpenAI-compatible streams send usage after the finish reason.
When several `Usage` or `Finish` chunks arrive, the last one wins.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from dsh.loader.errors import ProviderError
from dsh.loader.models.protocol import (
    Chunk,
    Finish,
    FinishReason,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    Usage,
)

__all__ = ["AssembledMessage", "Assembler"]

logger = logging.getLogger(__name__)


@dataclass
class AssembledMessage:
    content: list[dict[str, Any]]
    usage: dict[str, int] | None
    finish: FinishReason


@dataclass
class _ToolCallParts:
    id: str | None = None
    name: str | None = None
    arguments: list[str] = field(default_factory=list)


class Assembler:
    def __init__(self) -> None:
        self._text: list[str] = []
        self._reasoning: list[str] = []
        self._calls: dict[int, _ToolCallParts] = {}
        self._usage: Usage | None = None
        self._finish: FinishReason | None = None

    def feed(self, chunk: Chunk) -> None:
        # The exact classes of a message's usual chunks first (issue 13: ~3 chunks per model call).
        if type(chunk) is TextDelta:
            self._text.append(chunk.text)
        elif type(chunk) is Usage:
            self._usage = chunk
        elif type(chunk) is Finish:
            self._finish = chunk.reason
        elif isinstance(chunk, TextDelta):
            self._text.append(chunk.text)
        elif isinstance(chunk, ReasoningDelta):
            self._reasoning.append(chunk.text)
        elif isinstance(chunk, ToolCallDelta):
            parts = self._calls.setdefault(chunk.index, _ToolCallParts())
            if parts.id is None and chunk.id:
                parts.id = chunk.id
            if parts.name is None and chunk.name:
                parts.name = chunk.name
            parts.arguments.append(chunk.arguments_delta)
        elif isinstance(chunk, Usage):
            self._usage = chunk
        elif isinstance(chunk, Finish):
            self._finish = chunk.reason
        else:  # pragma: no cover - the Chunk union is closed
            raise TypeError(f"not a chunk: {chunk!r}")

    def feed_all(self, chunks: list[Chunk]) -> None:
        """`feed` each chunk, in order: a reply served whole, in one call (issue 13), its text,
        usage and finish inline."""
        for chunk in chunks:
            if type(chunk) is TextDelta:
                self._text.append(chunk.text)
            elif type(chunk) is Usage:
                self._usage = chunk
            elif type(chunk) is Finish:
                self._finish = chunk.reason
            else:
                self.feed(chunk)

    def partial_content(self) -> list[dict[str, Any]]:
        """Reasoning and text received so far, for a message whose stream was interrupted.

        Tool calls are left out on purpose: a half-streamed call cannot be executed or answered.
        """
        blocks: list[dict[str, Any]] = []
        reasoning = "".join(self._reasoning)
        if reasoning:
            blocks.append({"type": "reasoning", "text": reasoning})
        text = "".join(self._text)
        if text:
            blocks.append({"type": "text", "text": text})
        return blocks

    def result(self) -> AssembledMessage:
        if self._finish is None:
            raise ProviderError(
                "INCOMPLETE_STREAM", "the model stream ended without a finish reason"
            )
        content = self.partial_content()
        if self._calls:
            content.extend(self._tool_call_blocks())
        return AssembledMessage(content=content, usage=self._usage_dict(), finish=self._finish)

    def _tool_call_blocks(self) -> list[dict[str, Any]]:
        given = {parts.id for parts in self._calls.values() if parts.id is not None}
        blocks: list[dict[str, Any]] = []
        for index in sorted(self._calls):
            parts = self._calls[index]
            call_id = parts.id if parts.id is not None else _mint_id(index, given)
            if parts.name is None:
                logger.warning("tool call %s (index %d) arrived without a name", call_id, index)
            arguments = "".join(parts.arguments) or "{}"
            blocks.append(
                {
                    "type": "tool-call",
                    "id": call_id,
                    "name": parts.name or "",
                    "arguments": arguments,
                }
            )
        return blocks

    def _usage_dict(self) -> dict[str, int] | None:
        if self._usage is None:
            return None
        usage = {"inputTokens": self._usage.input_tokens, "outputTokens": self._usage.output_tokens}
        if self._usage.cache_read_tokens is not None:
            usage["cacheReadTokens"] = self._usage.cache_read_tokens
        return usage


def _mint_id(index: int, taken: set[str]) -> str:
    candidate = f"call-{index}"
    k = 1
    while candidate in taken:
        candidate = f"call-{index}-{k}"
        k += 1
    taken.add(candidate)
    return candidate
