"""A Temporal run as the client sees it: the tree's JSONL logs, read in passes (loader/engines/README.md).

The turn activities write every session's log on the workers' `--home`. Two halves:
- `read_page` reads the logs from a `Cursor` (pages.py): one pass over the tree's sessions, new
  bytes of complete lines only, bounded by bytes and lines; it runs in this process when the home
  is shared (`TreeTail`) or in the workers' activity `dsh.stream_page` when it is not (stream.py);
- `TreeProjection` turns those bytes into what the local engine's sinks would have seen: an
  `event` record per durable event (and a `retry` record per `llm/retry`), a `lifecycle`
  `subagent/start` after a child's `subagent/epoch` event, a `subagent/end` after the parent's log
  holds that child's settlement notice. The same pass keeps the run result's ledgers (usage and
  turns per session, the `subagents` rows), so `result` is built from the same lines the stream
  showed. Both paths run this same code over the same bytes, so they print the same NDJSON.

Why read logs rather than publish through the workflow: the log is already the durable projection,
so the stream costs no workflow history (a 1,000-child tree would otherwise spend most of its history
budget on events), and a client that starts late, or restarts, reads the same records.

Invariants:
- a line is read once, when complete: a cursor offset counts the bytes handed on, and a partial last
  line is read again next pass (crash repair truncates a torn tail back to a line boundary, which is
  the offset or beyond it); only a complete line longer than a page is handed on in pieces, and the
  projection emits it once its last piece came;
- a session belongs to the tree when its header names a parent that does, the root by its id; its
  index in the cursor is fixed once it joined;
- per session, records follow the log's order; across sessions the order is the passes' (the
  comparison with the local engine is per agent, tests/temporal/test_stream.py). A pass cut by a
  full page goes on in the next page where it stopped, with no new scan: the same records, in the
  same order, as one pass; end edges waiting for their child go out at the end of a pass.
"""

from __future__ import annotations

import base64
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dsh.loader.engines.failed_text import FAILED_TEXT_EVENT
from dsh.loader.engines.interrupts import INTERRUPT_EVENT
from dsh.loader.engines.pages import PAGE_BYTES, PAGE_LINES, PASS_END, Cursor, Page
from dsh.loader.ndjson import record, retry_record
from dsh.loader.sinks import RunSinks

__all__ = ["Quiet", "SessionTail", "TreeProjection", "TreeTail", "has_lines", "read_page"]

NOTICE = "subagent-settled"


def _zero() -> dict[str, int]:
    return {"inputTokens": 0, "outputTokens": 0, "cacheReadTokens": 0}


# -- reading: the logs from a cursor (here, or in the workers' `dsh.stream_page`) ---------------------

# A big tree's quiet logs (`Quiet`): a log unchanged for QUIET_PASSES passes is read only every
# SWEEP_EVERY passes (a new line of it waits at most that many), once the tree has QUIET_FROM sessions.
QUIET_PASSES = 10
SWEEP_EVERY = 10
QUIET_FROM = 64


@dataclass
class Quiet:
    """What a pass may leave unread, kept by a reader that follows one tree on one home
    (`TreeTail`, one long-poll of `dsh.stream_page`). Each pass stat'ed every log and scanned the
    sessions directory, so a follower polling every 50 ms spent O(N) per pass, O(N²) over a
    fan-out whose wall grows with N: 40 s of the client's CPU at N=2,000 (benchmarks/README.md).
    Most logs of a big tree are quiet (a child that settled): a log that grew in the last
    QUIET_PASSES passes is read every pass, the rest on sweep passes; the directory is scanned
    when its mtime moved, a header was incomplete, or on a sweep (a session made in the same clock
    tick as the last scan is found by the next sweep at the latest). A function of the pass count
    and the files; a drain (`read_page(full=True)`) reads and scans everything."""

    passes: int = 0
    changed: list[int] = field(default_factory=list)  # per session index: the pass it last grew or joined
    stamp: int | None = None  # the sessions directory's mtime at the last scan
    unsettled: bool = True  # the last scan found a session whose header was not complete

    def rescan(self, sessions_dir: Path, full: bool) -> bool:
        """Count a new pass; True when it scans the directory for new sessions."""
        self.passes += 1
        try:
            stamp = os.stat(sessions_dir).st_mtime_ns
        except FileNotFoundError:
            return True
        due = full or self.unsettled or stamp != self.stamp or self.sweeping()
        self.stamp = stamp
        return due

    def sweeping(self) -> bool:
        """This pass reads every log and scans the directory."""
        return self.passes % SWEEP_EVERY == 0

    def indices(self, start: int, sessions: int, full: bool) -> range | list[int]:
        """The logs this pass reads from index `start` on (the rest of a pass goes on as it began)."""
        self.changed.extend([self.passes] * (sessions - len(self.changed)))
        if full or sessions < QUIET_FROM or self.sweeping():
            return range(start, sessions)
        changed, now = self.changed, self.passes - QUIET_PASSES
        return [i for i in range(start, sessions) if changed[i] >= now]

    def grew(self, index: int) -> None:
        self.changed[index] = self.passes


