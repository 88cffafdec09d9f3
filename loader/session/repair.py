"""Reading a session file and closing a crash-interrupted turn (SPEC §5.6).

`read(path)` never writes. It returns the header, the good prefix of events and, when bytes follow
the good prefix, `issue = {"truncateTo": offset}`. The good prefix ends at the first line that is
unparsable, fails the envelope check, breaks seq contiguity or lacks its `\\n` (a torn tail).

Rule "damage before a committed turn/end is corruption": if any line *after* the first bad one
parses as a `turn/end`, the bad line is not a torn tail but damage inside committed history, and
`read` raises `SESSION_CORRUPT` instead of offering a truncation. A repair never drops a completed
turn.

Rule "never materialized is not corrupt" (§5.4 item 1, issue 9): a session directory without
`session.jsonl` (perhaps holding only a creation temp file) or with an empty one (left by versions
that created the file before writing its header) is `SESSION_UNMATERIALIZED`: a creation that a
crash cut short, with nothing in it to lose. A missing directory is `SESSION_NOT_FOUND`.

`interrupted_turn_closers(events)` computes the events that close a turn left open by a crash. They
continue the seqs and reuse the time of the last event, so a repaired log is a pure extension of the
committed one: committed bytes are never rewritten.

Rule "claim and entry are one durable fact" (§5.5, §6.7, issue 9): the claim splices of a step are
flushed by the pre-step checkpoint, but its `step/start` and `user/message` events only by the
model-request checkpoint, so a crash in between leaves messages removed from the inbox and shown to
no model. Repair puts each message that a claim removed in the crash-open turn and that no later
`user/message` (same id) entered back into its queue: one re-insert splice per list, `{target,
start: 0, inserted: [...in claim order], outcome: "requeued"}`, among the closers before `turn/end`.
Claims always take the head of a list, so start 0 is the index each was claimed from, ahead of
anything queued after the claim. Messages the open turn did enter stay where they are: in the log,
model-visible from the next request on, never run twice. Claims of turns that ended (a pre-step
checkpoint failure, an abort, a reject) stay consumed: that turn's `turn/end` is durable, so those
were live outcomes, not crashes. The fold (§7.1) counts a re-queued claim for nothing, so the
repaired turn does not read as `aborted` work.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dsh.loader.errors import SessionError
from dsh.loader.session.envelope import (
    EVENT_TYPES,
    FORMAT_VERSION,
    Event,
    envelope_problem,
    header_problem,
    validate_log,
)
from dsh.loader.session._fileio import open_regular
from dsh.loader.session.shapes import data_problem
from dsh.loader.texts import render

__all__ = [
    "REQUEUED",
    "ReadResult",
    "apply_splice",
    "check_resumable",
    "interrupted_turn_closers",
    "parse",
    "read",
    "read_raw",
    "replay_inbox",
]

REQUEUED = "requeued"
"""`agent/inbox/spliced.outcome` of a crash repair's re-insert of claimed-but-unentered messages."""

_TARGETS = ("next-turn", "next-step")

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReadResult:
    header: dict[str, Any]
    events: list[Event]
    issue: dict[str, int] | None
    """`{"truncateTo": byte offset after the last good line}` when a bad tail follows the prefix."""


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _loads(line: bytes) -> Any:
    """Strict JSON: NaN/Infinity and invalid UTF-8 make a line unparsable."""
    return json.loads(line.decode("utf-8"), parse_constant=_refuse_constant)


def _try_loads(line: bytes) -> tuple[bool, Any]:
    try:
        return True, _loads(line)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return False, None


def read(path: Path) -> ReadResult:
    """Read `path` without writing (§5.6). Raises SESSION_NOT_FOUND, NEWER_FORMAT or SESSION_CORRUPT."""
    return parse(read_raw(path), source=str(path))


def read_raw(path: Path) -> bytes:
    """The file's bytes; a missing file is SESSION_UNMATERIALIZED in an existing directory, else
    SESSION_NOT_FOUND."""
    try:
        fd = open_regular(path, os.O_RDONLY)  # no symlink, no FIFO, no device (issue 15 items 1, 4)
    except FileNotFoundError as exc:
        if path.parent.is_dir():
            raise SessionError(
                "SESSION_UNMATERIALIZED", f"{path.parent} holds no session file: it was never materialized"
            ) from exc
        raise SessionError("SESSION_NOT_FOUND", f"no session file at {path}") from exc
    with os.fdopen(fd, "rb") as f:
        return f.read()


