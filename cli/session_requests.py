"""`dsh sessions show ID --requests` (issue 11 item 1): what the model saw, request by request.

Read from the `llm/request` digests and the `llm/system` / `llm/tools` values they name
(`loader.session.requests`). The human form prints each distinct system prompt and tool list in
full the first time a request uses it, and `(as in request N)` after that; `--json` prints one
self-contained object per request (NDJSON), values included.
"""

from __future__ import annotations

import json
from typing import Any

from dsh.cli.common import say

__all__ = ["request_rows", "show_requests"]


def request_rows(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One JSON row per request; `system` / `tools` are null when the log lacks their value."""
    from dsh.loader.session import logged_requests

    rows = []
    for req in logged_requests(events):
        d = req.digest
        rows.append({
            "seq": req.seq, "turn": d.get("turn"), "step": d.get("step"), "model": d.get("model"),
            "messageCount": d.get("messageCount"), "systemHash": d.get("systemHash"),
            "toolNames": d.get("toolNames"), "toolsHash": d.get("toolsHash"),
            "system": req.system, "tools": req.tools,
        })
    return rows


def show_requests(rows: list[dict[str, Any]], *, json_output: bool) -> None:
    if json_output:
        for row in rows:
            say(json.dumps(row, separators=(",", ":"), ensure_ascii=False))
        return
    first_use: dict[tuple[str, Any], int] = {}
    for number, row in enumerate(rows, start=1):
        say(f"request {number}  seq {row['seq']}  turn {row['turn']} step {row['step']}  model {row['model']}  "
            f"messages {row['messageCount']}")
        key = ("system", row["systemHash"])
        if key in first_use:
            say(f"  system {row['systemHash']} (as in request {first_use[key]})")
        else:
            first_use[key] = number
            say(f"  system {row['systemHash']}:")
            for line in (row["system"] if row["system"] is not None else "(not in this log)").splitlines():
                say(f"    {line}")
        names = ", ".join(row["toolNames"] or []) or "none"
        key = ("tools", row["toolsHash"])
        if key in first_use:
            say(f"  tools {row['toolsHash']}: {names} (as in request {first_use[key]})")
            continue
        first_use[key] = number
        say(f"  tools {row['toolsHash']}: {names}")
        for tool in row["tools"] or []:
            say(f"    {tool.get('name')}: {tool.get('description', '')}")
            say(f"      parameters {json.dumps(tool.get('parameters'), separators=(',', ':'), sort_keys=True)}")