def read_page(sessions_dir: Path, root_id: str, cursor: Cursor, headers: dict[str, str | None],
              max_bytes: int = PAGE_BYTES, max_lines: int = PAGE_LINES, *, quiet: Quiet | None = None,
              full: bool = False, in_place: bool = False) -> Page:
    """One pass over the tree's logs from `cursor` (or the rest of a pass a full page cut short),
    at most `max_bytes` of log bytes and `max_lines` lines. `headers` caches the parent of each
    session directory seen outside the tree (a header never changes once complete). With `quiet`
    (and not `full`), a big tree's quiet logs are read only on its sweep passes; `in_place`: the
    cursor is the caller's own, updated rather than copied."""
    sessions = (cursor.sessions if in_place else [list(s) for s in cursor.sessions]) or [[root_id, -1, 0]]
    if cursor.at == 0 and (quiet is None or quiet.rescan(sessions_dir, full)):
        unsettled = _discover(sessions_dir, sessions, headers)
        if quiet is not None:
            quiet.unsettled = unsettled
    start = max(cursor.at - 1, 0)
    indices = range(start, len(sessions)) if quiet is None else quiet.indices(start, len(sessions), full)
    base = os.fspath(sessions_dir)  # a str path per log: pathlib's joins cost more than the stat
    budget = [max_bytes, max_lines]
    pieces: list[list[Any]] = []
    for index in indices:
        sid, _, offset = sessions[index]
        data = _read(f"{base}/{sid}/session.jsonl", int(offset), budget, fresh=not pieces)
        if data:
            pieces.append([index, base64.b64encode(data).decode("ascii")])
            sessions[index][2] = int(offset) + len(data)
            if quiet is not None:
                quiet.grew(index)
        if budget[0] <= 0 or budget[1] <= 0:  # full: the pass goes on from here next page
            return Page(pieces, Cursor(sessions, at=index + 1), spent=[max_bytes, max_lines])
    pieces.append([PASS_END, ""])
    return Page(pieces, Cursor(sessions, at=0), spent=[max_bytes - budget[0], max_lines - budget[1]])


def has_lines(page: Page) -> bool:
    """Whether the page holds any log bytes (not only the end of an empty pass)."""
    return any(index != PASS_END for index, _ in page.pieces)


def _discover(sessions_dir: Path, sessions: list[list[Any]], headers: dict[str, str | None]) -> bool:
    """Join the sessions of the tree new in the directory; True when a header was not complete."""
    known = {str(s[0]): i for i, s in enumerate(sessions)}
    try:
        names = [e.name for e in os.scandir(sessions_dir) if e.name not in known]
    except FileNotFoundError:
        return True
    unsettled = False
    pending: dict[str, str | None] = {}
    for name in names:
        if name not in headers:
            header = _first_line(sessions_dir / name / "session.jsonl")
            if header is None:
                unsettled = True
                continue  # not materialized yet: look again next pass
            parent = header.get("parentSession")
            headers[name] = parent if isinstance(parent, str) else None
        pending[name] = headers[name]
    placed = True
    while placed:  # a grandchild may be listed before its parent
        placed = False
        for sid, parent in list(pending.items()):
            if parent is not None and parent in known:
                known[sid] = len(sessions)
                sessions.append([sid, known[parent], 0])
                del pending[sid]
                placed = True
    return unsettled


def _read(path: str, offset: int, budget: list[int], *, fresh: bool) -> bytes:
    """The complete lines past `offset` within `budget` ([bytes, lines], spent here). A complete
    line longer than the whole page goes in pieces (only into a page that holds nothing yet)."""
    try:
        size = os.stat(path).st_size
        if size <= offset:
            return b""  # nothing new: a stat, not an open, per quiet log and pass
        with open(path, "rb") as f:
            f.seek(offset)
            chunk = f.read(min(size - offset, budget[0]))
            end = chunk.rfind(b"\n")
            if end < 0:
                if len(chunk) == size - offset:
                    return b""  # a torn tail: read again next pass
                if not fresh:
                    budget[0] = 0  # a long line: it starts the next page
                    return b""
                rest = f.read(size - offset - len(chunk))
                if b"\n" not in rest:
                    return b""  # a long line still being written
                budget[0] = 0
                return chunk
    except (FileNotFoundError, NotADirectoryError):
        return b""
    taken = chunk[:end + 1]
    lines = taken.count(b"\n")
    if lines > budget[1]:
        cut = -1
        for _ in range(budget[1]):
            cut = taken.index(b"\n", cut + 1)
        taken, lines = taken[:cut + 1], budget[1]
    # A chunk cut by the byte budget leaves lines for the next page: this page is full.
    budget[0] = 0 if len(chunk) < size - offset else budget[0] - len(taken)
    budget[1] -= lines
    return taken


