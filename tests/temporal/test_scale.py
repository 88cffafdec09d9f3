"""The fan-out at scale on Temporal (issue 12 item 7): what one root workflow spends per child.

Temporal refuses an 11th update in flight on one workflow (ResourceExhausted; the client retries it
with a backoff of seconds) and allows 2,000 per run. A root whose reply starts many children used to
send one `start_child` update each, all at once, beside its two long-polls: past the limit, the
starts stalled for seconds or failed (the ~10 s stalls; N=300 hung). Here the server's limit is 4,
and the test reads the server's own count of refused updates (its metrics): a root that has at
most four in flight (its turn's two long-polls, one batch of child starts, and, before they were
signals, one batch of the tree's budget charges from this worker process) has none; one update per
child start had 18–19 refusals under a limit of 3, and one update per charge 38 under this one.
"""

from __future__ import annotations

import asyncio
import json
import socket
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from temporal_kit import dev_server, run_temporal
from temporalio.client import Client

from dsh.loader.session import SessionStore
from dsh.loader.testing.runner import plan_flow

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


METRICS_PORT = free_port()
CHILDREN = 12  # more than max_parallel_tool_calls (10): two rounds of starts, each more than 3


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def tight_client() -> AsyncIterator[Client]:
    async with dev_server("--dynamic-config-value", "history.maxInFlightUpdates=4",
                          "--metrics-port", str(METRICS_PORT)) as c:
        yield c


def fanout(n: int) -> dict[str, Any]:
    """benchmarks/fanout.py's transcript: N children in one reply, root held until N notices."""
    calls = [{"id": f"c{i}", "name": "subagent", "arguments": {"label": f"w{i}", "prompt": f"Reply with W{i}."}}
             for i in range(1, n + 1)]
    agents: dict[str, Any] = {"root": {"replies": [{"toolCalls": calls}, {"text": "STARTED"}, {"text": "ALL"}]}}
    agents.update({f"w{i}": {"spawnedBy": f"c{i}", "replies": [{"text": f"W{i}_DONE"}]} for i in range(1, n + 1)})
    fence = {"hold": {"agent": "root", "turn": 1, "step": 2,
                      "until": {"inboxAccepted": {"agent": "root", "kind": "subagent-settled", "count": n}}}}
    return {"version": 1, "name": f"fanout-{n}", "task": "fan out", "fences": [fence], "agents": agents}


@pytest.mark.asyncio(loop_scope="module")
async def test_a_reply_starting_many_children_keeps_within_the_servers_in_flight_update_limit(
    tight_client: Client, tmp_path: Path
) -> None:
    script = tmp_path / "fanout.yaml"
    script.write_text(json.dumps(fanout(CHILDREN)))
    run = await run_temporal(tight_client, plan_flow(script), tmp_path / "home")
    result = run.result
    assert (result.stop_reason, result.output, result.violations, result.exit_code) == ("completed", "ALL", [], 0)
    root = SessionStore(tmp_path / "home").read(result.root_session_id)
    notices = [m["source"]["senderSessionId"] for e in root.events if e["type"] == "agent/inbox/spliced"
               for m in e["data"].get("inserted") or [] if m["source"]["kind"] == "subagent-settled"]
    assert sorted(notices) == sorted(s["sessionId"] for s in result.subagents)  # each child's notice, once
    assert len(notices) == CHILDREN
    assert refused_updates() == 0  # the server refused no update (a refusal is retried: a stall, not an error)
    # The root's board poll answers only facts from elsewhere: its own 12 notice facts are not
    # echoed back (an update each), and no fence reads the children's facts, so none is shipped.
    names = await update_names(tight_client, result.root_session_id)
    assert names.count("fence_facts_after") <= 1  # at most the answer at close
    assert names.count("start_children") < CHILDREN  # batched
    # The budget's charges (12 spawns, 12 + 3 model requests) are batched per worker process too,
    # and are signals: none of the run's capped updates (history.maxTotalUpdates).
    assert "charge" not in names and "charge_many" not in names
    signals = await signal_names(tight_client, result.root_session_id)
    assert 0 < signals.count("charges") < 2 * CHILDREN + 3