def parse(raw: bytes, *, source: str = "<bytes>") -> ReadResult:
    """The pure half of `read`: split `raw` into header, good prefix and issue."""
    if not raw:
        raise SessionError("SESSION_UNMATERIALIZED", f"{source} is empty: it was never materialized")
    end = raw.find(b"\n")
    header_line = raw if end < 0 else raw[:end]
    ok, header = _try_loads(header_line)
    if not ok or not isinstance(header, dict):
        raise SessionError("SESSION_CORRUPT", f"{source}: missing or malformed header")
    # NEWER_FORMAT is decided before any other check (§5.1): a newer writer may change everything else.
    version = header.get("version")
    if type(version) is int and version > FORMAT_VERSION:
        raise SessionError(
            "NEWER_FORMAT", f"{source}: format version {version} is newer than {FORMAT_VERSION}"
        )
    problem = header_problem(header)
    if problem is not None:
        raise SessionError("SESSION_CORRUPT", f"{source}: {problem}")
    if end < 0:
        raise SessionError("SESSION_CORRUPT", f"{source}: header line is not terminated")

    events: list[Event] = []
    offset = end + 1
    bad_at: int | None = None
    while offset < len(raw):
        nl = raw.find(b"\n", offset)
        if nl < 0:
            bad_at = offset  # torn tail: the last line lacks its newline
            break
        ok, event = _try_loads(raw[offset:nl])
        if not ok or envelope_problem(event) is not None or event["seq"] != len(events):
            bad_at = offset
            break
        # A complete line that parses is no torn tail: a wrong field is corruption (issue 15 item 3).
        shape = data_problem(event["type"], event["data"]) if event["type"] in EVENT_TYPES else None
        if shape is not None:
            line_no = len(events) + 2  # the header is line 1
            raise SessionError("SESSION_CORRUPT", f"{source}:{line_no}: {shape} (seq {event['seq']})")
        events.append(event)
        offset = nl + 1

    if bad_at is None:
        return ReadResult(header, events, None)

    # Rule "damage before a committed turn/end is corruption": look at every line after the bad one.
    first_nl = raw.find(b"\n", bad_at)
    if first_nl >= 0:
        for later in raw[first_nl + 1 :].split(b"\n"):
            ok, value = _try_loads(later)
            if ok and isinstance(value, dict) and value.get("type") == "turn/end":
                raise SessionError(
                    "SESSION_CORRUPT",
                    f"{source}: damaged line at byte {bad_at} precedes a committed turn/end",
                )
    logger.info("%s: bad tail at byte %d after seq %d", source, bad_at, len(events) - 1)
    return ReadResult(header, events, {"truncateTo": bad_at})


def _tool_call_ids(message: Any) -> list[str]:
    if not isinstance(message, dict) or not isinstance(message.get("content"), list):
        return []
    return [
        block["id"]
        for block in message["content"]
        if isinstance(block, dict) and block.get("type") == "tool-call" and isinstance(block.get("id"), str)
    ]


def _repair_result(turn: int, step: int, call_id: str, seq: int, recorded: bool) -> dict[str, Any]:
    if recorded:  # the call started: its effect may have happened
        code, tid = "TOOL_OUTCOME_UNKNOWN", "T-REPAIR-UNKNOWN"
    else:
        code, tid = "TOOL_NOT_STARTED", "T-REPAIR-NOT-STARTED"
    text = render(tid)
    message = {
        "id": f"repair-{call_id}-{seq}",
        "role": "user",
        "source": {"kind": "tool", "callId": call_id},
        "content": [
            {
                "type": "tool-result",
                "toolCallId": call_id,
                "isError": True,
                "content": [{"type": "text", "text": text}],
            }
        ],
    }
    error = {"code": code, "message": text}
    return {"turn": turn, "step": step, "callId": call_id, "message": message, "error": error}


