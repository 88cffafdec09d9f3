"""`dsh sessions list/show/tree` and `dsh flow` on a tree the Temporal engine ran (issue 12 item 2):
they read the JSONL projection the turn activities wrote, and say what they say of a local run.

One tree with a report and a settlement (`report-then-settle`) runs on each engine into its own
home; the commands run as the user runs them (a `dsh` process each).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from temporal_kit import dev_server, records_of, run_temporal

from dsh.loader.testing.runner import plan_flow

DSH = [sys.executable, "-c", "from dsh.cli.main import entry; entry()"]
NAME = "report-then-settle"
IDS = re.compile(r"session-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


async def dsh(*args: str | Path, cwd: Path) -> str:
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("DSH_")}
    done = await asyncio.to_thread(subprocess.run, [*DSH, *map(str, args)], env=env, cwd=cwd,
                                   capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def rows(listing: str) -> list[dict[str, Any]]:
    """`sessions list --json` rows without what differs run to run (ids, clocks), in tree order."""
    out = [{k: v for k, v in json.loads(line).items()
            if k not in ("id", "root", "parent", "address", "createdAt", "lastActivity")}
           for line in listing.splitlines()]
    return sorted(out, key=lambda r: (r["depth"], str(r["label"])))


def without_ids(text: str) -> str:
    return IDS.sub("<id>", text)


async def test_sessions_and_flow_read_a_temporal_tree_as_they_read_a_local_one(tmp_path: Path) -> None:
    plan = plan_flow(NAME)
    local_home, temporal_home = tmp_path / "local", tmp_path / "temporal"
    local = await records_of(plan, local_home)
    async with dev_server() as client:
        temporal = await records_of(plan, temporal_home, client)
        flown = await run_temporal(client, plan, tmp_path / "flow")
    root = temporal[-1]["rootSessionId"]
    [child] = [s["sessionId"] for s in temporal[-1]["subagents"]]

    listed = await dsh("sessions", "list", "--json", "--home", temporal_home, cwd=tmp_path)
    assert {json.loads(line)["id"] for line in listed.splitlines()} == {root, child}
    assert rows(listed) == rows(await dsh("sessions", "list", "--json", "--home", local_home, cwd=tmp_path))

    tree = await dsh("sessions", "tree", root, "--home", temporal_home, cwd=tmp_path)
    assert f"address {root}/{child}" in tree
    local_tree = await dsh("sessions", "tree", local[-1]["rootSessionId"], "--home", local_home, cwd=tmp_path)
    assert without_ids(tree) == without_ids(local_tree)

    shown = await dsh("sessions", "show", child, "--json", "--home", temporal_home, cwd=tmp_path)
    streamed = [r["event"] for r in temporal if r["type"] == "event" and r["sessionId"] == child]
    header, *events = [json.loads(line) for line in shown.splitlines()]
    assert (header["id"], header["parentSession"], events) == (child, root, streamed)

    # `dsh flow` runs the transcript on the local engine; its YAML is the flow of the Temporal tree.
    assert await dsh("flow", NAME, cwd=tmp_path) == flown.flow.yaml
