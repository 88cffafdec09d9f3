"""The chat-completions wire format of the OpenAI-compatible provider (SPEC §13.2): pure functions.

Kept apart from `openai.py` so the mapping can be read and tested without any I/O: request bodies
from §5.3 messages, and chunks from one SSE `data:` payload. Nothing here sees a header or the key.

Invariants:
- reasoning blocks are never sent back; an assistant message with neither text nor tool calls (an
  interrupted reasoning-only message) is dropped, since some servers reject an empty assistant turn;
- a user message's tool-result blocks become `{role: tool, tool_call_id, content}` messages, its
  text blocks one user message joined with a blank line;
- `parse_event` never yields `Finish`: the caller emits it when the stream ends, after any usage
  chunk that follows the `finish_reason` chunk.

Finish reasons (issue 16 item 4: an unknown one used to fail the turn with `UNKNOWN_FINISH`):
`stop`, `tool_calls` and `length` are §13.2's; the spellings other servers use map onto the same
three (`function_call` and `tool_use` → tool-calls if the stream carried a tool call, else stop;
`end_turn`, `stop_sequence`, `eos`,
`eos_token` → stop; `max_tokens`, `model_length` → max-tokens). Any other reason does not fail
the turn: the answer was streamed in full, so it becomes `tool-calls` when the stream carried tool
calls and `stop` otherwise, with a T-LOG-UNKNOWN-FINISH warning. The agent loop runs every tool
call whatever the finish, so the choice only decides what the log records. `content_filter` and
`insufficient_system_resource` stay errors: the server said the answer is not usable.
The legacy `delta.function_call` ({name, arguments}, sent with `finish_reason: function_call` by
servers that predate tools) is read as tool call 0, so such an answer runs its call.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from dsh.loader.errors import ProviderCode, ProviderError
from dsh.loader.models.protocol import (
    Chunk,
    FinishReason,
    ModelRequest,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    Usage,
)
from dsh.loader.texts import render

__all__ = ["finish_reason", "parse_event", "request_body", "to_openai_messages", "to_openai_tools"]

logger = logging.getLogger(__name__)

_FINISH: dict[str, FinishReason] = {
    "stop": "stop", "tool_calls": "tool-calls", "length": "max-tokens",
    # spellings of other OpenAI-compatible servers and gateways
    "end_turn": "stop", "stop_sequence": "stop", "eos": "stop", "eos_token": "stop",
    "max_tokens": "max-tokens", "model_length": "max-tokens",
}
# "The model called a tool", in the legacy and the Anthropic spelling: tool-calls when it did.
_TOOL_FINISH = frozenset({"function_call", "tool_use"})
_FINISH_ERRORS: dict[str, ProviderCode] = {"content_filter": "CONTENT_FILTERED",
                  "insufficient_system_resource": "PROVIDER_OVERLOADED"}


def parse_event(data: str) -> tuple[list[Chunk], str | None]:
    """The chunks of one `data:` payload and its raw `finish_reason`, if any."""
    try:
        payload = json.loads(data)
    except ValueError as exc:
        raise ProviderError("BAD_RESPONSE", "the model stream sent an event that is not JSON "
                            "(BAD_RESPONSE)") from exc
    if not isinstance(payload, dict):
        raise ProviderError("BAD_RESPONSE", "the model stream sent an event that is not a JSON "
                            "object (BAD_RESPONSE)")
    if payload.get("error") is not None:
        raise ProviderError("PROVIDER_ERROR", "the model stream reported an error (PROVIDER_ERROR)")
    chunks: list[Chunk] = []
    reason: str | None = None
    choices = payload.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        choice = choices[0]
        delta = choice.get("delta") or {}
        reasoning = delta.get("reasoning_content")
        if isinstance(reasoning, str) and reasoning:
            chunks.append(ReasoningDelta(reasoning))
        content = delta.get("content")
        if isinstance(content, str) and content:
            chunks.append(TextDelta(content))
        legacy = delta.get("function_call")
        if isinstance(legacy, dict) and not delta.get("tool_calls"):
            chunks.append(ToolCallDelta(index=0, id=None, name=legacy.get("name") or None,
                                        arguments_delta=legacy.get("arguments") or ""))
        for position, call in enumerate(delta.get("tool_calls") or []):
            function = call.get("function") or {}
            index = call.get("index")
            chunks.append(ToolCallDelta(
                index=index if isinstance(index, int) else position,
                id=call.get("id") or None,
                name=function.get("name") or None,
                arguments_delta=function.get("arguments") or "",
            ))
        if choice.get("finish_reason") is not None:
            reason = str(choice["finish_reason"])
    usage = payload.get("usage")
    if isinstance(usage, dict):
        chunks.append(_usage(usage))
    return chunks, reason


def _usage(usage: dict[str, Any]) -> Usage:
    cached = usage.get("prompt_cache_hit_tokens")
    if cached is None:
        cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
    return Usage(
        input_tokens=int(usage.get("prompt_tokens") or 0),
        output_tokens=int(usage.get("completion_tokens") or 0),
        cache_read_tokens=int(cached) if cached is not None else None,
    )


def finish_reason(reason: str, *, saw_tool_calls: bool = False) -> FinishReason:
    """Map a raw `finish_reason` (rules in the module docstring); raises only for the two reasons
    that mean the answer is unusable."""
    if reason in _FINISH:
        return _FINISH[reason]
    if reason in _FINISH_ERRORS:
        code = _FINISH_ERRORS[reason]
        raise ProviderError(code, f"the model stopped with finish_reason {reason} ({code})")
    mapped: FinishReason = "tool-calls" if saw_tool_calls else "stop"
    if reason in _TOOL_FINISH:
        return mapped
    shown = reason if len(reason) <= 40 else reason[:40] + "…"
    logger.warning(render("T-LOG-UNKNOWN-FINISH", reason=repr(shown), mapped=mapped))
    return mapped


def request_body(request: ModelRequest, default_model: str) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": request.model or default_model,
        "messages": to_openai_messages(request.system, request.messages),
    }
    tools = to_openai_tools(request.tools)
    if tools:
        body["tools"] = tools
    body["stream"] = True
    body["stream_options"] = {"include_usage": True}
    if request.max_tokens is not None:
        body["max_tokens"] = request.max_tokens
    if request.temperature is not None:
        body["temperature"] = request.temperature
    return body


def to_openai_messages(system: str, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Map §5.3 messages to chat-completions messages (system first; reasoning never sent back)."""
    out: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    for message in messages:
        blocks = message.get("content") or []
        if message.get("role") == "assistant":
            text = _texts(blocks)
            calls = [
                {"id": b["id"], "type": "function",
                 "function": {"name": b["name"], "arguments": b.get("arguments") or "{}"}}
                for b in blocks if b.get("type") == "tool-call"
            ]
            if not text and not calls:
                continue
            mapped: dict[str, Any] = {"role": "assistant", "content": text or None}
            if calls:
                mapped["tool_calls"] = calls
            out.append(mapped)
            continue
        for block in blocks:
            if block.get("type") == "tool-result":
                inner = block.get("content")
                content = inner if isinstance(inner, str) else _texts(inner or [])
                out.append({"role": "tool", "tool_call_id": block["toolCallId"], "content": content})
        text_blocks = [b for b in blocks if b.get("type") == "text"]
        if text_blocks:
            out.append({"role": "user", "content": _texts(text_blocks)})
    return out


def to_openai_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {"type": "function", "function": {"name": t["name"], "description": t.get("description", ""),
                                          "parameters": t.get("parameters") or {"type": "object"}}}
        for t in tools
    ]


def _texts(blocks: list[dict[str, Any]]) -> str:
    return "\n\n".join(b.get("text", "") for b in blocks if b.get("type") == "text")
