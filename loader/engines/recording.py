"""`dsh run --engine temporal --record FILE` (issue 12 item 4): the recording rebuilt from the logs.

On the local engine a `Recorder` wraps the one process's provider and keeps each reply as it
streams. On Temporal the requests are made in the workers' turn activities, so the client rebuilds
the same entries from the agents' logs, which it reads anyway (from the home or over the server,
stream.py): per session, one reply per `llm/request` event, in log order (the request order):
- the `assistant/message` that follows it → a message (`reasoning`, `text`, `toolCalls`, `usage`
  without `cacheReadTokens`, `finish`), as `Recorder` builds it from the same assembled content;
- an `interrupted` message (an abort kept the partial answer) or no answer before the next request
  or the turn's end → `hang`, with the partial text;
- a turn that ended `error` with no answer → `error: {code, message, status?}` (the provider's
  failure: §13.2 logs it only as the turn's end), with the `text` its stream had sent when the
  turn activity noted one (`engine/failed-text`, failed_text.py), as the Recorder writes it.
Children are keyed `child-<n>` in creation order (header `createdAt`, then id), as `note_child`
orders them, and the observed settlement order becomes fences (`Recorder.write(logs=...)`). The
file is written by `Recorder.write` (same YAML, same redaction, mode 0600). No key reaches it: the
workers' key is never in a log (loader/engines/README.md "Live providers"), and the client's own
secrets are redacted as on the local engine.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dsh.loader.engines.failed_text import FAILED_TEXT_EVENT
from dsh.loader.models import Recorder
from dsh.loader.models.protocol import ModelProvider
from dsh.loader.session import ReadResult

__all__ = ["LoggedRecording", "replies_from_log"]


def replies_from_log(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One session's replies, one per model request its log shows."""
    replies: list[dict[str, Any]] = []
    open_request = False
    failed_text = ""
    for event in events:
        kind, data = event["type"], event["data"]
        if kind == "llm/request":
            if open_request:
                replies.append({"hang": {}})
            open_request, failed_text = True, ""
        elif kind == FAILED_TEXT_EVENT and open_request:
            failed_text = str(data.get("text") or "")
        elif kind == "assistant/message" and open_request:
            open_request = False
            replies.append(_hang(data) if data.get("interrupted") else _message(data))
        elif kind == "turn/end" and open_request:
            open_request = False
            reason = data.get("reason") or {}
            error = reason.get("error") if reason.get("kind") == "error" else None
            if isinstance(error, dict):
                replies.append({**({"text": failed_text} if failed_text else {}),
                                "error": {k: error[k] for k in ("code", "message", "status") if k in error}})
            else:
                replies.append({"hang": {}})
    if open_request:
        replies.append({"hang": {}})  # a run that ended mid-request, as the Recorder writes it
    return replies


def _message(data: dict[str, Any]) -> dict[str, Any]:
    reply: dict[str, Any] = {}
    for block in data["message"].get("content", []):
        if block["type"] == "reasoning":
            reply["reasoning"] = block["text"]
        elif block["type"] == "text":
            reply["text"] = block["text"]
        elif block["type"] == "tool-call":
            reply.setdefault("toolCalls", []).append(
                {"id": block["id"], "name": block["name"], "arguments": _arguments(block["arguments"])})
    usage = data.get("usage")
    if isinstance(usage, dict):
        reply["usage"] = {"inputTokens": usage["inputTokens"], "outputTokens": usage["outputTokens"]}
    reply["finish"] = data.get("finish")
    return reply


def _hang(data: dict[str, Any]) -> dict[str, Any]:
    text = "".join(b.get("text", "") for b in data["message"].get("content", []) if b.get("type") == "text")
    return {"hang": {"text": text} if text else {}}


def _arguments(raw: Any) -> Any:
    from dsh.loader.models.recorder import _arguments as parsed  # the Recorder's own rule

    return parsed(raw) if isinstance(raw, str) else raw


class LoggedRecording(Recorder):
    """A `Recorder` whose entries come from a finished tree's logs, not from a stream."""

    def __init__(self, provider: ModelProvider, root_id: str, logs: Mapping[str, ReadResult]) -> None:
        super().__init__(provider)
        tree = _tree(root_id, logs)
        self.note_root(root_id)
        children = sorted((s for s in tree if s != root_id), key=lambda s: (int(logs[s].header.get("createdAt") or 0), s))
        for sid in children:
            descriptor: dict[str, Any] = next(
                (e["data"] for e in logs[sid].events if e["type"] == "subagent/descriptor"), {})
            self.note_child(sid, descriptor)
        self._logged = {sid: replies_from_log(list(logs[sid].events)) for sid in tree}
        self.events = {sid: list(logs[sid].events) for sid in tree}

    def _replies_of(self, session_id: str | None) -> list[dict[str, Any]]:
        return [dict(r) for r in self._logged.get(session_id or "", [])]


def _tree(root_id: str, logs: Mapping[str, ReadResult]) -> set[str]:
    wanted = {root_id}
    changed = True
    while changed:
        changed = False
        for sid, log in logs.items():
            if sid not in wanted and log.header.get("parentSession") in wanted:
                wanted.add(sid)
                changed = True
    return wanted