# -- projecting: bytes to records and ledgers ---------------------------------------------------------

@dataclass
class SessionTail:
    """One log being followed: its parent, the bytes of a line not yet complete, its ledgers."""

    session_id: str
    parent_id: str | None
    pending: bytes = b""
    header_seen: bool = False
    usage: dict[str, int] = field(default_factory=_zero)
    turns: int = 0
    label: str = ""
    epoch: int = 0
    started: int = 0  # the last epoch whose `subagent/start` record went out
    last_stop: str | None = None


class TreeProjection:
    """One tree's pages turned into the sinks' records and the result's ledgers. With `keep`, it
    also keeps each session's bytes (the client without the home checks the logs from them)."""

    def __init__(self, root_id: str, sinks: RunSinks, *, keep: bool = False) -> None:
        self.root_id = root_id
        self.sinks = sinks
        self.tails: dict[str, SessionTail] = {root_id: SessionTail(root_id, None)}
        self._order: list[str] = [root_id]  # cursor index -> session id
        self._ends: list[tuple[str, dict[str, Any]]] = []  # end edges waiting for their child's start
        self.raw: dict[str, bytearray] | None = {} if keep else None

    def feed(self, page: Page) -> None:
        sessions = page.cursor.sessions
        for sid, parent, _ in sessions[len(self._order):]:
            self._order.append(str(sid))
            self.tails[str(sid)] = SessionTail(str(sid), str(sessions[parent][0]) if parent >= 0 else None)
        for index, data in page.pieces:
            if index == PASS_END:
                self._flush_ends()
            else:
                self._bytes(self.tails[self._order[index]], base64.b64decode(data))

    def _bytes(self, tail: SessionTail, data: bytes) -> None:
        if self.raw is not None:
            self.raw.setdefault(tail.session_id, bytearray()).extend(data)
        chunk = tail.pending + data
        end = chunk.rfind(b"\n")
        if end < 0:
            tail.pending = chunk
            return
        tail.pending = chunk[end + 1:]
        for line in chunk[:end].split(b"\n"):
            data_ = json.loads(line)
            if not tail.header_seen:
                tail.header_seen = True
                if self.sinks.on_agent is not None:
                    self.sinks.on_agent(tail.session_id, data_)
                continue
            self._event(tail, data_)

    # -- what one event means ---------------------------------------------------------------
    def _event(self, tail: SessionTail, event: dict[str, Any]) -> None:
        sid, kind, data = tail.session_id, event["type"], event["data"]
        if kind in (INTERRUPT_EVENT, FAILED_TEXT_EVENT):
            return  # this engine's own notes (interrupts.py, failed_text.py); the local engine has none
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


class TreeTail(TreeProjection):
    """A tree's logs read from a home this process shares with the workers; `poll()` reads one pass
    of what is new (in as many pages as it takes) and emits it."""

    def __init__(self, home: Path, root_id: str, sinks: RunSinks, *, keep: bool = False) -> None:
        super().__init__(root_id, sinks, keep=keep)
        self.sessions_dir = home / "sessions"
        self.cursor = Cursor()
        self._headers: dict[str, str | None] = {}  # session dirs seen outside the tree so far: id -> parent
        self._quiet = Quiet()

    def poll(self, *, full: bool = False) -> None:
        """One pass; `full`: every log, quiet or not (the drain after the run)."""
        while True:
            page = read_page(self.sessions_dir, self.root_id, self.cursor, self._headers, quiet=self._quiet,
                             full=full, in_place=True)
            self.cursor = page.cursor
            self.feed(page)
            if page.cursor.at == 0:
                return


def _first_line(path: Path) -> dict[str, Any] | None:
    try:
        with open(path, "rb") as f:
            line = f.readline()
    except (FileNotFoundError, NotADirectoryError):
        return None
    if not line.endswith(b"\n"):
        return None
    header = json.loads(line)
    return header if isinstance(header, dict) else None