def interrupted_turn_closers(events: list[Event]) -> list[Event]:
    """The events that close a turn a crash left open (§5.6); `[]` when no turn is open."""
    open_turn: int | None = None
    open_step: int | None = None
    pending: dict[str, dict[str, int]] = {}  # callId → {"step", "callSeq"?}, in registration order

    for event in events:
        kind, data = event["type"], event["data"]
        if kind == "turn/start":
            open_turn, open_step, pending = data.get("turn"), None, {}
        elif kind == "turn/end":
            open_turn, open_step, pending = None, None, {}
        elif kind == "step/start":
            open_step = data.get("step")
        elif kind == "step/end":
            open_step, pending = None, {}
        elif kind == "assistant/message":
            for call_id in _tool_call_ids(data.get("message")):
                pending[call_id] = {"step": data.get("step")}
        elif kind == "tool/call":
            if data.get("callId") in pending:
                pending[data["callId"]]["callSeq"] = event["seq"]
        elif kind == "tool/result":
            if isinstance(data.get("callId"), str):
                pending.pop(data["callId"], None)

    if open_turn is None:
        return []
    seq = events[-1]["seq"] + 1
    when = events[-1]["time"]
    closers: list[Event] = []

    def emit(kind: str, data: dict[str, Any]) -> None:
        nonlocal seq
        closers.append({"type": kind, "seq": seq, "time": when, "data": data})
        seq += 1

    for call_id, call in pending.items():
        emit("tool/result", _repair_result(open_turn, call["step"], call_id, seq, "callSeq" in call))
    if open_step is not None:
        emit("step/end", {"turn": open_turn, "step": open_step})
    for target, messages in _unentered_claims(events).items():
        # Rule "claim and entry are one durable fact": back at the head, where the claim took them.
        emit("agent/inbox/spliced", {"target": target, "start": 0, "inserted": messages, "outcome": REQUEUED})
    emit("turn/end", {"turn": open_turn, "reason": {"kind": "interrupted"}})
    return closers


def _unentered_claims(events: list[Event]) -> dict[str, list[dict[str, Any]]]:
    """Per target, in claim order: messages claimed in the last (open) turn and not entered."""
    lists: dict[str, list[dict[str, Any]]] = {t: [] for t in _TARGETS}
    unentered: dict[str, tuple[str, dict[str, Any]]] = {}  # message id → (target, message)
    turn_open = False
    for event in events:
        kind, data = event["type"], event["data"]
        if kind == "turn/start":
            turn_open, unentered = True, {}
        elif kind == "turn/end":
            turn_open, unentered = False, {}
        elif kind == "user/message":
            unentered.pop(data.get("id"), None)
        elif kind == "agent/inbox/spliced":
            removed = apply_splice(lists, event)
            if turn_open and removed and data.get("outcome") is None:  # a claim (§6.5)
                for message in removed:
                    unentered[message["id"]] = (data["target"], message)
    queued = {m["id"] for items in lists.values() for m in items}
    out: dict[str, list[dict[str, Any]]] = {}
    for target in ("next-step", "next-turn"):  # the order `claim` takes them in
        messages = [m for t, m in unentered.values() if t == target and m["id"] not in queued]
        if messages:
            out[target] = messages
    return out


def apply_splice(lists: dict[str, list[dict[str, Any]]], event: Event) -> list[dict[str, Any]]:
    """Apply one `agent/inbox/spliced` event to the two lists (§6.5); return the removed messages.

    Inserts go at the end, except a repair's `requeued` re-insert, which may go anywhere; an invalid
    splice raises `SESSION_CORRUPT` ("invalid inbox splice at seq N").
    """
    data = event["data"]
    target = data.get("target")
    start = data.get("start")
    inserted = data.get("inserted", [])
    removed = data.get("removedCount", 0)
    items = lists.get(target) if isinstance(target, str) else None
    if (
        items is None
        or type(start) is not int
        or type(removed) is not int
        or not isinstance(inserted, list)
        or not all(isinstance(m, dict) and isinstance(m.get("id"), str) for m in inserted)
        or start < 0
        or removed < 0
        or start + removed > len(items)
        or (not removed and start != len(items) and inserted and data.get("outcome") != REQUEUED)
    ):
        raise SessionError("SESSION_CORRUPT", f"invalid inbox splice at seq {event['seq']}")
    taken = items[start : start + removed]
    items[start : start + removed] = inserted
    return taken


def replay_inbox(events: list[Event]) -> dict[str, list[dict[str, Any]]]:
    """The inbox lists a log leaves (§6.5 rebuild): every splice replayed in order."""
    lists: dict[str, list[dict[str, Any]]] = {t: [] for t in _TARGETS}
    for event in events:
        if event["type"] == "agent/inbox/spliced":
            apply_splice(lists, event)
    return lists


def check_resumable(session_id: str, result: ReadResult) -> list[Event]:
    """The refusals of `store.load` after `read` (§5.6); returns the closers of an interrupted turn."""
    if result.header["id"] != session_id:
        raise SessionError("SESSION_CORRUPT", f"header id {result.header['id']} is not {session_id}")
    for event in result.events:
        if event["type"] not in EVENT_TYPES and not event.get("ignorable"):
            raise SessionError("UNKNOWN_EVENT", f"unknown event type {event['type']} at seq {event['seq']}")
    closers = interrupted_turn_closers(result.events)
    validate_log(result.events + closers)
    return closers
