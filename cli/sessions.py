"""`dsh sessions list|show|tree|prune` (SPEC §19): views of `$DSH_HOME/sessions`, and one cleanup.

The views never repair or lock anything (§5.6 `read`); liveness is asked of the owning run's socket.
A directory a crash left before its header was published reads as never materialized (issue 9):
`list` shows it as `unmaterialized`, `show`/`tree` say so in one line (exit 2), and
`prune --unmaterialized` removes such directories (never a locked one, never through a symlink).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from dsh.cli.common import fail, resolve_home, say, warn
from dsh.cli.helptext import EPILOGS, HOME_DEFAULT, default

app = typer.Typer(help="Inspect saved sessions.", no_args_is_help=True, rich_markup_mode=None)

HomeOption = Annotated[Optional[Path], typer.Option(
    "--home", metavar="DIR", help="Storage root." + default(HOME_DEFAULT))]
JsonOption = Annotated[bool, typer.Option("--json", help="NDJSON on stdout: one JSON object per line.")]
SessionIdArgument = Annotated[str, typer.Argument(
    metavar="SESSION_ID", help="A session id, as `dsh sessions list` prints it.")]


def _headers(home: Path) -> dict[str, dict[str, Any]]:
    headers: dict[str, dict[str, Any]] = {}
    sessions = home / "sessions"
    if not sessions.is_dir():
        return headers
    from dsh.loader.errors import DshError
    from dsh.loader.session import open_regular

    for path in sorted(sessions.glob("*/session.jsonl")):
        try:  # never a FIFO (it would hang) nor a symlink out of the home (issue 15 items 1, 4)
            with os.fdopen(open_regular(path, os.O_RDONLY), "rb") as f:
                first = f.readline()
            header = json.loads(first)
        except (OSError, ValueError, DshError):
            continue
        if isinstance(header, dict) and header.get("type") == "session":
            headers[path.parent.name] = header
    return headers


def _root_of(headers: dict[str, dict[str, Any]], session_id: str) -> str:
    """The root id whose socket would host `session_id`: the in-memory twin of
    `loader.host.client.route`, walking headers already read instead of re-reading files."""
    seen = {session_id}
    current = session_id
    for _ in range(64):
        parent = headers.get(current, {}).get("parentSession")
        if not parent or parent in seen:
            return current
        if parent not in headers:
            return str(parent)  # the parent's file is gone; its id still names the socket
        seen.add(parent)
        current = parent
    return current


class _Liveness:
    """Asks each root's socket once whether a run serves it; returns its `run.status`."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self._cache: dict[str, dict[str, Any] | None] = {}

    def status(self, root_id: str) -> dict[str, Any] | None:
        if root_id not in self._cache:
            from dsh.loader.host.client import call_sync

            try:
                self._cache[root_id] = call_sync(self.home, root_id, "run.status", {}, timeout=2)
            except Exception:
                self._cache[root_id] = None
        return self._cache[root_id]


def _read(home: Path, session_id: str) -> Any:
    from dsh.loader.errors import DshError
    from dsh.loader.ids import check_session_id
    from dsh.loader.session import read
    from dsh.loader.texts import render

    try:
        check_session_id(session_id)  # before the id becomes a path (issue 15 items 5, 6)
    except DshError as exc:
        fail(exc.message, 2)

    path = home / "sessions" / session_id / "session.jsonl"
    if not path.parent.is_dir():
        fail(render("T-CLI-UNKNOWN-SESSION", id=session_id, home=home), 2)
    try:
        return read(path)
    except DshError as exc:
        if exc.code == "SESSION_UNMATERIALIZED":
            fail(render("T-CLI-UNMATERIALIZED", id=session_id, path=path.parent), 2)
        warn(f"dsh: {session_id}: {exc.message} [{exc.code}]")
        raise typer.Exit(1) from None


