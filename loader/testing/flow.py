"""The settlement-flow projection (SPEC §20.1): what a tree did, read back from its durable logs.

A flow answers the questions a settlement test asks (which step entered which message, from which
queue, where each notice landed and when it was claimed) without times, seqs or usage, so that it can
be snapshotted. It is computed after shutdown from `<home>/sessions/<id>/session.jsonl` through
`loader.session.read` only: the projection never writes, never repairs and ignores torn tails
(§5.6), and it never looks at live objects, so what it shows is exactly what a later cold resume
would find. Raw ids stay in the result; `loader.testing.normalize` turns them into placeholders.

The inbox is replayed from `agent/inbox/spliced` events exactly as `Inbox._rebuild` does
(`items[start:start + removedCount] = inserted`), which is how a removed message is identified: a
splice with `outcome: "canceled"` discards, any other removing splice is a claim.

Choices where §20.1 leaves a detail open (picked for readable, stable flows):
- Session discovery reads only the header line of each `sessions/*/session.jsonl` and fully reads
  just the sessions reachable from the root, so unrelated (even corrupt) sessions in a shared home
  never affect a flow. A cycle of `parentSession` links is walked once.
- `mode` is `root` for the walked root, else the first descriptor's mode; a child log without a
  descriptor (never written by this runtime) reads `unknown` rather than a guessed mode.
- Children whose `spawnCallId` is not found in the parent's log sort after those that are.
- `insertedAt.lastStep` is 0 when a turn is open but has not entered a step yet.
- `queue` is omitted from an input entry whose insert splice is not in the log (never the case for
  messages this runtime delivers).
- `claimedUnrun` holds claimed messages of a turn that no step of that turn entered; it is omitted
  when empty, and its entries keep claim order.
- A turn without `turn/end` (a crashed, unrepaired log) has no `end` key.
- `output` is always present (`{}` when the step produced no assistant message, e.g. a provider
  error); `text` and `reasoning` join their blocks with `\\n`; tool-call `arguments` that are not
  valid JSON stay the raw string.
- `tools` lists calls in order of their `tool/call` (a result with no call, such as a repair or a
  call refused before dispatch, follows in result order, its name taken from the assistant's
  tool-call block); `text` is absent while a call has no result.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dsh.loader.session import Event, read

if TYPE_CHECKING:
    from dsh.loader.headless import RunResult

__all__ = ["project"]

NOTICE_KINDS = ("subagent-settled", "subagent-report")
_UNKNOWN_POSITION = float("inf")


@dataclass
class _Session:
    id: str
    header: dict[str, Any]
    events: list[Event]
    descriptor: dict[str, Any] | None = None
    children: list[_Session] = field(default_factory=list)


def project(
    home: Path,
    root_id: str,
    result: RunResult | dict[str, Any],
    violations: list[dict[str, Any]],
    transcript_name: str,
) -> dict[str, Any]:
    """The raw (un-normalized) flow of the tree rooted at `root_id` under `home`."""
    root = _load_tree(Path(home) / "sessions", root_id)
    walk: list[tuple[_Session, str]] = []
    _preorder(root, "0", walk)
    sessions: list[dict[str, Any]] = []
    notices: list[dict[str, Any]] = []
    for s, position in walk:
        entry, inbox = _project_session(s, position, is_root=s is root)
        sessions.append(entry)
        notices.extend(inbox)
    return {
        "flow": 1,
        "transcript": transcript_name,
        "sessions": sessions,
        "notices": notices,
        "result": _project_result(result),
        "violations": [_project_violation(v) for v in violations],
    }


# -- the tree ----------------------------------------------------------------------------------
def _read_header(path: Path) -> dict[str, Any] | None:
    try:
        with path.open("rb") as f:
            header = json.loads(f.readline())
    except (OSError, ValueError):
        return None
    return header if isinstance(header, dict) and isinstance(header.get("id"), str) else None


def _load_tree(sessions_dir: Path, root_id: str) -> _Session:
    by_parent: dict[str, list[str]] = {}
    for path in sorted(sessions_dir.glob("*/session.jsonl")):
        header = _read_header(path)
        if header is not None and isinstance(header.get("parentSession"), str):
            by_parent.setdefault(header["parentSession"], []).append(header["id"])
    seen: set[str] = set()

    def load(session_id: str) -> _Session:
        seen.add(session_id)
        r = read(sessions_dir / session_id / "session.jsonl")
        s = _Session(id=session_id, header=r.header, events=r.events)
        s.descriptor = next((e["data"] for e in r.events if e["type"] == "subagent/descriptor"), None)
        for child_id in by_parent.get(session_id, []):
            if child_id not in seen:
                s.children.append(load(child_id))
        calls = {
            e["data"].get("callId"): i for i, e in enumerate(r.events) if e["type"] == "tool/call"
        }
        s.children.sort(key=lambda c: (
            calls.get((c.descriptor or {}).get("spawnCallId"), _UNKNOWN_POSITION),
            c.header.get("createdAt", 0),
            c.id,
        ))
        return s

    return load(root_id)


def _preorder(s: _Session, position: str, out: list[tuple[_Session, str]]) -> None:
    out.append((s, position))
    for i, child in enumerate(s.children, start=1):
        _preorder(child, f"{position}.{i}", out)


# -- one session -------------------------------------------------------------------------------
@dataclass
class _Fate:
    """What happened to one inserted message in its recipient's inbox."""

    message: dict[str, Any]
    queue: str
    inserted_at: dict[str, int] | str
    claimed_in: int | None = None  # the turn whose claim removed it
    discarded: bool = False
    entered_at: dict[str, int] | None = None  # the step whose user/message is this message


