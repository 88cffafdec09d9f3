"""`dsh sessions show/tree/list` on a tree whose logs are spread over the workers' homes (issue 12,
loader/engines/README.md "Homes"): from a client whose own home is empty, they read every home over
the server and answer exactly as on one home holding all the logs.

Two workers in this process with homes `a` and `b` (test_homes.py's set-up) and a client with a third,
empty home run a tree; with the workers still serving, the commands run as the user runs them (a
`dsh` process each, `engine: temporal` configured) and are compared with the same commands, same
configuration, `--engine local`, on a merged copy of both homes (byte for byte), and for the shipped
transcript also with the local engine's run of it (ids elided). The client's home stays empty and
the private directory the logs were gathered into is gone after each command.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporal_kit import backstopped, client, records_of, write_transcript  # noqa: F401  (client: the module's dev-server fixture)
from temporalio.client import Client
from test_homes import BACKSTOP, FANOUT, fanout, merged, run_tree_temporal, sessions_in, two_homes

from dsh.loader.engines.tree_logs import gather, whole_here
from dsh.loader.engines.worker import make_worker
from dsh.loader.headless import RunRequest
from dsh.loader.testing.runner import FlowPlan, plan_flow
from dsh.loader.texts import render

pytestmark = pytest.mark.asyncio(loop_scope="module")

DSH = [sys.executable, "-c", "from dsh.cli.main import entry; entry()"]
IDS = re.compile(r"session-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


async def dsh(env: dict[str, str], cwd: Path, *args: str | Path) -> str:
    done = await asyncio.to_thread(subprocess.run, [*DSH, *map(str, args)], env=env, cwd=cwd,
                                   capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def without_ids(text: str) -> str:
    return IDS.sub("<id>", text)


async def views(env: dict[str, str], cwd: Path, home: Path, root: str, children: list[str], *engine: str) -> list[str]:
    """What the user reads of the tree: `tree` in both forms, `show` of the first child as text and
    of the second as JSON (each view is a CLI process that imports temporalio, ~1.3 s of CPU; both
    forms of `show` print the one gathered log, so each child in one form tests both homes)."""
    out = [await dsh(env, cwd, "sessions", "tree", root, "--home", home, *engine),
           await dsh(env, cwd, "sessions", "tree", root, "--json", "--home", home, *engine)]
    for child, form in zip(children, ([], ["--json"]), strict=True):
        out.append(await dsh(env, cwd, "sessions", "show", child, *form, "--home", home, *engine))
    return out


async def listings(env: dict[str, str], cwd: Path, home: Path, *engine: str) -> list[str]:
    """`sessions list` as the user reads it: every tree as NDJSON, the two most recent as text."""
    return [await dsh(env, cwd, "sessions", "list", "--json", "--home", home, *engine),
            await dsh(env, cwd, "sessions", "list", "--limit", "2", "--home", home, *engine)]


def shipped() -> FlowPlan:
    return plan_flow("four-children-one-step")


@pytest.mark.parametrize("spread", [pytest.param(False, id="shipped-four-children"),
                                    pytest.param(True, id=f"fanout-{FANOUT}-split")])
async def test_sessions_show_and_tree_read_every_home_as_one_home_holding_all_the_logs(
    client: Client, tmp_path: Path, spread: bool
) -> None:
    plan = plan_flow(str(write_transcript(tmp_path, fanout(FANOUT)))) if spread else shipped()
    homes, client_home, private = [tmp_path / "a", tmp_path / "b"], tmp_path / "client", tmp_path / "tmp"
    client_home.mkdir()
    private.mkdir()
    queue = f"dsh-test-{uuid.uuid4().hex[:8]}"
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("DSH_")}
    env.update(DSH_ENGINE="temporal", DSH_TEMPORAL__ADDRESS=client.service_client.config.target_host,
               DSH_TEMPORAL__TASK_QUEUE=queue, TMPDIR=str(private))
    request = RunRequest(home=client_home, config=backstopped(plan.config), transcript=plan.script, fences_allowed=True)
    async with two_homes(client, queue, homes):
        result = await asyncio.wait_for(run_tree_temporal(request, queue, client), BACKSTOP)
        root = result.root_session_id
        found = [sessions_in(h) for h in homes]
        # Two children's `show` (each view is a CLI process that imports temporalio: ~1.3 s of CPU):
        # every `show` reads the gathered home by the same code, so more children test nothing more.
        children = sorted((found[0] | found[1]) - {root})[:2]
        if spread:  # a child on each home, the root on one: no single home holds the tree
            assert found[0] - {root} and found[1] - {root}, found
            children = [min(found[0] - {root}), min(found[1] - {root})]
        seen = await views(env, tmp_path, client_home, root, children)
        listed = await listings(env, tmp_path, client_home)
        # From the root's own home, which holds the root log but not every child's: still whole.
        [root_home] = [h for h, f in zip(homes, found, strict=True) if root in f]
        assert await dsh(env, tmp_path, "sessions", "tree", root, "--home", root_home) == seen[0]
        if spread:
            assert not await whole_here(client, queue, root_home, root)
    assert sessions_in(client_home) == set() and list(private.iterdir()) == []

    whole = merged(homes, tmp_path / "merged")
    assert seen == await views(env, tmp_path, whole, root, children, "--engine", "local")
    # `sessions list` too: every tree of the task queue, as the merged home lists it.
    assert listed == await listings(env, tmp_path, whole, "--engine", "local")
    assert {json.loads(line)["id"] for line in listed[0].splitlines()} == found[0] | found[1]
    assert len(listed[1].splitlines()) == 3  # its header and the two most recent
    rows = [json.loads(line) for line in seen[1].splitlines()]
    assert [r["id"] for r in rows][0] == root and {r["id"] for r in rows} == found[0] | found[1]

    if not spread:  # and as the local engine's run of the same transcript reads on its own home
        local_home = tmp_path / "local"
        local = await records_of(plan, local_home)
        local_root = local[-1]["rootSessionId"]
        local_tree = await dsh(env, tmp_path, "sessions", "tree", local_root, "--home", local_home, "--engine", "local")
        # The same rows; siblings come oldest first, and the order of children created in one step
        # is the creation race on either engine, so the (one-level) rows are compared as a set.
        assert sorted(without_ids(seen[0]).splitlines()) == sorted(without_ids(local_tree).splitlines())
        assert len(seen[0].splitlines()) == 5


async def test_sessions_show_and_tree_of_a_tree_in_the_client_home_answer_from_it_with_no_server(
    client: Client, tmp_path: Path
) -> None:
    """The local path is unchanged when the home holds the tree: with `engine: temporal` configured
    and no server at that address, `show` (which never asks the server for a log the home holds)
    and `tree` (whose question to the server fails) answer from the home as the local engine does."""
    home = tmp_path / "local"
    local = await records_of(shipped(), home)
    root = local[-1]["rootSessionId"]
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("DSH_")}
    plain = await dsh(env, tmp_path, "sessions", "show", root, "--home", home)
    env.update(DSH_ENGINE="temporal", DSH_TEMPORAL__ADDRESS="127.0.0.1:1", DSH_TEMPORAL__TASK_QUEUE="nobody")
    assert await dsh(env, tmp_path, "sessions", "show", root, "--home", home) == plain
    assert await dsh(env, tmp_path, "sessions", "tree", root, "--home", home) == \
        await dsh(env, tmp_path, "sessions", "tree", root, "--home", home, "--engine", "local")


async def test_gathering_a_tree_no_worker_reads_gives_up_after_its_page_run_and_says_why(
    client: Client, tmp_path: Path
) -> None:
    """With every worker gone, a view does not wait the stream's ten minutes per page: the page's
    reader workflow times out after `page_run` and the gathering says which queue nobody served."""
    plan = shipped()
    homes, client_home = [tmp_path / "a", tmp_path / "b"], tmp_path / "client"
    queue = f"dsh-test-{uuid.uuid4().hex[:8]}"
    request = RunRequest(home=client_home, config=backstopped(plan.config), transcript=plan.script, fences_allowed=True)
    async with two_homes(client, queue, homes):
        root = (await asyncio.wait_for(run_tree_temporal(request, queue, client), BACKSTOP)).root_session_id
    with pytest.raises(TimeoutError) as raised:
        # The backstop is a loud failure (ten minutes without the bound), never an ordering.
        await asyncio.wait_for(gather(client, queue, client_home, root, page_run=timedelta(seconds=2)), BACKSTOP)
    assert str(raised.value) == render("T-ENGINE-NO-PAGES", queue=queue, root=root, seconds="2")


async def test_a_tree_on_the_home_the_workers_share_with_the_client_is_read_from_that_home(
    client: Client, tmp_path: Path
) -> None:
    """The local path stays when the home holds the whole tree: a worker on the client's own home
    (its one home queue is this home's) leaves nothing to gather, and the views read the home."""
    plan = shipped()
    home = tmp_path / "shared"
    queue = f"dsh-test-{uuid.uuid4().hex[:8]}"
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("DSH_")}
    env.update(DSH_ENGINE="temporal", DSH_TEMPORAL__ADDRESS=client.service_client.config.target_host,
               DSH_TEMPORAL__TASK_QUEUE=queue)
    request = RunRequest(home=home, config=backstopped(plan.config), transcript=plan.script, fences_allowed=True)
    async with make_worker(client, queue, home=home):
        root = (await asyncio.wait_for(run_tree_temporal(request, queue, client), BACKSTOP)).root_session_id
        assert await whole_here(client, queue, home, root)
        tree = await dsh(env, tmp_path, "sessions", "tree", root, "--home", home)
    assert tree == await dsh(env, tmp_path, "sessions", "tree", root, "--home", home, "--engine", "local")
    assert len(tree.splitlines()) == 5
