"""One row per session, one vocabulary for `sessions list`, `tree` and `prune` (issue 11 item 4).

Every JSON row has the same keys; a fact dsh cannot know is `null`, never `"-"` and never omitted:

| key | value |
|---|---|
| `id`, `root` | the session and the root whose run would host it (its socket name) |
| `parent`, `address` | the durable parent, and `<parent>/<child>` for `dsh interrupt` / `send` (null for a root) |
| `depth`, `origin`, `mode` | from the header and the first descriptor: `root`, `continuable`, `one-shot` |
| `label`, `task` | the descriptor's label; the first input message's text, clipped |
| `createdAt`, `lastActivity` | epoch ms: the header's, and the last event's time (else `createdAt`) |
| `turns`, `lastTurnEnd`, `lastStopReason` | counts and reasons folded over the whole log; null while nothing ran or a turn is open |
| `live` | boolean: the owning run's socket answers `run.status` |
| `error` | why a `corrupt` session cannot be read (null otherwise) |
| `state` | the run's status for a resident agent (`running`, `idle`, `parked`, …), else `saved`; `corrupt` and `unmaterialized` for what cannot be read |
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

__all__ = ["ROW_KEYS", "Liveness", "clip", "configured_temporal", "read_headers", "root_of", "session_row",
           "unreadable_row"]

ROW_KEYS = ("id", "root", "parent", "address", "depth", "origin", "mode", "label", "task", "createdAt",
            "lastActivity", "turns", "lastTurnEnd", "lastStopReason", "live", "state", "error")
TASK_WIDTH = 60


def read_headers(home: Path) -> dict[str, dict[str, Any]]:
    """The header of every readable `sessions/*/session.jsonl`, by directory name."""
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


def root_of(headers: dict[str, dict[str, Any]], session_id: str) -> str:
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


class Liveness:
    """Asks each root's socket once whether a run serves it; remembers its `run.status`. A tree on
    the Temporal engine serves no socket: with `engine: temporal` configured, its root workflow
    answers `run.status` through the client instead (issue 12; loader/engines/control.py)."""

    def __init__(self, home: Path, engine: str | None = None) -> None:
        self.home = home
        self.engine = engine  # `--engine`: local never asks the server, temporal asks it whatever is configured
        self._cache: dict[str, dict[str, Any] | None] = {}
        self._temporal: Any = False  # the `temporal` settings to ask, None for none; False until needed

    def status(self, root_id: str) -> dict[str, Any] | None:
        if root_id not in self._cache:
            from dsh.loader.host.client import call_sync

            try:
                self._cache[root_id] = call_sync(self.home, root_id, "run.status", {}, timeout=2)
            except Exception:
                self._cache[root_id] = self._temporal_status(root_id)
        return self._cache[root_id]

    def _temporal_status(self, root_id: str) -> dict[str, Any] | None:
        if self._temporal is False:
            self._temporal = None if self.engine == "local" else configured_temporal(forced=self.engine == "temporal")
        temporal = self._temporal
        if temporal is None:
            return None
        import asyncio

        async def ask() -> dict[str, Any] | None:
            from dsh.loader.engines.client import connect
            from dsh.loader.engines.control import run_status

            client = await connect(temporal.address, temporal.namespace)
            return await run_status(client, root_id)

        try:
            return asyncio.run(ask())
        except Exception as exc:  # unreachable, or the extra is missing: not live, and ask no more
            import logging

            logging.getLogger(__name__).debug("run.status over Temporal failed: %r", exc)
            self._temporal = None
            return None

    def state(self, root_id: str, session_id: str) -> tuple[bool, str]:
        """`(live, state)`: a resident agent's status from its run, else `saved`."""
        status = self.status(root_id)
        if status is None:
            return False, "saved"
        agents = {a.get("sessionId"): a.get("status") for a in status.get("agents", []) if isinstance(a, dict)}
        found = agents.get(session_id)
        return True, found if isinstance(found, str) else "saved"


def configured_temporal(forced: bool = False) -> Any:
    """The composed `temporal` settings when the configuration says `engine: temporal` (or `forced`,
    `--engine temporal`), else None (without a `DSH_*` variable the default profile's engine, local,
    is answered without composing; a configuration that does not compose lists as not live rather
    than failing the listing)."""
    if not forced and not any(name.startswith("DSH_") for name in os.environ):
        return None
    from dsh.loader.config import compose
    from dsh.loader.errors import DshError

    try:
        config = compose().config
    except DshError:
        return None
    return config.temporal if forced or config.engine == "temporal" else None


def clip(text: str, width: int = TASK_WIDTH) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _task(events: list[dict[str, Any]]) -> str | None:
    """The text of the first message the session was given (its task or prompt)."""
    for event in events:
        data = event["data"]
        messages = data.get("inserted", []) if event["type"] == "agent/inbox/spliced" else (
            [data] if event["type"] == "user/message" else [])
        for message in messages:
            texts = [b.get("text", "") for b in message.get("content", []) if isinstance(b, dict) and b.get("type") == "text"]
            if any(texts):
                return clip(" ".join(texts))
    return None


def session_row(
    sid: str, header: dict[str, Any], events: list[dict[str, Any]], headers: dict[str, dict[str, Any]],
    liveness: Liveness, *, depth: int | None = None,
) -> dict[str, Any]:
    from dsh.loader.agent import epoch_stop_reason, fold_consumed_work, one_shot_stop_reason

    parent = header.get("parentSession") if isinstance(header.get("parentSession"), str) else None
    descriptor = next((e["data"] for e in events if e["type"] == "subagent/descriptor"), None)
    mode = (descriptor or {}).get("mode") or ("root" if parent is None else None)
    turns, last_end, open_turn = 0, None, False
    for event in events:
        if event["type"] == "turn/start":
            turns, open_turn = turns + 1, True
        elif event["type"] == "turn/end":
            last_end, open_turn = event["data"]["reason"].get("kind"), False
    stop: str | None = None
    if turns and not open_turn:  # nothing ran yet, or a turn is still open: no stop reason to show
        fold = fold_consumed_work(events)
        stop = epoch_stop_reason(fold) if mode == "continuable" else one_shot_stop_reason(fold)
    root = root_of(headers, sid)
    live, state = liveness.state(root, sid)
    return {
        "id": sid, "root": root, "parent": parent, "address": f"{parent}/{sid}" if parent else None,
        "depth": depth if depth is not None else header.get("delegationDepth"),
        "origin": header.get("origin"), "mode": mode, "label": (descriptor or {}).get("label"),
        "task": _task(events), "createdAt": header.get("createdAt"),
        "lastActivity": events[-1]["time"] if events else header.get("createdAt"),
        "turns": turns, "lastTurnEnd": last_end, "lastStopReason": stop, "live": live, "state": state,
        "error": None,
    }


def unreadable_row(sid: str, state: str, header: dict[str, Any] | None = None, error: str | None = None) -> dict[str, Any]:
    """A `corrupt` or `unmaterialized` row: the same keys, null where nothing can be read."""
    row: dict[str, Any] = dict.fromkeys(ROW_KEYS)
    row.update(id=sid, live=False, state=state)
    if header is not None:
        parent = header.get("parentSession")
        row.update(parent=parent, createdAt=header.get("createdAt"), origin=header.get("origin"),
                   address=f"{parent}/{sid}" if isinstance(parent, str) else None)
    row["error"] = error
    return row
