"""`dsh sessions prune [--older-than AGE] [--unmaterialized] [--dry-run]` (issues 9 and 11 item 4).

`--older-than` removes whole saved trees (a root and every session below it) whose last activity,
the latest event time of any of their sessions, is older than AGE (`30s`, `15m`, `12h`, `7d`,
`2w`). A tree whose run answers its socket is never touched, nor one with a session some process
holds locked (`loader.session.prune_tree`); each is reported on stderr. `--unmaterialized` keeps its
issue 9 behaviour. One stdout line per removed (or, with `--dry-run`, removable) directory.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

from dsh.cli.common import fail, say, warn

__all__ = ["parse_age", "prune_older_than", "report"]

_AGE = re.compile(r"^([0-9]{1,9})([smhdw])$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_age(value: str) -> int:
    """Seconds in `value` (`7d`), or exit 2 naming the accepted forms."""
    from dsh.loader.texts import render

    match = _AGE.fullmatch(value.strip())
    if match is None:
        fail(render("T-CLI-BAD-AGE", value=value), 2)
    return int(match.group(1)) * _UNIT_SECONDS[match.group(2)]


def prune_older_than(home: Path, age: str, *, dry_run: bool, now_ms: int | None = None) -> list[Any]:
    """Outcomes for every tree older than `age`: removed, would-remove, or kept with a reason."""
    from dsh.cli.session_listing import list_rows
    from dsh.loader.session import PruneOutcome, prune_tree

    cutoff = (now_ms if now_ms is not None else time.time_ns() // 1_000_000) - parse_age(age) * 1000
    trees: dict[str, list[dict[str, Any]]] = {}
    for row in list_rows(home):
        if row["state"] != "unmaterialized":  # that kind has its own flag
            trees.setdefault(row["root"] or row["id"], []).append(row)
    outcomes: list[Any] = []
    for rows in trees.values():
        times = [r["lastActivity"] if r["lastActivity"] is not None else r["createdAt"] for r in rows]
        if any(t is None or t >= cutoff for t in times):
            continue
        ids = [r["id"] for r in rows]
        if any(r["live"] for r in rows):
            outcomes.extend(PruneOutcome(sid, home / "sessions" / sid, "kept-live") for sid in ids)
            continue
        outcomes.extend(prune_tree(home / "sessions", ids, dry_run=dry_run))
    return outcomes


def report(outcomes: list[Any]) -> None:
    from dsh.loader.texts import render

    for o in outcomes:
        if o.action == "removed":
            say(render("T-CLI-PRUNE-REMOVED", path=o.path))
        elif o.action == "would-remove":
            say(render("T-CLI-PRUNE-WOULD-REMOVE", path=o.path))
        elif o.action == "kept-busy":
            warn(render("T-CLI-PRUNE-KEPT-BUSY", path=o.path))
        elif o.action == "kept-live":
            warn(render("T-CLI-PRUNE-KEPT-LIVE", path=o.path))
        elif o.action == "kept-foreign":
            if o.detail:  # the other directories of that tree are kept silently with it
                warn(render("T-CLI-PRUNE-KEPT-FOREIGN", path=o.path, name=o.detail))
        else:
            warn(render("T-CLI-PRUNE-KEPT-CHANGED", path=o.path))
