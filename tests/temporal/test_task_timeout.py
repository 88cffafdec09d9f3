"""`temporal.workflowTaskTimeoutSeconds`: every agent workflow's task timeout, the root's, each
child's and every run continued as new (loader/engines/README.md "Scale"). A run whose history
grew long replays it whole after an eviction; past the server's 10 s each retry replays again.

The tree is interrupt-parked-resume with `temporal.continueAsNewAfter: 1`, so the root and its child
each continue as new; their workflows' runs are read from the server's histories.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from temporal_kit import client, run_histories, run_temporal  # noqa: F401  (client: the module's dev-server fixture)
from temporalio.client import Client

from dsh.loader.engines.residents import WORKFLOW_TYPE
from dsh.loader.testing.runner import FlowPlan, plan_flow

pytestmark = pytest.mark.asyncio(loop_scope="module")


def with_temporal(plan: FlowPlan, **temporal: object) -> FlowPlan:
    config = plan.config.temporal.model_copy(update={"continue_as_new_after": 1, **temporal})
    return FlowPlan(script=plan.script, config=plan.config.model_copy(update={"temporal": config}))


async def agent_task_timeouts(client: Client, root_id: str) -> dict[str, list[timedelta]]:
    """Each agent workflow of the tree -> the task timeout of each of its runs, in order."""
    found: dict[str, list[timedelta]] = {}
    pending = [root_id]
    while pending:
        workflow_id = pending.pop(0)
        runs = await run_histories(client, workflow_id)
        found[workflow_id] = [r.events[0].workflow_execution_started_event_attributes.workflow_task_timeout.ToTimedelta()
                              for r in runs]
        for history in runs:
            for event in history.events:
                if event.HasField("start_child_workflow_execution_initiated_event_attributes"):
                    started = event.start_child_workflow_execution_initiated_event_attributes
                    if started.workflow_type.name == WORKFLOW_TYPE and started.workflow_id not in found:
                        pending.append(started.workflow_id)
    return found


@pytest.mark.parametrize(("seconds", "expected"), [(45.0, timedelta(seconds=45)), (None, timedelta(seconds=10))],
                         ids=["set", "server-default"])
async def test_every_agent_run_takes_the_configured_workflow_task_timeout(
    client: Client, tmp_path: Path, seconds: float | None, expected: timedelta
) -> None:
    plan = with_temporal(plan_flow("interrupt-parked-resume"), workflow_task_timeout_seconds=seconds)
    run = await run_temporal(client, plan, tmp_path / "home")
    assert run.result.violations == [] and run.result.output
    timeouts = await agent_task_timeouts(client, run.result.root_session_id)
    assert len(timeouts) == 2, timeouts  # the root and its worker
    assert all(len(runs) >= 2 for runs in timeouts.values()), timeouts  # each continued as new
    assert {t for runs in timeouts.values() for t in runs} == {expected}
