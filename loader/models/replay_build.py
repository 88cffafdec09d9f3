"""A transcript reply made concrete for one request (SPEC §15.2, §13.3): placeholders resolved and
the reply turned into the chunks a provider streams. Split from `replay.py`, which binds sessions to
scripts and serves them; this module knows nothing of sessions or cursors.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dsh.loader.errors import ProviderError, ScriptedCode
from dsh.loader.models.protocol import Chunk, Finish, ReasoningDelta, TextDelta, ToolCallDelta, Usage
from dsh.loader.transcripts import PlaceholderKind, ReplyForm, resolve_placeholders
from dsh.loader.transcripts.placeholders import may_hold_placeholders

if TYPE_CHECKING:
    from dsh.loader.transcripts import Reply  # or its lean record (loader.transcripts.lean)

__all__ = ["DEFAULT_USAGE", "Served", "build", "plain_chunks"]

DEFAULT_USAGE = Usage(input_tokens=10, output_tokens=5)


@dataclass
class Served:
    """One reply made concrete: placeholders resolved, chunks built."""

    form: ReplyForm
    chunks: list[Chunk] = field(default_factory=list)  # the message, or the error/hang prefix
    error: ProviderError | None = None


def build(reply: Reply, lookup: Callable[[PlaceholderKind, str], str | None]) -> Served:
    """Resolve every string of `reply` (§15.2) and turn it into chunks; one delta per field."""
    chunks = plain_chunks(reply)
    if chunks is not None:
        return Served("message", chunks=chunks)
    data = reply.model_dump()  # a fresh dict per serve: nothing to copy when nothing is resolved
    if may_hold_placeholders(data):
        data = resolve_placeholders(data, lookup)
    form = reply.form
    if form == "hang":
        return Served(form, chunks=_prefix(data["hang"]["text"]))
    if form == "error":
        err = data["error"]
        error = ProviderError(ScriptedCode(err["code"]), err["message"], status=err["status"])
        return Served(form, chunks=_prefix(data["text"]), error=error)
    chunks = []
    if data["reasoning"]:
        chunks.append(ReasoningDelta(data["reasoning"]))
    if data["text"]:
        chunks.append(TextDelta(data["text"]))
    for index, call in enumerate(data["tool_calls"] or []):
        chunks.append(ToolCallDelta(index, call["id"], call["name"], _arguments(call["arguments"])))
    usage = data["usage"]
    chunks.append(
        Usage(usage["input_tokens"], usage["output_tokens"]) if usage is not None else DEFAULT_USAGE
    )
    chunks.append(Finish(reply.finish_reason))
    return Served(form, chunks=chunks)


_STOP = Finish("stop")  # chunks are frozen: replies without an explicit finish share one


def plain_chunks(reply: Reply) -> list[Chunk] | None:
    """`build`'s chunks of a message reply without tool calls whose strings hold no `{{` (so no
    placeholder), read from the reply's fields: no `model_dump` and no JSON text per serve (issue
    13). The same chunks `build` makes from the dump (its strings are the reply's own); None for
    every other reply, which takes the general path."""
    if reply.tool_calls or reply.hang is not None or reply.error is not None:
        return None
    text, reasoning = reply.text, reply.reasoning
    if (text is not None and "{{" in text) or (reasoning is not None and "{{" in reasoning):
        return None
    chunks: list[Chunk] = [ReasoningDelta(reasoning)] if reasoning else []
    if text:
        chunks.append(TextDelta(text))
    usage = reply.usage
    chunks.append(Usage(usage.input_tokens, usage.output_tokens) if usage is not None else DEFAULT_USAGE)
    finish = reply.finish  # `reply.finish_reason` of a reply without tool calls
    chunks.append(_STOP if finish is None else Finish(finish))
    return chunks


def _prefix(text: str | None) -> list[Chunk]:
    return [TextDelta(text)] if text else []


def _arguments(arguments: dict[str, Any] | str) -> str:
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments, separators=(",", ":"), ensure_ascii=False)
