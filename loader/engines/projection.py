"""A Temporal run as the client sees it: the tree's JSONL logs, tailed (loader/engines/README.md).

The turn activities write every session's log on the shared `--home`; the client follows those
files and turns each new line into what the local engine's sinks would have seen: an `event` record
per durable event (and a `retry` record per `llm/retry`), a `lifecycle` `subagent/start` after a
child's `subagent/epoch` event, a `subagent/end` after the parent's log holds that child's
settlement notice. The same pass keeps the run result's ledgers (usage and turns per session, the
`subagents` rows), so `result` is built from the same lines the stream showed.

Why tail rather than publish through the workflow: the log is already the durable projection, so
the stream costs no workflow history (a 1,000-child tree would otherwise spend most of its history
budget on events), and a client that starts late, or restarts, reads the same records.

Invariants:
- a line is emitted once, when complete: `offset` counts the bytes of emitted lines, and a partial
  last line is read again next pass (crash repair truncates a torn tail back to a line boundary,
  which is `offset` or beyond it);
- a session belongs to the tree when its header names a parent that does, the root by its id;
- per session, records follow the log's order; across sessions the order is the passes' (the
  comparison with the local engine is per agent, tests/temporal/test_stream.py).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dsh.loader.engines.interrupts import INTERRUPT_EVENT
from dsh.loader.ndjson import record, retry_record
from dsh.loader.sinks import RunSinks

__all__ = ["SessionTail", "TreeTail"]

NOTICE = "subagent-settled"


def _zero() -> dict[str, int]:
    return {"inputTokens": 0, "outputTokens": 0, "cacheReadTokens": 0}


@dataclass
class SessionTail:
    """One log being followed: its parent, where the next unread line starts, its ledgers."""

    session_id: str
    parent_id: str | None
    path: Path
    offset: int = 0
    header_seen: bool = False
    usage: dict[str, int] = field(default_factory=_zero)
    turns: int = 0
    label: str = ""
    epoch: int = 0
    started: int = 0  # the last epoch whose `subagent/start` record went out
    last_stop: str | None = None


class TreeTail:
    """Follows one tree's logs under `home`; `poll()` reads what is new and emits it."""

    def __init__(self, home: Path, root_id: str, sinks: RunSinks) -> None:
        self.sessions_dir = home / "sessions"
        self.root_id = root_id
        self.sinks = sinks
        self.tails: dict[str, SessionTail] = {root_id: self._tail(root_id, None)}
        self._headers: dict[str, str | None] = {}  # session dirs seen outside the tree so far: id -> parent
        self._ends: list[tuple[str, dict[str, Any]]] = []  # end edges waiting for their child's start

    def _tail(self, session_id: str, parent_id: str | None) -> SessionTail:
        return SessionTail(session_id, parent_id, self.sessions_dir / session_id / "session.jsonl")

    # -- one pass ---------------------------------------------------------------------------
    def poll(self) -> None:
        self._discover()
        for tail in list(self.tails.values()):
            self._read(tail)
        self._flush_ends()

    def _discover(self) -> None:
        try:
            entries = [e.name for e in os.scandir(self.sessions_dir) if e.name not in self.tails]
        except FileNotFoundError:
            return
        for name in entries:
            if name not in self._headers:
                header = _first_line(self.sessions_dir / name / "session.jsonl")
                if header is None:
                    continue  # not materialized yet: look again next pass
                parent = header.get("parentSession")
                self._headers[name] = parent if isinstance(parent, str) else None
        placed = True
        while placed:  # a grandchild may be listed before its parent
            placed = False
            for sid, parent in list(self._headers.items()):
                if parent is not None and parent in self.tails:
                    self.tails[sid] = self._tail(sid, parent)
                    del self._headers[sid]
                    placed = True

    def _read(self, tail: SessionTail) -> None:
        try:
            if os.stat(tail.path).st_size <= tail.offset:
                return  # nothing new: a stat, not an open, per quiet log and pass
            with open(tail.path, "rb") as f:
                f.seek(tail.offset)
                chunk = f.read()
        except FileNotFoundError:
            return
        end = chunk.rfind(b"\n")
        if end < 0:
            return
        tail.offset += end + 1
        for line in chunk[:end].split(b"\n"):
            data = json.loads(line)
            if not tail.header_seen:
                tail.header_seen = True
                if self.sinks.on_agent is not None:
                    self.sinks.on_agent(tail.session_id, data)
                continue
            self._event(tail, data)

    # -- what one event means ---------------------------------------------------------------
    def _event(self, tail: SessionTail, event: dict[str, Any]) -> None:
        sid, kind, data = tail.session_id, event["type"], event["data"]
        if kind == INTERRUPT_EVENT:
            return  # the engine's own note (interrupts.py); the local engine has no such event
        if self.sinks.on_event is not None:
            self.sinks.on_event(sid, event)
        self._emit(record("event", sessionId=sid, event=event))
        if kind == "llm/retry":
            self._emit(retry_record(sid, data))
        elif kind == "turn/start":
            tail.turns += 1
        elif kind == "assistant/message":
            for key, value in (data.get("usage") or {}).items():
                if isinstance(value, int) and not isinstance(value, bool):
                    tail.usage[key] = tail.usage.get(key, 0) + value
        elif kind == "subagent/descriptor":
            tail.label = str(data.get("label", ""))
        elif kind == "subagent/epoch" and tail.parent_id is not None:
            tail.epoch = int(data["epoch"])
            tail.started = tail.epoch
            self._lifecycle("subagent/start", {"sessionId": sid, "parentSessionId": tail.parent_id, "epoch": tail.epoch})
        elif kind == "agent/inbox/spliced":
            for message in data.get("inserted") or []:
                source = message.get("source") or {}
                if source.get("kind") == NOTICE and source.get("senderSessionId") in self.tails:
                    child = str(source["senderSessionId"])
                    self._ends.append((child, {"sessionId": child, "parentSessionId": sid,
                                               "stopReason": source.get("stopReason")}))
            self._flush_ends()

    def _flush_ends(self) -> None:
        """An end edge goes out once its child's start did (the child's log may be read after the
        parent's within one pass, though the notice was written after the child's epoch)."""
        waiting: list[tuple[str, dict[str, Any]]] = []
        for child, edge in self._ends:
            tail = self.tails[child]
            if tail.started == 0:
                waiting.append((child, edge))
                continue
            tail.last_stop = edge["stopReason"]
            self._lifecycle("subagent/end", {**edge, "epoch": tail.epoch})
        self._ends = waiting

    def _lifecycle(self, name: str, fields: dict[str, Any]) -> None:
        if self.sinks.on_lifecycle is not None:
            self.sinks.on_lifecycle({"type": "lifecycle", "name": name, **fields})
        self._emit(record("lifecycle", name=name, **fields))

    def _emit(self, rec: dict[str, Any]) -> None:
        if self.sinks.records is not None:
            self.sinks.records.emit(rec)

    # -- the run result's ledgers (as sinks.UsageLedger and ChildLedger keep them) ------------
    def total_usage(self) -> dict[str, int]:
        out = _zero()
        for tail in self.tails.values():
            for key, value in tail.usage.items():
                out[key] = out.get(key, 0) + value
        return out

    def root_turns(self) -> int:
        return self.tails[self.root_id].turns

    def subagents(self) -> list[dict[str, Any]]:
        """The result's `subagents`: every child seen, in the order their epochs started."""
        children = [t for t in self.tails.values() if t.parent_id is not None and t.started]
        return [{"sessionId": t.session_id, "parentSessionId": t.parent_id, "label": t.label, "epochs": t.epoch,
                 "lastStopReason": t.last_stop, "usage": dict(t.usage), "numTurns": t.turns} for t in children]


def _first_line(path: Path) -> dict[str, Any] | None:
    try:
        with open(path, "rb") as f:
            line = f.readline()
    except FileNotFoundError:
        return None
    if not line.endswith(b"\n"):
        return None
    header = json.loads(line)
    return header if isinstance(header, dict) else None