def _project_session(
    s: _Session, position: str, *, is_root: bool
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    fates: dict[str, _Fate] = {}
    order: list[str] = []  # insert order, for the notices
    lists: dict[str, list[dict[str, Any]]] = {"next-turn": [], "next-step": []}
    turns: list[dict[str, Any]] = []
    claims: dict[int, list[str]] = {}  # turn -> claimed ids, in claim order
    turn: dict[str, Any] | None = None
    step: dict[str, Any] | None = None
    tools: dict[str, dict[str, Any]] = {}
    last_step = 0
    for event in s.events:
        kind, data = event["type"], event["data"]
        if kind == "agent/inbox/spliced":
            items = lists.setdefault(data.get("target", ""), [])
            start, count = data.get("start", 0), data.get("removedCount", 0)
            removed = items[start:start + count]
            items[start:start + count] = data.get("inserted", [])
            for m in removed:
                fate = fates.get(m.get("id", ""))
                if fate is None:
                    continue
                if data.get("outcome") == "canceled":
                    fate.discarded = True
                else:  # a claim; outside a turn (never written by this runtime) it is unrun
                    fate.claimed_in = turn["turn"] if turn is not None else 0
                    claims.setdefault(fate.claimed_in, []).append(fate.message["id"])
            for m in data.get("inserted", []):
                at: dict[str, int] | str = (
                    {"turn": turn["turn"], "lastStep": last_step} if turn is not None else "idle"
                )
                fates[m["id"]] = _Fate(message=m, queue=data.get("target", ""), inserted_at=at)
                order.append(m["id"])
        elif kind == "turn/start":
            turn = {"turn": data["turn"], "steps": []}
            turns.append(turn)
            last_step = 0
        elif kind == "turn/end" and turn is not None:
            _close_turn(turn, claims.get(turn["turn"], []), fates)
            turn["end"] = _end(data.get("reason", {}))
            turn = None
        elif kind == "step/start" and turn is not None:
            step = {"step": data["step"], "input": [], "output": {}}
            turn["steps"].append(step)
            last_step = data["step"]
            tools = {}
        elif kind == "step/end":
            step = None
        elif kind == "user/message" and step is not None and turn is not None:
            fate = fates.get(data.get("id", ""))
            if fate is not None:
                fate.entered_at = {"turn": turn["turn"], "step": step["step"]}
            step["input"].append(_input_entry(data, fate.queue if fate else None))
        elif kind == "assistant/message" and step is not None:
            step["output"] = _output(data)
        elif kind in ("tool/call", "tool/result") and step is not None:
            _record_tool(step, tools, kind, data)
    if turn is not None:  # a crashed, unrepaired turn: no end
        _close_turn(turn, claims.get(turn["turn"], []), fates)
    entry: dict[str, Any] = {"id": s.id, "position": position}
    if not is_root and s.header.get("parentSession"):
        entry["parent"] = s.header["parentSession"]
    entry["mode"] = "root" if is_root else (s.descriptor or {}).get("mode", "unknown")
    if not is_root and s.descriptor is not None:
        if s.descriptor.get("label"):
            entry["label"] = s.descriptor["label"]
        if s.descriptor.get("spawnCallId"):
            entry["spawnCall"] = s.descriptor["spawnCallId"]
    entry["turns"] = turns
    notices = [_notice(fates[i], s.id) for i in order if _source(fates[i].message).get("kind") in NOTICE_KINDS]
    return entry, notices


def _close_turn(turn: dict[str, Any], claimed: list[str], fates: dict[str, _Fate]) -> None:
    unrun = [fates[i] for i in claimed if fates[i].entered_at is None]
    if unrun:
        turn["claimedUnrun"] = [_input_entry(f.message, f.queue) for f in unrun]


def _source(message: dict[str, Any]) -> dict[str, Any]:
    source = message.get("source")
    return source if isinstance(source, dict) else {}


def _text(blocks: Any, block_type: str = "text") -> str:
    if not isinstance(blocks, list):
        return ""
    return "\n".join(b.get("text", "") for b in blocks if isinstance(b, dict) and b.get("type") == block_type)


def _input_entry(message: dict[str, Any], queue: str | None) -> dict[str, Any]:
    source = _source(message)
    entry: dict[str, Any] = {"id": message.get("id", "")}
    if queue is not None:
        entry["queue"] = queue
    entry["source"] = source.get("kind", "")
    if source.get("senderSessionId"):
        entry["from"] = source["senderSessionId"]
    if source.get("stopReason"):
        entry["stopReason"] = source["stopReason"]
    entry["text"] = _text(message.get("content"))
    return entry


def _end(reason: dict[str, Any]) -> dict[str, Any]:
    end: dict[str, Any] = {"kind": reason.get("kind", "")}
    if end["kind"] == "aborted":
        cause = reason.get("reason")
        if isinstance(cause, dict) and cause.get("kind"):
            end["cause"] = cause["kind"]
    elif end["kind"] == "error":
        error = reason.get("error")
        if isinstance(error, dict):
            end["code"] = error.get("code", "")
            end["message"] = error.get("message", "")
    return end


def _parse_arguments(raw: Any) -> Any:
    if not isinstance(raw, str):
        return raw
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def _output(data: dict[str, Any]) -> dict[str, Any]:
    content = (data.get("message") or {}).get("content") or []
    out: dict[str, Any] = {}
    if any(b.get("type") == "text" for b in content):
        out["text"] = _text(content)
    if any(b.get("type") == "reasoning" for b in content):
        out["reasoning"] = _text(content, "reasoning")
    calls = [
        {"id": b.get("id", ""), "name": b.get("name", ""), "arguments": _parse_arguments(b.get("arguments"))}
        for b in content
        if b.get("type") == "tool-call"
    ]
    if calls:
        out["toolCalls"] = calls
    if data.get("finish"):
        out["finish"] = data["finish"]
    if data.get("interrupted"):
        out["interrupted"] = True
    return out


def _record_tool(
    step: dict[str, Any], tools: dict[str, dict[str, Any]], kind: str, data: dict[str, Any]
) -> None:
    call_id = data.get("callId", "")
    tool = tools.get(call_id)
    if tool is None:
        name = data.get("name") or next(
            (c["name"] for c in step["output"].get("toolCalls", []) if c["id"] == call_id), ""
        )
        tool = tools[call_id] = {"id": call_id, "name": name}
        step.setdefault("tools", []).append(tool)
    if kind == "tool/result":
        blocks = (data.get("message") or {}).get("content") or []
        result: dict[str, Any] = next((b for b in blocks if b.get("type") == "tool-result"), {})
        tool["text"] = _text(result.get("content"))
        error = data.get("error")
        if isinstance(error, dict) and error.get("code"):
            tool["error"] = error["code"]


def _notice(fate: _Fate, recipient: str) -> dict[str, Any]:
    source = _source(fate.message)
    entry: dict[str, Any] = {
        "id": fate.message.get("id", ""),
        "kind": source.get("kind", ""),
        "from": source.get("senderSessionId", ""),
        "to": recipient,
    }
    if source.get("stopReason"):
        entry["stopReason"] = source["stopReason"]
    entry["queue"] = fate.queue
    entry["insertedAt"] = fate.inserted_at
    if fate.entered_at is not None:
        entry["claimedAt"] = fate.entered_at
    elif fate.claimed_in is not None:
        entry["claimedAt"] = "unrunClaim"
    elif fate.discarded:
        entry["claimedAt"] = "discarded"
    else:
        entry["claimedAt"] = "unclaimed"
    return entry


# -- result ------------------------------------------------------------------------------------
def _project_result(result: RunResult | dict[str, Any]) -> dict[str, Any]:
    if isinstance(result, dict):
        return {
            "stopReason": result.get("stopReason", result.get("stop_reason")),
            "exitCode": result.get("exitCode", result.get("exit_code")),
            "output": result.get("output", ""),
        }
    return {"stopReason": result.stop_reason, "exitCode": result.exit_code, "output": result.output}


def _project_violation(v: dict[str, Any]) -> dict[str, Any]:
    entry: dict[str, Any] = {"code": v.get("code", "")}
    if v.get("agent"):
        entry["agent"] = v["agent"]
    return entry
