"""SSE bodies in the OpenAI chat-completions stream shape, for the provider, recorder and live-tree tests."""

from __future__ import annotations

import json
from typing import Any

SSE_HEADERS = {"content-type": "text/event-stream"}


def sse(*events: dict[str, Any] | str) -> bytes:
    """`data:` lines for each event (a dict is JSON-encoded, a str sent verbatim), blank-separated."""
    return "".join(f"data: {e if isinstance(e, str) else json.dumps(e)}\n\n" for e in events).encode()


def delta(finish: str | None = None, **fields: Any) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": fields, "finish_reason": finish}]}


def finish(reason: str) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": {}, "finish_reason": reason}]}


def usage(prompt: int, completion: int, **extra: int) -> dict[str, Any]:
    return {"choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": completion, **extra}}
