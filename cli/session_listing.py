"""The rows of `dsh sessions list` and `dsh sessions tree` and their two forms (issue 11 item 4).

Both forms come from one row per session (`cli.session_rows`). `--json` is NDJSON, one object per
line, as `dsh run --json` and `sessions show --json` are: a reader can stream it, `head` it or `jq`
it line by line, and `jq -s` makes an array when one is wanted. The human form has a header and
aligned columns; `-` stands for null there only.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from dsh.cli.common import say
from dsh.cli.session_rows import Liveness, read_headers, session_row, unreadable_row

__all__ = ["list_rows", "merged_rows", "print_rows", "print_tree", "tree_rows"]

_COLUMNS = (("ID", "id"), ("CREATED", "createdAt"), ("STATE", "state"), ("LAST STOP", "lastStopReason"),
            ("TURNS", "turns"), ("LABEL", "label"), ("TASK", "task"))


def list_rows(home: Path, *, live_only: bool = False, roots_only: bool = False, limit: int | None = None,
              engine: str | None = None) -> list[dict[str, Any]]:
    from dsh.loader.errors import DshError
    from dsh.loader.session import read, unmaterialized_ids

    headers = read_headers(home)
    liveness = Liveness(home, engine)
    rows: list[dict[str, Any]] = []
    # Creation order; a parent before a child made in the same millisecond (its delegation depth).
    for sid, header in sorted(headers.items(), key=lambda kv: (kv[1].get("createdAt", 0), _depth(kv[1]), kv[0])):
        if roots_only and header.get("parentSession"):
            continue
        try:
            events = read(home / "sessions" / sid / "session.jsonl").events
        except DshError as exc:  # one bad session never breaks the list (issue 15 item 3)
            row = unreadable_row(sid, "corrupt", header, exc.message)
        else:
            row = session_row(sid, header, events, headers, liveness)
        if live_only and not row["live"]:
            continue
        rows.append(row)
    if limit is not None:
        rows = rows[-limit:]
    if not (live_only or roots_only):
        rows.extend(unreadable_row(sid, "unmaterialized") for sid in unmaterialized_ids(home / "sessions"))
    return rows


def _depth(header_or_row: dict[str, Any]) -> int:
    """A header's `delegationDepth` (a row's `depth`): 0 for a root, or when it says nothing usable."""
    depth = header_or_row.get("delegationDepth", header_or_row.get("depth"))
    return depth if isinstance(depth, int) and not isinstance(depth, bool) else 0


def merged_rows(homes: list[Path], *, live_only: bool = False, roots_only: bool = False,
                limit: int | None = None, engine: str | None = None) -> list[dict[str, Any]]:
    """`list_rows` over several homes (the client's, then the trees gathered from the workers'
    homes, `session_homes.listed_homes`): one row per session (a log is whole in one home; the
    first home's row stands), in creation order, `limit` over them all, the client home's
    unmaterialized rows last."""
    if len(homes) == 1:
        return list_rows(homes[0], live_only=live_only, roots_only=roots_only, limit=limit, engine=engine)
    rows: dict[str, dict[str, Any]] = {}
    unmaterialized: list[dict[str, Any]] = []
    for i, home in enumerate(homes):
        for row in list_rows(home, live_only=live_only, roots_only=roots_only, engine=engine):
            if row["state"] == "unmaterialized":
                if i == 0:
                    unmaterialized.append(row)
            else:
                rows.setdefault(row["id"], row)
    ordered = sorted(rows.values(), key=lambda r: (r.get("createdAt") or 0, _depth(r), r["id"]))
    if limit is not None:
        ordered = ordered[-limit:]
    return ordered + unmaterialized


def tree_rows(home: Path, session_id: str, engine: str | None = None) -> list[dict[str, Any]]:
    """`session_id` and its descendants in preorder, children oldest first; a cycle is walked once."""
    from dsh.loader.errors import DshError
    from dsh.loader.session import read

    headers = read_headers(home)
    liveness = Liveness(home, engine)
    children: dict[str, list[str]] = {}
    for sid, header in headers.items():
        parent = header.get("parentSession")
        if isinstance(parent, str):
            children.setdefault(parent, []).append(sid)
    rows: list[dict[str, Any]] = []

    def visit(sid: str, depth: int, seen: set[str]) -> None:
        header = headers.get(sid, {})
        try:
            events = read(home / "sessions" / sid / "session.jsonl").events
        except DshError as exc:
            rows.append({**unreadable_row(sid, "corrupt", header, exc.message), "depth": depth})
        else:
            rows.append(session_row(sid, header, events, headers, liveness, depth=depth))
        for child in sorted(children.get(sid, []), key=lambda c: (headers[c].get("createdAt", 0), c)):
            if child not in seen:
                seen.add(child)
                visit(child, depth + 1, seen)

    visit(session_id, 0, {session_id})
    return rows


def _cell(row: dict[str, Any], key: str) -> str:
    value = row.get(key)
    if value is None:
        return "-"
    if key == "createdAt":
        return datetime.fromtimestamp(value / 1000, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return str(value)


def _json(row: dict[str, Any]) -> str:
    return json.dumps(row, separators=(",", ":"), ensure_ascii=False)


def print_rows(rows: list[dict[str, Any]], *, json_output: bool) -> None:
    if json_output:
        for row in rows:
            say(_json(row))
        return
    table = [[title for title, _ in _COLUMNS]] + [[_cell(r, key) for _, key in _COLUMNS] for r in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(_COLUMNS) - 1)]
    for line in table:
        say("  ".join([*(cell.ljust(w) for cell, w in zip(line, widths, strict=False)), line[-1]]).rstrip())


def print_tree(rows: list[dict[str, Any]], *, json_output: bool) -> None:
    if json_output:
        for row in rows:
            say(_json(row))
        return
    for row in rows:
        label = f" [{row['label']}]" if row["label"] else ""
        state = f" {row['state']}" if row["live"] or row["state"] in ("corrupt",) else ""
        address = f"  address {row['address']}" if row["address"] else ""
        say(f"{'  ' * row['depth']}{row['id']}{label} {row['mode'] or 'unknown'} {row['lastStopReason'] or '-'}{state}{address}")