@app.command("list", epilog=EPILOGS["sessions list"])
def list_sessions(home: HomeOption = None, json_output: JsonOption = False) -> None:
    """One row per session: id, createdAt, parent, origin, turns, last turn end, live; then one
    `unmaterialized` row per directory a crash left before its header was published."""
    from datetime import datetime, timezone

    from dsh.loader.errors import DshError
    from dsh.loader.session import read, unmaterialized_ids

    root_dir = resolve_home(home)
    headers = _headers(root_dir)
    live = _Liveness(root_dir)
    rows: list[dict[str, Any]] = []
    for sid, header in sorted(headers.items(), key=lambda kv: (kv[1].get("createdAt", 0), kv[0])):
        turns, last_end = 0, None
        try:
            events = read(root_dir / "sessions" / sid / "session.jsonl").events
        except DshError as exc:  # one bad session never breaks the list (issue 15 item 3)
            rows.append({"id": sid, "corrupt": True, "error": exc.message})
            continue
        for event in events:
            if event["type"] == "turn/start":
                turns += 1
            elif event["type"] == "turn/end":
                last_end = event["data"]["reason"].get("kind")
        rows.append({
            "id": sid,
            "createdAt": header.get("createdAt"),
            "parent": header.get("parentSession"),
            "origin": header.get("origin"),
            "turns": turns,
            "lastTurnEnd": last_end,
            "live": live.status(_root_of(headers, sid)) is not None,
        })
    unmaterialized = unmaterialized_ids(root_dir / "sessions")
    if json_output:
        for row in rows:
            say(json.dumps(row, separators=(",", ":")))
        for sid in unmaterialized:
            say(json.dumps({"id": sid, "unmaterialized": True}, separators=(",", ":")))
        return
    for row in rows:
        if row.get("corrupt"):
            say(f"{row['id']}  corrupt")
            continue
        created = datetime.fromtimestamp((row["createdAt"] or 0) / 1000, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        say("  ".join([
            row["id"], created, row["parent"] or "-", row["origin"] or "root", f"turns={row['turns']}",
            f"last={row['lastTurnEnd'] or '-'}", "live" if row["live"] else "-",
        ]))
    for sid in unmaterialized:
        say(f"{sid}  unmaterialized")


def _summary(event: dict[str, Any]) -> str:
    data = event.get("data", {})
    kind = event["type"]
    if kind in ("turn/start", "step/start", "step/end"):
        return " ".join(f"{k}={v}" for k, v in data.items())
    if kind == "turn/end":
        reason = data.get("reason", {})
        extra = reason.get("reason", {}).get("kind") or reason.get("error", {}).get("code") or ""
        return f"turn={data.get('turn')} {reason.get('kind')} {extra}".rstrip()
    if kind == "user/message":
        text = " ".join(b.get("text", "") for b in data.get("content", []) if b.get("type") == "text")
        return f"[{data.get('source', {}).get('kind')}] {_clip(text)}"
    if kind == "assistant/message":
        blocks = data.get("message", {}).get("content", [])
        parts = [_clip(b.get("text", "")) if b.get("type") == "text" else f"<{b.get('type')} {b.get('name', '')}>".replace(" >", ">") for b in blocks]
        tail = " (interrupted)" if data.get("interrupted") else f" finish={data.get('finish')}"
        return " ".join(parts) + tail
    if kind == "tool/call":
        return f"{data.get('callId')} {data.get('name')} {_clip(str(data.get('arguments')))}"
    if kind == "tool/result":
        error = data.get("error")
        return f"{data.get('callId')} " + (f"error {error.get('code')}" if error else "ok")
    if kind == "agent/inbox/spliced":
        return (f"{data.get('target')} +{len(data.get('inserted', []))} -{data.get('removedCount', 0)}"
                + (f" {data['outcome']}" if data.get("outcome") else ""))
    if kind == "subagent/descriptor":
        return f"{data.get('mode')} label={data.get('label')!r}"
    return _clip(json.dumps(data, separators=(",", ":")))


def _clip(text: str, width: int = 80) -> str:
    text = text.replace("\n", " ")
    return text if len(text) <= width else text[: width - 1] + "…"


@app.command("show", epilog=EPILOGS["sessions show"])
def show(
    session_id: SessionIdArgument,
    home: HomeOption = None,
    json_output: JsonOption = False,
) -> None:
    """Events of one session (`seq type summary`, or raw JSONL); torn or corrupt state is reported."""
    root_dir = resolve_home(home)
    result = _read(root_dir, session_id)
    if json_output:
        say(json.dumps(result.header, separators=(",", ":")))
        for event in result.events:
            say(json.dumps(event, separators=(",", ":")))
    else:
        for event in result.events:
            say(f"{event['seq']:>5} {event['type']:<22} {_summary(event)}")
    if result.issue is not None:
        warn(f"dsh: {session_id}: torn tail after byte {result.issue['truncateTo']} (ignored; a resume repairs it)")


@app.command("tree", epilog=EPILOGS["sessions tree"])
def tree(
    session_id: SessionIdArgument,
    home: HomeOption = None,
    json_output: JsonOption = False,
) -> None:
    """Descendants with label, mode, last stop reason and live status."""
    from dsh.loader.agent import epoch_stop_reason, fold_consumed_work, one_shot_stop_reason
    from dsh.loader.errors import DshError
    from dsh.loader.session import read

    root_dir = resolve_home(home)
    _read(root_dir, session_id)
    headers = _headers(root_dir)
    children: dict[str, list[str]] = {}
    for sid, header in headers.items():
        parent = header.get("parentSession")
        if isinstance(parent, str):
            children.setdefault(parent, []).append(sid)
    status = _Liveness(root_dir).status(_root_of(headers, session_id))
    live = {a["sessionId"]: a.get("status") for a in (status or {}).get("agents", [])}
    rows: list[dict[str, Any]] = []

    def visit(sid: str, depth: int, seen: set[str]) -> None:
        try:
            events = read(root_dir / "sessions" / sid / "session.jsonl").events
        except DshError:
            events = []
        descriptor = next((e["data"] for e in events if e["type"] == "subagent/descriptor"), None)
        mode = (descriptor or {}).get("mode", "root" if depth == 0 and not headers.get(sid, {}).get("parentSession") else "unknown")
        fold = fold_consumed_work(events)
        stop: str = epoch_stop_reason(fold) if mode == "continuable" else one_shot_stop_reason(fold)
        turn_events = [e["type"] for e in events if e["type"] in ("turn/start", "turn/end")]
        if not turn_events or turn_events[-1] == "turn/start":
            stop = "-"  # nothing ran yet, or a turn is still open: no stop reason to show
        rows.append({"id": sid, "depth": depth, "label": (descriptor or {}).get("label"), "mode": mode,
                     "lastStopReason": stop, "live": live.get(sid)})
        for child in sorted(children.get(sid, []), key=lambda c: (headers[c].get("createdAt", 0), c)):
            if child not in seen:
                seen.add(child)
                visit(child, depth + 1, seen)

    visit(session_id, 0, {session_id})
    if json_output:
        for row in rows:
            say(json.dumps(row, separators=(",", ":")))
        return
    for row in rows:
        label = f" [{row['label']}]" if row["label"] else ""
        state = f" {row['live']}" if row["live"] else ""
        say(f"{'  ' * row['depth']}{row['id']}{label} {row['mode']} {row['lastStopReason']}{state}")


@app.command("prune", epilog=EPILOGS["sessions prune"])
def prune(
    unmaterialized: Annotated[bool, typer.Option(
        "--unmaterialized", help="Remove session directories a crash left before their header was written.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print what would be removed; remove nothing.")] = False,
    home: HomeOption = None,
) -> None:
    """Remove never-materialized session directories; prints one line per directory."""
    from dsh.loader.session import prune_unmaterialized
    from dsh.loader.texts import render

    if not unmaterialized:
        fail(render("T-CLI-PRUNE-NEEDS-KIND"), 2)
    root_dir = resolve_home(home)
    outcomes = prune_unmaterialized(root_dir / "sessions", dry_run=dry_run)
    if not outcomes:
        warn(render("T-CLI-PRUNE-NONE", home=root_dir))
    for o in outcomes:
        if o.action == "removed":
            say(render("T-CLI-PRUNE-REMOVED", path=o.path))
        elif o.action == "would-remove":
            say(render("T-CLI-PRUNE-WOULD-REMOVE", path=o.path))
        elif o.action == "kept-busy":
            warn(render("T-CLI-PRUNE-KEPT-BUSY", path=o.path))
        elif o.action == "kept-foreign":
            warn(render("T-CLI-PRUNE-KEPT-FOREIGN", path=o.path, name=o.detail))
        else:
            warn(render("T-CLI-PRUNE-KEPT-CHANGED", path=o.path))