async def update_names(client: Client, workflow_id: str) -> list[str]:
    """The name of every update the workflow accepted, from its history."""
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    return [e.workflow_execution_update_accepted_event_attributes.accepted_request.input.name
            for e in history.events if e.HasField("workflow_execution_update_accepted_event_attributes")]


async def signal_names(client: Client, workflow_id: str) -> list[str]:
    """The name of every signal the workflow received, from its history."""
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    return [e.workflow_execution_signaled_event_attributes.signal_name
            for e in history.events if e.HasField("workflow_execution_signaled_event_attributes")]


def refused_updates() -> int:
    """The dev server's own count of updates it refused for a concurrency limit (its metrics)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{METRICS_PORT}/metrics") as page:
        text = page.read().decode()
    return sum(int(float(line.rsplit(" ", 1)[1])) for line in text.splitlines()
               if line.startswith("service_errors_resource_exhausted{") and 'operation="UpdateWorkflowExecution"' in line
               and 'service_name="frontend"' in line)


def test_a_worker_parses_a_transcript_once_while_its_file_is_unchanged(tmp_path: Path) -> None:
    # Every turn of a tree reads the same transcript; at N=1,000 each parse cost ~40 ms of a
    # child's worker CPU. An edited file is parsed again (mtime and size are the key).
    from dsh.loader.engines.turn import _script

    script = tmp_path / "fanout.yaml"
    script.write_text(json.dumps(fanout(3)))
    first = _script(script)
    assert _script(script) is first
    script.write_text(json.dumps(fanout(4)))
    again = _script(script)
    assert again is not first and len(again.spec.agents) == 5


@pytest.mark.asyncio(loop_scope="module")
async def test_a_child_reply_past_the_payload_limit_still_settles_with_one_notice_that_points_to_its_log(
    tight_client: Client, tmp_path: Path
) -> None:
    # Temporal refuses a payload over 2 MB. The notice is the child's turn result: carrying a 3 MB
    # reply in it failed the child's run, and its parent waited for a notice that never came. The
    # notice now names the reply's size and where it is (the child's log keeps it whole).
    from dsh.loader.engines.turn import NOTICE_LIMIT

    big = "x" * (3 * 1024 * 1024)
    agents = {"root": {"replies": [{"toolCalls": [{"id": "c1", "name": "subagent", "arguments": {
                                       "label": "w", "prompt": "Reply big."}}]},
                                   {"text": "STARTED"}, {"text": "NOTED"}]},
              "w": {"spawnedBy": "c1", "replies": [{"text": big}]}}
    script = tmp_path / "big-reply.json"
    script.write_text(json.dumps({"version": 1, "name": "big-reply", "task": "Start a child.", "agents": agents}))
    # Backstop: without the bound the child's run fails and the root waits forever.
    run = await asyncio.wait_for(run_temporal(tight_client, plan_flow(script), tmp_path / "home"), 120)
    result = run.result
    assert (result.stop_reason, result.output, result.violations, result.exit_code) == ("completed", "NOTED", [], 0)
    store = SessionStore(tmp_path / "home")
    [child] = [s["sessionId"] for s in result.subagents]
    notices = [m for e in store.read(result.root_session_id).events if e["type"] == "agent/inbox/spliced"
               for m in e["data"].get("inserted") or [] if m["source"]["kind"] == "subagent-settled"]
    assert [(n["source"]["senderSessionId"], n["source"]["stopReason"]) for n in notices] == [(child, "completed")]
    text = "".join(block["text"] for block in notices[0]["content"])
    assert f"dsh sessions show {child}" in text and big not in text and len(text) < NOTICE_LIMIT
    [reply] = [e["data"]["message"] for e in store.read(child).events if e["type"] == "assistant/message"]
    assert reply["content"][0]["text"] == big  # the log keeps the whole reply
