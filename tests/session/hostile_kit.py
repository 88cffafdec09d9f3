"""Hand-made session files for the hostile-session tests (issue 15 items 1, 3, 4): one good log,
written as raw JSON lines so a test can replace any line with one the runtime would never write."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

SID = "s-hostile"


def header(session_id: str = SID) -> dict[str, Any]:
    return {"type": "session", "version": 1, "id": session_id, "createdAt": 1_700_000_000_000, "delegationDepth": 0}


def good_events() -> list[dict[str, Any]]:
    """One completed turn with a tool call: every event type whose data the validator checks."""
    msg = {"id": "m1", "role": "user", "content": [{"type": "text", "text": "go"}]}
    call = {"type": "tool-call", "id": "c1", "name": "echo", "arguments": "{}"}
    data = [
        ("agent/inbox/spliced", {"target": "next-turn", "start": 0, "inserted": [msg]}),
        ("turn/start", {"turn": 1}),
        ("agent/inbox/spliced", {"target": "next-turn", "start": 0, "removedCount": 1}),
        ("step/start", {"turn": 1, "step": 1}),
        ("user/message", msg),
        ("assistant/message", {"turn": 1, "step": 1, "message": {"id": "a1", "role": "assistant", "content": [call]}}),
        ("tool/call", {"turn": 1, "step": 1, "callId": "c1", "name": "echo", "arguments": "{}"}),
        ("tool/result", {"turn": 1, "step": 1, "callId": "c1",
                         "message": {"role": "user", "content": [{"type": "tool-result", "toolCallId": "c1"}]}}),
        ("step/end", {"turn": 1, "step": 1}),
        ("turn/end", {"turn": 1, "reason": {"kind": "completed"}}),
    ]
    return [{"type": t, "seq": i, "time": 1_700_000_000_001 + i, "data": d} for i, (t, d) in enumerate(data)]


def lines_of(events: list[dict[str, Any]], session_id: str = SID) -> bytes:
    return b"".join(json.dumps(x, separators=(",", ":")).encode() + b"\n" for x in [header(session_id), *events])


def write_session(home: Path, events: list[dict[str, Any]] | None = None, session_id: str = SID) -> Path:
    path = home / "sessions" / session_id / "session.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    for d in (home, home / "sessions", path.parent):
        d.chmod(0o700)
    path.write_bytes(lines_of(good_events() if events is None else events, session_id))
    return path


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
