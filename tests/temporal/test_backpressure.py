"""A child start the server refuses for backpressure is sent again (issue 12 "Not yet" item 6;
loader/engines/README.md "Run budgets", Backpressure): `worker._pressed`.

A workflow admits only so many updates in flight (`history.maxInFlightUpdates`, 2 here); past
that the server refuses one with RESOURCE_EXHAUSTED before the workflow sees it. The SDK's own
retries (for ~10 s) usually hide a short refusal, so the worker here connects with one retry
within 50 ms (`RetryConfig`; `max_retries=0` is not "none": it retried for ~14 s): every refusal
of a held slot reaches the dsh code. The root's slots are filled in
order, never by timing: a board long-poll from the test (accepted before the root's turn starts),
then the turn's own `deliveries_after`; the turn's `start_children` is then refused, and the test
frees the held slot only once it saw that refusal (a client interceptor on the worker's client),
so the start can only succeed by being sent again. Without `_pressed` the refusal fails the spawn
(a tool error) and the child never runs.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from refusals_kit import Refusals
from temporal_kit import backstopped, dev_server
from temporalio.client import Client, StartWorkflowUpdateInput, WorkflowUpdateHandle, WorkflowUpdateStage
from temporalio.service import RetryConfig, RPCError, RPCStatusCode

from dsh.loader.config import TemporalConfig
from dsh.loader.engines import worker
from dsh.loader.engines.client import run_tree_temporal
from dsh.loader.engines.wire import TurnInput, TurnResult
from dsh.loader.headless import RunRequest
from dsh.loader.session import SessionStore
from dsh.loader.testing.runner import plan_flow

pytestmark = pytest.mark.asyncio(loop_scope="module")

BACKSTOP = 120.0


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def client() -> AsyncIterator[Client]:
    async with dev_server("--dynamic-config-value", "history.maxInFlightUpdates=2") as c:
        yield c


def start_refused(input: StartWorkflowUpdateInput, exc: RPCError) -> bool:
    """A `start_children` update the server refused for backpressure (seen on the worker's client)."""
    return exc.status == RPCStatusCode.RESOURCE_EXHAUSTED and input.update == "start_children"


def script(tmp_path: Path) -> Path:
    """The root starts w, then says STARTED; w's notice wakes the root's second turn (DONE). w's
    turn waits for the root's first turn to end (the test's gate), so the notice is a new turn."""
    root = [{"toolCalls": [{"id": "c1", "name": "subagent", "arguments": {"label": "w", "prompt": "Reply with W."}}]},
            {"text": "STARTED"}, {"text": "DONE"}]
    path = tmp_path / "pressed.json"
    path.write_text(json.dumps({"version": 1, "name": "pressed", "task": "Start w.", "agents": {
        "root": {"replies": root}, "w": {"spawnedBy": "c1", "replies": [{"text": "W_DONE"}]}}}))
    return path


async def test_a_child_start_refused_for_backpressure_is_sent_again_and_the_child_runs(
    client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    refusals = Refusals(watch=start_refused)
    retries = RetryConfig(initial_interval_millis=1, max_retries=1, max_elapsed_time_millis=50)
    worker_client = await Client.connect(client.service_client.config.target_host, namespace=client.namespace,
                                         interceptors=[refusals], retry_config=retries)
    root_ended = asyncio.Event()
    holders: list[WorkflowUpdateHandle[Any]] = []
    real = worker.run_turn

    async def ordered(spec: TurnInput, *args: Any, **kwargs: Any) -> TurnResult:
        root_id = spec.agent.run.root_id
        if spec.agent.parent_id is None and spec.seq == 0:
            # One of the root's two slots, held by a board long-poll (it answers a fact from
            # elsewhere than "holder"), accepted before the turn sends its own poll.
            holders.append(await client.get_workflow_handle(root_id).start_update(
                "fence_facts_after", args=[0, "holder"], wait_for_stage=WorkflowUpdateStage.ACCEPTED, result_type=list))
            release.append(asyncio.create_task(free_after_refusal(root_id)))
        if spec.agent.parent_id is not None:
            await asyncio.wait_for(root_ended.wait(), BACKSTOP)
        result = await real(spec, *args, **kwargs)
        if spec.agent.parent_id is None:
            root_ended.set()
        return result

    async def free_after_refusal(root_id: str) -> None:
        await asyncio.wait_for(refusals.seen.wait(), BACKSTOP)
        await client.get_workflow_handle(root_id).signal("fence_facts", args=[[["released"]], "test"])

    release: list[asyncio.Task[None]] = []
    monkeypatch.setattr(worker, "run_turn", ordered)
    plan = plan_flow(script(tmp_path))
    home = tmp_path / "home"
    queue = f"dsh-test-{uuid.uuid4().hex[:8]}"
    request = RunRequest(home=home, config=backstopped(plan.config), transcript=plan.script, fences_allowed=True)
    async with worker.make_worker(worker_client, queue):
        result = await asyncio.wait_for(run_tree_temporal(request, TemporalConfig(task_queue=queue), client=client),
                                        BACKSTOP)
    assert refusals.refused["start_children"] >= 1  # the path ran: the server refused the start at least once
    assert (result.stop_reason, result.output, result.violations) == ("completed", "DONE", [])
    assert await holders[0].result() == [["released"]]
    await asyncio.gather(*release)
    notices = [m["source"]["senderSessionId"] for e in SessionStore(home).read(result.root_session_id).events
               if e["type"] == "agent/inbox/spliced" for m in e["data"].get("inserted") or []
               if m["source"]["kind"] == "subagent-settled"]
    assert notices == [s["sessionId"] for s in result.subagents] and len(notices) == 1
