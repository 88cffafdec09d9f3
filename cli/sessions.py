"""`dsh sessions list|show|tree|prune` (SPEC §19): views of `$DSH_HOME/sessions`, and one cleanup.

The views never repair or lock anything (§5.6 `read`); liveness is asked of the owning run's socket.
A directory a crash left before its header was published reads as never materialized (issue 9):
`list` shows it as `unmaterialized`, `show`/`tree` say so in one line (exit 2), and
`prune --unmaterialized` removes such directories (never a locked one, never through a symlink);
`prune --older-than AGE` removes whole saved trees idle for longer (issue 11 item 4).
List and tree rows share one vocabulary (`cli/session_rows.py`); every `--json` form is NDJSON.
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
EngineOption = Annotated[Optional[str], typer.Option(
    "--engine", metavar="NAME",
    help="local (read the home) or temporal (a tree not all under the home is read from each of its "
    "workers' homes, through temporal.address). Default: the configured engine.")]


def _read(home: Path, session_id: str, shown: Path | None = None) -> Any:
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
        fail(render("T-CLI-UNKNOWN-SESSION", id=session_id, home=shown or home), 2)
    try:
        return read(path)
    except DshError as exc:
        if exc.code == "SESSION_UNMATERIALIZED":
            fail(render("T-CLI-UNMATERIALIZED", id=session_id, path=path.parent), 2)
        warn(f"dsh: {session_id}: {exc.message} [{exc.code}]")
        raise typer.Exit(1) from None


@app.command("list", epilog=EPILOGS["sessions list"])
def list_sessions(
    home: HomeOption = None,
    json_output: Annotated[bool, typer.Option("--json", help="NDJSON on stdout: one JSON object per line.")] = False,
    live_only: Annotated[bool, typer.Option("--live", help="Only sessions whose run is live.")] = False,
    roots_only: Annotated[bool, typer.Option("--roots", help="Only root sessions (no parent).")] = False,
    limit: Annotated[Optional[int], typer.Option("--limit", min=1, help="Only the N most recently created sessions.")] = None,
    engine: EngineOption = None,
) -> None:
    """One row per session, oldest first, under a header: id, created, state, last stop reason,
    turns, label and task; then one `unmaterialized` row per directory a crash left before its
    header was published (not with --live or --roots). Row keys: cli/session_rows.py. On the
    Temporal engine, the trees of the task queue whose logs are on the workers' homes too."""
    from dsh.cli.session_homes import listed_homes
    from dsh.cli.session_listing import merged_rows, print_rows

    with listed_homes(resolve_home(home), engine) as homes:
        rows = merged_rows(homes, live_only=live_only, roots_only=roots_only, limit=limit, engine=engine)
    print_rows(rows, json_output=json_output)


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
    if kind == "llm/request":
        return (f"turn={data.get('turn')} step={data.get('step')} model={data.get('model')} "
                f"messages={data.get('messageCount')} system={data.get('systemHash')} "
                f"tools={','.join(map(str, data.get('toolNames') or [])) or '-'}")
    if kind == "llm/system":
        return f"{data.get('hash')} {len(str(data.get('text', '')))} chars"
    if kind == "llm/tools":
        return f"{data.get('hash')} " + (",".join(str(t.get("name")) for t in data.get("tools") or []
                                                  if isinstance(t, dict)) or "-")
    return _clip(json.dumps(data, separators=(",", ":")))


def _clip(text: str, width: int = 80) -> str:
    text = text.replace("\n", " ")
    return text if len(text) <= width else text[: width - 1] + "…"


@app.command("show", epilog=EPILOGS["sessions show"])
def show(
    session_id: SessionIdArgument,
    home: HomeOption = None,
    json_output: JsonOption = False,
    requests: Annotated[bool, typer.Option(
        "--requests", help="What the model saw: each request's model, message count, system prompt and tools.")] = False,
    engine: EngineOption = None,
) -> None:
    """Events of one session (`seq type summary`, or raw JSONL); torn or corrupt state is reported."""
    from dsh.cli.session_homes import viewed_home

    root_dir = resolve_home(home)
    with viewed_home(root_dir, session_id, engine, "show") as view:
        result = _read(view, session_id, root_dir)
    if requests:
        from dsh.cli.session_requests import request_rows, show_requests
        from dsh.loader.texts import render

        rows = request_rows(result.events)
        if not rows:
            warn(render("T-CLI-NO-REQUESTS", id=session_id))
        show_requests(rows, json_output=json_output)
    elif json_output:
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
    json_output: Annotated[bool, typer.Option("--json", help="NDJSON on stdout: one JSON object per line.")] = False,
    engine: EngineOption = None,
) -> None:
    """Descendants with label, mode, last stop reason, live state and each child's
    `<parent>/<child>` address (what `dsh interrupt` and `dsh send` take)."""
    from dsh.cli.session_homes import viewed_home
    from dsh.cli.session_listing import print_tree, tree_rows

    root_dir = resolve_home(home)
    with viewed_home(root_dir, session_id, engine, "tree") as view:
        _read(view, session_id, root_dir)
        rows = tree_rows(view, session_id, engine)
    print_tree(rows, json_output=json_output)


@app.command("prune", epilog=EPILOGS["sessions prune"])
def prune(
    older_than: Annotated[Optional[str], typer.Option(
        "--older-than", metavar="AGE",
        help="Remove saved trees idle for longer than AGE (30s, 15m, 12h, 7d, 2w); never a live or locked one.")] = None,
    unmaterialized: Annotated[bool, typer.Option(
        "--unmaterialized", help="Remove session directories a crash left before their header was written.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print what would be removed; remove nothing.")] = False,
    home: HomeOption = None,
) -> None:
    """Remove old session trees and never-materialized directories; prints one line per directory."""
    from dsh.cli.session_prune import parse_age, prune_older_than, report
    from dsh.loader.session import prune_unmaterialized
    from dsh.loader.texts import render

    if not unmaterialized and older_than is None:
        fail(render("T-CLI-PRUNE-NEEDS-KIND"), 2)
    if older_than is not None:
        parse_age(older_than)  # a bad AGE exits 2 before anything is removed
    root_dir = resolve_home(home)
    if unmaterialized:
        outcomes = prune_unmaterialized(root_dir / "sessions", dry_run=dry_run)
        if not outcomes:
            warn(render("T-CLI-PRUNE-NONE", home=root_dir))
        report(outcomes)
    if older_than is not None:
        old = prune_older_than(root_dir, older_than, dry_run=dry_run)
        if not old:
            warn(render("T-CLI-PRUNE-NONE-OLD", age=older_than, home=root_dir))
        report(old)
