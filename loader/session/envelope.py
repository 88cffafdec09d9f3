"""Event envelope, header and log invariants (SPEC §5.1, §5.2, §6.10).

An event is a plain dict with exactly the keys `type`, `seq`, `time`, `data` plus an optional
`"ignorable": true`. `seq` is the 0-based index in the log (the header line is not counted), so the
log is contiguous by construction: `all(e["seq"] == i for i, e in enumerate(events))`.

`validate_log` checks the envelope of every event and the relational invariants of §5.2, and names
the first violation as `"<what> at seq N"`. It runs in every test's teardown and on every load, so it
must accept every log the runtime writes, including a live log whose last turn is still open.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from dsh.loader.errors import SessionError
from dsh.loader.ids import is_valid_session_id
from dsh.loader.session.shapes import data_problem
from dsh.loader.session.turn_end import TURN_END_KINDS

__all__ = [
    "EVENT_TYPES",
    "FORMAT_VERSION",
    "TURN_END_KINDS",
    "Event",
    "encode_line",
    "envelope_problem",
    "header_problem",
    "make_header",
    "validate_log",
]

logger = logging.getLogger(__name__)

Event = dict[str, Any]
"""`{"type": str, "seq": int, "time": int, "data": dict}` plus optional `"ignorable": True`."""

FORMAT_VERSION = 1

EVENT_TYPES: frozenset[str] = frozenset(
    {
        "turn/start",
        "turn/end",
        "step/start",
        "step/end",
        "user/message",
        "assistant/message",
        "tool/call",
        "tool/result",
        "agent/inbox/spliced",
        "subagent/descriptor",
        "llm/retry",
    }
)


_ENVELOPE_KEYS = frozenset({"type", "seq", "time", "data"})
_HEADER_REQUIRED = frozenset({"type", "version", "id", "createdAt", "delegationDepth"})
_HEADER_OPTIONAL = frozenset({"cwd", "parentSession", "origin"})

# Events that must name the open (turn, step).
_IN_STEP = frozenset({"assistant/message", "tool/call", "tool/result", "llm/retry"})


def _is_int(value: Any) -> bool:
    # bool is an int subclass; JSON `true` is never a seq, a time or a turn number.
    return type(value) is int


def make_header(
    session_id: str,
    *,
    parent_session: str | None = None,
    origin: str | None = None,
    delegation_depth: int = 0,
    cwd: str | None = None,
    created_at: int | None = None,
) -> dict[str, Any]:
    """Build a §5.1 header line; optional keys are omitted, never `null`."""
    header: dict[str, Any] = {
        "type": "session",
        "version": FORMAT_VERSION,
        "id": session_id,
        "createdAt": created_at if created_at is not None else time.time_ns() // 1_000_000,
    }
    if cwd is not None:
        header["cwd"] = cwd
    if parent_session is not None:
        header["parentSession"] = parent_session
    if origin is not None:
        header["origin"] = origin
    header["delegationDepth"] = delegation_depth
    return header


def header_problem(header: Any) -> str | None:
    """Describe what makes `header` malformed, or return None. Version is checked by the caller first."""
    if not isinstance(header, dict):
        return "header is not an object"
    keys = set(header)
    missing = _HEADER_REQUIRED - keys
    if missing:
        return f"header lacks {', '.join(sorted(missing))}"
    extra = keys - _HEADER_REQUIRED - _HEADER_OPTIONAL
    if extra:
        return f"header has unknown keys {', '.join(sorted(extra))}"
    if header["type"] != "session":
        return "header type is not session"
    if not _is_int(header["version"]) or header["version"] < 1:
        return "header version is not a positive integer"
    if not isinstance(header["id"], str) or not is_valid_session_id(header["id"]):
        return "header id is not a valid session id"
    if not _is_int(header["createdAt"]):
        return "header createdAt is not an integer"
    if not _is_int(header["delegationDepth"]) or header["delegationDepth"] < 0:
        return "header delegationDepth is not a non-negative integer"
    for key in ("cwd", "parentSession"):
        if key in header and not isinstance(header[key], str):
            return f"header {key} is not a string"
    if "origin" in header and header["origin"] != "subagent":
        return "header origin is not subagent"
    return None


def envelope_problem(event: Any) -> str | None:
    """Describe what breaks the §5.1 envelope of one event (seq contiguity excluded), or return None."""
    if not isinstance(event, dict):
        return "event is not an object"
    keys = set(event)
    if keys != _ENVELOPE_KEYS and keys != _ENVELOPE_KEYS | {"ignorable"}:
        return "event keys are not type, seq, time, data[, ignorable]"
    if "ignorable" in event and event["ignorable"] is not True:
        return "ignorable is not true"
    if not isinstance(event["type"], str) or not event["type"]:
        return "event type is not a non-empty string"
    if not _is_int(event["seq"]) or event["seq"] < 0:
        return "seq is not a non-negative integer"
    if not _is_int(event["time"]):
        return "time is not an integer"
    if not isinstance(event["data"], dict):
        return "data is not an object"
    return None


def encode_line(event: dict[str, Any]) -> bytes:
    """One compact UTF-8 JSON line. Lone surrogates cannot be UTF-8, so they fall back to escapes."""
    try:
        text = json.dumps(event, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        return text.encode("utf-8") + b"\n"
    except UnicodeEncodeError:
        return json.dumps(event, separators=(",", ":"), allow_nan=False).encode("ascii") + b"\n"
    except (TypeError, ValueError) as exc:
        raise SessionError("INVALID_EVENT", f"event is not JSON: {exc}") from exc


def validate_log(events: list[Event]) -> None:
    """Raise `SessionError("INVALID_LOG", "<what> at seq N")` on the first violation (§5.1, §5.2)."""
    last_turn = 0
    open_turn: int | None = None
    last_step = 0
    open_step: int | None = None
    step_calls: set[str] = set()  # callIds with a tool/call in the open step

    def fail(what: str, index: int) -> None:
        raise SessionError("INVALID_LOG", f"{what} at seq {index}")

    for index, event in enumerate(events):
        problem = envelope_problem(event)
        if problem is not None:
            fail(problem, index)
        if event["seq"] != index:
            fail(f"seq {event['seq']} breaks contiguity", index)
        kind: str = event["type"]
        data: dict[str, Any] = event["data"]
        if kind not in EVENT_TYPES:
            if not event.get("ignorable"):
                fail(f"unknown event type {kind}", index)
            continue

        if kind == "turn/start":
            if open_turn is not None:
                fail(f"turn/start while turn {open_turn} is open", index)
            if not _is_int(data.get("turn")) or data["turn"] != last_turn + 1:
                fail(f"turn/start {data.get('turn')!r} is not turn {last_turn + 1}", index)
            open_turn = last_turn = data["turn"]
            last_step, open_step = 0, None
        elif kind == "turn/end":
            if open_turn is None:
                fail("turn/end without an open turn", index)
            if data.get("turn") != open_turn or not _is_int(data.get("turn")):
                fail(f"turn/end {data.get('turn')!r} does not match open turn {open_turn}", index)
            if open_step is not None:
                fail(f"turn/end while step {open_step} is open", index)
            reason = data.get("reason")
            kind_of = reason.get("kind") if isinstance(reason, dict) else None
            if not isinstance(kind_of, str) or kind_of not in TURN_END_KINDS:
                fail("turn/end reason kind is not one of §6.10", index)
            open_turn = None
        elif kind == "step/start":
            if open_turn is None:
                fail("step/start without an open turn", index)
            if open_step is not None:
                fail(f"step/start while step {open_step} is open", index)
            if data.get("turn") != open_turn or not _is_int(data.get("turn")):
                fail(f"step/start turn {data.get('turn')!r} is not the open turn {open_turn}", index)
            if not _is_int(data.get("step")) or data["step"] != last_step + 1:
                fail(f"step/start {data.get('step')!r} is not step {last_step + 1}", index)
            open_step = last_step = data["step"]
            step_calls = set()
        elif kind == "step/end":
            if open_step is None:
                fail("step/end without an open step", index)
            if (data.get("turn"), data.get("step")) != (open_turn, open_step):
                fail(f"step/end does not name the open step {open_turn}/{open_step}", index)
            open_step = None
        elif kind == "user/message":
            if open_step is None:
                fail("user/message outside a step", index)
        elif kind in _IN_STEP:
            if open_step is None:
                fail(f"{kind} outside a step", index)
            if (data.get("turn"), data.get("step")) != (open_turn, open_step) or not (
                _is_int(data.get("turn")) and _is_int(data.get("step"))
            ):
                fail(f"{kind} does not name the open step {open_turn}/{open_step}", index)
            if kind == "tool/call":
                if not isinstance(data.get("callId"), str):
                    fail("tool/call without a callId", index)
                step_calls.add(data["callId"])
            elif kind == "tool/result":
                if not isinstance(data.get("callId"), str):
                    fail("tool/result without a callId", index)
                error = data.get("error")
                repaired = isinstance(error, dict) and error.get("code") == "TOOL_NOT_STARTED"
                if data.get("callId") not in step_calls and not repaired:
                    fail(f"tool/result {data.get('callId')!r} without a tool/call in its step", index)
        # agent/inbox/spliced and subagent/descriptor may appear anywhere.
        shape = data_problem(kind, data)  # issue 15 item 3: every field, not only the relations
        if shape is not None:
            fail(shape, index)
