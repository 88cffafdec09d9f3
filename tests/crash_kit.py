"""Hand-made session logs in the exact states a crash leaves (issue 9 §6(a)), and readers for the
facts the crash tests assert: notices by id in a parent's log, epochs in a child's log.

Builders write files the way a crashed run would have: header, then the durable prefix of events,
nothing repaired. `Log` keeps seqs contiguous and ids readable.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dsh.loader.session import make_header, read
from dsh.loader.subagents import EPOCH_EVENT, notice_id

ROOT = "session-11111111-1111-4111-8111-111111111111"
CHILD = "22222222-2222-4222-8222-222222222222"
GRANDCHILD = "33333333-3333-4333-8333-333333333333"


def user(mid: str, text: str, **source: Any) -> dict[str, Any]:
    return {"id": mid, "role": "user", "content": [{"type": "text", "text": text}],
            "source": source or {"kind": "user"}}


def assistant(mid: str, text: str | None = None, calls: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    for c in calls or []:
        content.append({"type": "tool-call", "id": c["id"], "name": c["name"], "arguments": json.dumps(c["arguments"])})
    return {"id": mid, "role": "assistant", "content": content,
            "source": {"kind": "model", "provider": "replay", "model": "replay"}}


@dataclass
class Log:
    """One session's events, appended in order with contiguous seqs."""

    events: list[dict[str, Any]] = field(default_factory=list)
    pending: dict[str, list[str]] = field(default_factory=lambda: {"next-turn": [], "next-step": []})
    turn: int = 0

    def add(self, type_: str, data: dict[str, Any], **extra: Any) -> Log:
        self.events.append({"type": type_, "seq": len(self.events), "time": 1000 + len(self.events),
                            "data": data, **extra})
        return self

    def insert(self, message: dict[str, Any], target: str = "next-turn") -> Log:
        items = self.pending[target]
        self.add("agent/inbox/spliced", {"target": target, "start": len(items), "inserted": [message]})
        items.append(message["id"])
        return self

    def claim(self, target: str = "next-turn") -> Log:
        self.pending[target].pop(0)
        return self.add("agent/inbox/spliced", {"target": target, "start": 0, "inserted": [], "removedCount": 1})

    def descriptor(self, label: str, spawn_call_id: str) -> Log:
        return self.add("subagent/descriptor", {"version": 1, "mode": "continuable", "provider": "spawn",
                                                "label": label, "spawnCallId": spawn_call_id})

    def epoch(self, n: int) -> Log:
        return self.add(EPOCH_EVENT, {"epoch": n}, ignorable=True)

    def answered_turn(self, message: dict[str, Any], *replies: dict[str, Any], open_end: bool = False) -> Log:
        """A turn that claims the head of next-turn and enters it; each reply is one step. With
        `open_end` the turn is left open after its last step (a crash mid-turn)."""
        self.turn += 1
        self.add("turn/start", {"turn": self.turn}).claim()
        for step, reply in enumerate(replies, start=1):
            self.add("step/start", {"turn": self.turn, "step": step})
            if step == 1:
                self.add("user/message", message)
            self.add("assistant/message", {"turn": self.turn, "step": step, "message": reply,
                                           "finish": "tool-calls" if any(b["type"] == "tool-call" for b in reply["content"]) else "stop"})
            for block in reply["content"]:
                if block["type"] == "tool-call":
                    self.add("tool/call", {"turn": self.turn, "step": step, "callId": block["id"],
                                           "name": block["name"], "arguments": block["arguments"]})
                    result = {"id": f"r-{block['id']}", "role": "user", "source": {"kind": "tool", "callId": block["id"]},
                              "content": [{"type": "tool-result", "toolCallId": block["id"], "isError": False,
                                           "content": [{"type": "text", "text": "ok"}]}]}
                    self.add("tool/result", {"turn": self.turn, "step": step, "callId": block["id"], "message": result})
            self.add("step/end", {"turn": self.turn, "step": step})
        if not open_end:
            self.add("turn/end", {"turn": self.turn, "reason": {"kind": "completed"}})
        return self

    def open_turn(self, message: dict[str, Any]) -> Log:
        """A turn cut off right after its step entered `message` (the model never answered)."""
        self.turn += 1
        self.add("turn/start", {"turn": self.turn}).claim()
        self.add("step/start", {"turn": self.turn, "step": 1})
        return self.add("user/message", message)


def notice(child_id: str, epoch: int, text: str) -> dict[str, Any]:
    """The notice the runtime sends for a completed epoch (its content as the runtime renders it)."""
    from dsh.loader.subagents import settlement_message

    return settlement_message(child_id, "completed", [{"type": "text", "text": text}], epoch=epoch)


def write(home: Path, session_id: str, log: Log, *, parent: str | None = None, depth: int = 0,
          created_at: int = 1) -> Path:
    path = home / "sessions" / session_id / "session.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    header = make_header(session_id, parent_session=parent, origin="subagent" if parent else None,
                         delegation_depth=depth, created_at=created_at)
    lines = [header, *log.events]
    path.write_text("".join(json.dumps(x, separators=(",", ":")) + "\n" for x in lines))
    return path


def events_of(home: Path, session_id: str) -> list[dict[str, Any]]:
    return read(home / "sessions" / session_id / "session.jsonl").events


def inserted_ids(events: list[dict[str, Any]]) -> list[str]:
    return [m["id"] for e in events if e["type"] == "agent/inbox/spliced" for m in e["data"].get("inserted", [])]


def notices_in(events: list[dict[str, Any]], child_id: str) -> list[dict[str, Any]]:
    """Every settlement notice from `child_id` ever inserted into this log, in order."""
    return [m for e in events if e["type"] == "agent/inbox/spliced" for m in e["data"].get("inserted", [])
            if m.get("source", {}).get("kind") == "subagent-settled" and m["source"].get("senderSessionId") == child_id]


def entered_ids(events: list[dict[str, Any]]) -> list[str]:
    return [e["data"]["id"] for e in events if e["type"] == "user/message"]


def epoch_markers(events: list[dict[str, Any]]) -> list[int]:
    return [e["data"]["epoch"] for e in events if e["type"] == EPOCH_EVENT]


__all__ = ["CHILD", "GRANDCHILD", "ROOT", "Log", "assistant", "entered_ids", "epoch_markers", "events_of",
           "inserted_ids", "notice", "notice_id", "notices_in", "user", "write"]
