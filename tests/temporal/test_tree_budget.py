"""Run budgets tree-wide on the Temporal engine (issue 15 finding 9; loader/engines/README.md "Run
budgets"): the root workflow keeps the tree's one `RunBudget`, every turn on any worker charges it,
and the run result's `budget`, error and exit code are the local engine's.

One rule per case, each run on both engines from the same transcript and limits:
- tokens: a child whose reply spends the run's tokens is refused its next request, settles
  `error` BUDGET_EXHAUSTED, and its parent gets the notice (then is refused its own request);
- requests: the same tree under a request cap;
- children: a spawn past the cap is the tool error the model sees, and no child exists.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from temporal_kit import backstopped, dev_server, settlement_facts
from temporalio.client import Client

from dsh.loader.config import Config, TemporalConfig
from dsh.loader.engines.client import run_tree_temporal
from dsh.loader.engines.worker import make_worker
from dsh.loader.headless import RunRequest, RunResult, run_tree
from dsh.loader.testing.flow import project
from dsh.loader.testing.normalize import normalize
from dsh.loader.testing.runner import Flow, plan_flow

SPENDER = """\
version: 1
name: child-spends-the-budget
task: Start a child that spends the run's budget, then note how it ended.
fences:
  - hold: {agent: "*children", until: {turnEnded: {agent: root, turn: 1}}}
agents:
  root:
    replies:
      - toolCalls: [{id: start-w, name: subagent, arguments: {label: spender, prompt: Spend it.}}]
      - text: STARTED
  w:
    spawnedBy: start-w
    replies:
      - toolCalls: [{id: w-look, name: list_agents, arguments: {}}]
        usage: {inputTokens: 60, outputTokens: 60}
"""
# Root turn 1: two requests (30 tokens); then w's one request (150 tokens in all, 3 requests).
# w's second request is refused, so is the root's first request of turn 2 (opened by the notice).

NO_CHILD = """\
version: 1
name: spawn-past-the-cap
task: Try to start a child.
agents:
  root:
    replies:
      - toolCalls: [{id: start-w, name: subagent, arguments: {label: helper, prompt: Help.}}]
      - text: NO_CHILD
"""

CASES = {
    "tokens": (SPENDER, {"max_tokens": 100}),
    "requests": (SPENDER, {"max_requests": 3}),
    "children": (NO_CHILD, {"max_children": 0}),
}


async def both(client: Client, tmp_path: Path, script: str, limits: dict[str, Any],
               temporal: dict[str, Any] | None = None) -> list[tuple[RunResult, Flow]]:
    """`script` on the local engine, then on Temporal (`temporal`: `temporal.*` settings)."""
    path = tmp_path / "script.yaml"
    path.write_text(script)
    plan = plan_flow(path)
    config: Config = plan.config.model_copy(update={"limits": plan.config.limits.model_copy(update=limits),
                                                    "temporal": plan.config.temporal.model_copy(update=temporal or {})})
    runs = []
    for engine in ("local", "temporal"):
        home = tmp_path / engine
        request = RunRequest(home=home, config=backstopped(config), transcript=plan.script, fences_allowed=True)
        if engine == "local":
            result = await run_tree(request)
        else:
            queue = f"dsh-budget-{uuid.uuid4().hex[:8]}"
            async with make_worker(client, queue):
                result = await run_tree_temporal(request, TemporalConfig(task_queue=queue), client=client)
        raw = project(home, result.root_session_id, result, result.violations, plan.script.spec.name)
        runs.append((result, Flow(normalize(raw))))
    return runs


@pytest.mark.parametrize("kind", list(CASES))
async def test_a_run_budget_holds_tree_wide_as_on_the_local_engine(tmp_path: Path, kind: str) -> None:
    script, limits = CASES[kind]
    async with dev_server() as client:
        (local, local_flow), (remote, remote_flow) = await both(client, tmp_path, script, limits)
    assert settlement_facts(remote_flow) == settlement_facts(local_flow)
    assert remote.budget == local.budget and local.budget["exhausted"] == kind
    assert (remote.exit_code, remote.error, remote.violations) == (local.exit_code, local.error, local.violations)
    assert local.exit_code == 1 and local.error is not None and local.error["code"] == "BUDGET_EXHAUSTED"
    facts = settlement_facts(local_flow)
    if kind == "children":
        assert local.budget["children"] == 0 and local.subagents == [] and remote.subagents == []
        assert (local.stop_reason, local.output) == ("completed", "NO_CHILD")
    else:
        # The child settles with the refusal and the notice reaches its parent.
        assert [(n["kind"], n["stopReason"]) for n in facts["notices"]] == [("subagent-settled", "error")]
        assert [s["lastStopReason"] for s in local.subagents] == ["error"] == [s["lastStopReason"] for s in remote.subagents]
        assert local.stop_reason == "error" and (local.budget["requests"], local.budget["tokens"]) == (3, 150)
