"""Builders for the message shapes of SPEC §5.3."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dsh.loader.agent.inbox import Message
from dsh.loader.ids import new_message_id

if TYPE_CHECKING:
    from dsh.loader.agent.agent import Agent

__all__ = ["assistant_message", "text_block", "tool_result_message", "user_message", "text_of"]


def text_block(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def user_message(
    content: str | list[dict[str, Any]], source: dict[str, Any] | None = None, *, id: str | None = None
) -> Message:
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content)  # text_block
    return {
        "id": id or new_message_id(),
        "role": "user",
        "content": blocks,
        "source": dict(source or {"kind": "user"}),
    }


def tool_result_message(call_id: str, text: str, *, is_error: bool) -> Message:
    return {
        "id": new_message_id(),
        "role": "user",
        "source": {"kind": "tool", "callId": call_id},
        "content": [
            {"type": "tool-result", "toolCallId": call_id, "isError": is_error, "content": [text_block(text)]}
        ],
    }


def text_of(content: list[dict[str, Any]] | None, sep: str = "") -> str:
    return sep.join(b.get("text", "") for b in content or [] if b.get("type") == "text")


def assistant_message(agent: Agent, content: list[dict[str, Any]]) -> dict[str, Any]:
    """The model's reply as `agent` records it: a fresh id, the provider and model it came from."""
    return {
        "id": new_message_id(),
        "role": "assistant",
        "content": content,
        "source": {"kind": "model", "provider": agent.provider.name, "model": agent.options.model},
    }
