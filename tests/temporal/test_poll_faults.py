"""A turn's poll that fails is asked again (loader/engines/link.py `TurnLink.poll`;
loader/engines/README.md "Continue-as-new").

The running turn learns of its deliveries (a child's notice steered into it) and interrupts only by
polling its workflow: a long-poll update, then, once its run's updates are spent, a query. A poll
that raised ended the poller task, so the turn heard nothing more: seen in a 4,000-child fan-out,
whose root stopped receiving notices a minute after it switched to queries (a query the busy
worker did not answer in time), its held step waiting for notices that had all arrived. Here the
worker's client refuses the root's first long-poll update (so the turn moves to queries) and its
first two queries: the tree gives the local engine's flow, the notice steered into the held step.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from refusals_kit import Refusals, refusal
from temporal_kit import backstopped, client  # noqa: F401  (the module's client)
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from dsh.loader.config import TemporalConfig
from dsh.loader.engines import worker
from dsh.loader.engines.client import run_tree_temporal
from dsh.loader.headless import RunRequest
from dsh.loader.testing.flow import project
from dsh.loader.testing.normalize import normalize
from dsh.loader.testing.runner import Flow, arun_flow, plan_flow

pytestmark = pytest.mark.asyncio(loop_scope="module")


def refusing(queries: int) -> Refusals:
    """Refuses the root's first `deliveries_after` update and its first `queries` queries."""
    left = [queries]

    def update(input: Any) -> RPCError | None:
        first = input.update == "deliveries_after" and "/" not in input.id and not rules.refused["deliveries_after"]
        return refusal(RPCStatusCode.RESOURCE_EXHAUSTED) if first else None

    def query(input: Any) -> RPCError | None:
        if input.query == "deliveries_now" and "/" not in input.id and left[0]:
            left[0] -= 1
            return refusal(RPCStatusCode.DEADLINE_EXCEEDED, "query timed out (the test)")
        return None

    rules = Refusals(update=update, query=query)
    return rules


async def test_a_turn_whose_polls_fail_asks_again_by_query_and_hears_its_notice(
    client: Client, tmp_path: Path  # noqa: F811
) -> None:
    plan = plan_flow("background-settlement")
    local = await arun_flow(plan, home=tmp_path / "local")
    refused = refusing(queries=2)
    worker_client = await Client.connect(client.service_client.config.target_host, namespace=client.namespace,
                                         interceptors=[refused])
    home = tmp_path / "temporal"
    queue = f"dsh-test-{uuid.uuid4().hex[:8]}"
    request = RunRequest(home=home, config=backstopped(plan.config), transcript=plan.script, fences_allowed=True)
    async with worker.make_worker(worker_client, queue):
        result = await run_tree_temporal(request, TemporalConfig(task_queue=queue), client=client)
    assert (refused.refused["deliveries_after"], refused.refused["deliveries_now"]) == (1, 2)  # both paths ran
    assert (result.stop_reason, result.output, result.violations) == ("completed", "PARENT_RECEIVED_CHILD_RESULT", [])
    flow = Flow(normalize(project(home, result.root_session_id, result, result.violations, plan.script.spec.name)))
    assert flow == local
