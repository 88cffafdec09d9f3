"""The data shape of each known event type (SPEC §5.2, issue 15 item 3).

The envelope check (`envelope.envelope_problem`) only says `data` is an object. Everything that
reads a log afterwards — the fold, repair's closers, `sessions list/show` — indexes into `data` and
would crash (`KeyError`, unhashable `callId`, `.get` on a string `reason`) or, worse, write repairs
built from nonsense. `data_problem` names the first field of `data` whose type is wrong, so a reader
refuses the line as `SESSION_CORRUPT` before anything uses it.

The rules accept every event the runtime writes (they run in `validate_log`, hence in every test's
teardown): required fields are the ones every writer sets; optional ones are checked only when
present. Unknown extra fields are allowed (a newer writer of the same format version may add some).
Stdlib only.
"""

from __future__ import annotations

from typing import Any

from dsh.loader.session.turn_end import TURN_END_KINDS

__all__ = ["data_problem", "message_problem"]

_TARGETS = frozenset({"next-turn", "next-step"})


def _is_int(value: Any) -> bool:
    return type(value) is int  # JSON `true` is not a number here


def _content_problem(content: Any, field: str) -> str | None:
    if not isinstance(content, list):
        return f"{field} is not a list of blocks"
    for i, block in enumerate(content):
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            return f"{field}[{i}] is not a block with a string type"
    return None


def message_problem(message: Any, field: str, *, strict: bool) -> str | None:
    """What is wrong with a §5.3 message at `field`, or None. `strict` (an inbox message, which
    repair and the fold key by id): str `id`, str `role` and list `content` are required; otherwise
    each is checked only when present."""
    if not isinstance(message, dict):
        return f"{field} is not an object"
    for name, ok in (("id", isinstance(message.get("id"), str)), ("role", isinstance(message.get("role"), str))):
        if (strict or name in message) and not ok:
            return f"{field}.{name} is not a string"
    if strict or "content" in message:
        return _content_problem(message.get("content"), f"{field}.content")
    return None


def _ints(data: dict[str, Any], *names: str) -> str | None:
    for name in names:
        if not _is_int(data.get(name)):
            return f"data.{name} is not an integer"
    return None


def _reason_problem(reason: Any) -> str | None:
    if not isinstance(reason, dict):
        return "data.reason is not an object"
    if not isinstance(reason.get("kind"), str) or reason["kind"] not in TURN_END_KINDS:
        return "data.reason.kind is not one of §6.10"
    if "error" in reason:
        error = reason["error"]
        if not isinstance(error, dict) or not isinstance(error.get("code"), str):
            return "data.reason.error is not an object with a string code"
    return None


def _splice_problem(data: dict[str, Any]) -> str | None:
    if not isinstance(data.get("target"), str) or data["target"] not in _TARGETS:  # a list is unhashable
        return "data.target is not next-turn or next-step"
    if not _is_int(data.get("start")) or data["start"] < 0:
        return "data.start is not a non-negative integer"
    removed = data.get("removedCount", 0)
    if not _is_int(removed) or removed < 0:
        return "data.removedCount is not a non-negative integer"
    inserted = data.get("inserted", [])
    if not isinstance(inserted, list):
        return "data.inserted is not a list"
    for i, message in enumerate(inserted):
        problem = message_problem(message, f"data.inserted[{i}]", strict=True)
        if problem is not None:
            return problem
    if "outcome" in data and not isinstance(data["outcome"], str):
        return "data.outcome is not a string"
    return None


def data_problem(kind: str, data: dict[str, Any]) -> str | None:
    """The first wrong field of a known event's `data` (`"data.reason is not an object"`), or None;
    unknown types are the caller's business."""
    if kind == "turn/start":
        return _ints(data, "turn")
    if kind == "turn/end":
        return _ints(data, "turn") or _reason_problem(data.get("reason"))
    if kind in ("step/start", "step/end", "llm/retry"):
        return _ints(data, "turn", "step")
    if kind == "user/message":
        return message_problem(data, "data", strict=False)
    if kind == "assistant/message":
        return _ints(data, "turn", "step") or message_problem(data.get("message"), "data.message", strict=False)
    if kind in ("tool/call", "tool/result"):
        problem = _ints(data, "turn", "step")
        if problem is None and not isinstance(data.get("callId"), str):
            problem = "data.callId is not a string"
        if problem is None and kind == "tool/result":
            if "message" in data:
                problem = message_problem(data["message"], "data.message", strict=False)
            if problem is None and "error" in data and not isinstance(data["error"], dict):
                problem = "data.error is not an object"
        return problem
    if kind == "agent/inbox/spliced":
        return _splice_problem(data)
    return None
