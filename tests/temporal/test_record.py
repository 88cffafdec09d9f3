"""`dsh run --engine temporal --record FILE` (issue 12 "Not yet" item 4; loader/engines/recording.py):
the recording is rebuilt from the agents' logs, read over the server by a client without the
workers' home, and replays on the local engine to the Temporal run's flow.
"""

from __future__ import annotations

import asyncio
import json
import stat
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporal_kit import backstopped, client  # noqa: F401  (client: the module's dev-server fixture)
from temporalio.client import Client
from test_temporal_engine import MANUAL, SHIPPED

from dsh.loader.config import TemporalConfig
from dsh.loader.engines.client import run_tree_temporal
from dsh.loader.engines.worker import make_worker
from dsh.loader.headless import RunRequest, RunResult
from dsh.loader.models.recorder import REDACTED
from dsh.loader.testing.flow import project
from dsh.loader.testing.normalize import normalize
from dsh.loader.testing.runner import Flow, FlowPlan, arun_flow, plan_flow
from dsh.loader.transcripts import load_transcript

pytestmark = pytest.mark.asyncio(loop_scope="module")

# Every shipped transcript records: interrupts and failed checkpoints become fences
# (loader/models/stop_fences.py), a parent's send_message is ordered as notices are (schedule.py).
RECORDED = [name for name in SHIPPED if name not in MANUAL]
BACKSTOP = 120.0


async def record(client: Client, plan: FlowPlan, tmp_path: Path, rec: Path) -> tuple[RunResult, Flow]:
    """A Temporal run recorded to `rec` by a client whose home is not the worker's; its flow."""
    workers, home = tmp_path / "workers", tmp_path / "client"
    home.mkdir()
    request = RunRequest(home=home, config=backstopped(plan.config), transcript=plan.script, fences_allowed=True,
                         record=rec)
    queue = f"dsh-test-{uuid.uuid4().hex[:8]}"
    async with make_worker(client, queue, home=workers):
        result = await asyncio.wait_for(run_tree_temporal(request, TemporalConfig(task_queue=queue), client=client),
                                        BACKSTOP)
    assert list(home.iterdir()) == []  # the logs came over the server
    raw = project(workers, result.root_session_id, result, result.violations, plan.script.spec.name)
    return result, Flow(normalize(raw))


@pytest.mark.parametrize("name", RECORDED)
async def test_a_recorded_temporal_run_replays_to_the_same_flow_on_the_local_engine(
    client: Client, name: str, tmp_path: Path
) -> None:
    plan = plan_flow(name)
    rec = tmp_path / f"{plan.script.spec.name}.yaml"
    result, flow = await record(client, plan, tmp_path, rec)
    assert result.violations == []
    assert stat.S_IMODE(rec.stat().st_mode) == 0o600
    replayed = await arun_flow(rec, home=tmp_path / "replay")
    assert replayed == flow


async def test_a_recording_keeps_no_secret_of_the_client(client: Client, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "sk-live-0123456789abcdef"
    monkeypatch.setenv("SOME_SERVICE_TOKEN", secret)
    path = tmp_path / "leaky.json"
    path.write_text(json.dumps({"version": 1, "name": "leaky", "task": f"Use {secret}.", "agents": {
        "root": {"replies": [{"text": f"The token is {secret}."}]}}}))
    rec = tmp_path / "leaky.yaml"
    result, _ = await record(client, plan_flow(path), tmp_path, rec)
    assert result.output == f"The token is {secret}."
    text = rec.read_text()
    assert secret not in text
    script = load_transcript(rec).spec
    assert script.task == f"Use {REDACTED}."
    assert [r.text for r in script.agents["root"].replies] == [f"The token is {REDACTED}."]


async def _record_with_user_call(client: Client, tmp_path: Path, plan: FlowPlan, spawn_call: str, method: str,
                                 params: dict[str, str]) -> tuple[Flow, Any, Path]:
    """Run `plan` on Temporal with `--record`; once the root's first turn ended, act as the user
    over the client (`control.user_call`, what the CLI calls) with `method` on the child that
    `spawn_call` started. Returns the Temporal run's flow, the recording's spec and its path."""
    from dsh.loader.engines.control import user_call
    from dsh.loader.headless import RunSinks
    from dsh.loader.session import SessionStore
    from test_temporal_control import root_turn_completed

    (tmp_path / "rec").mkdir()
    rec = tmp_path / "rec" / f"{plan.script.spec.name}.yaml"  # the file stem is the recording's name
    home = tmp_path / "home"
    started: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    request = RunRequest(home=home, config=backstopped(plan.config), transcript=plan.script, fences_allowed=True,
                         record=rec, sinks=RunSinks(on_started=started.set_result))
    queue = f"dsh-test-{uuid.uuid4().hex[:8]}"
    async with make_worker(client, queue, home=home):
        run = asyncio.create_task(run_tree_temporal(request, TemporalConfig(task_queue=queue), client=client))
        root = await asyncio.wait_for(started, 60)
        await asyncio.wait_for(root_turn_completed(client, root), 60)
        [spawn] = [e for e in SessionStore(home).read(root).events
                   if e["type"] == "tool/result" and e["data"]["callId"] == spawn_call]
        child = spawn["data"]["value"]["sessionId"]
        await user_call(client, root, method, {"parentSessionId": root, "childSessionId": child, **params})
        result = await asyncio.wait_for(run, BACKSTOP)
    assert result.violations == []
    flow = Flow(normalize(project(home, result.root_session_id, result, result.violations, plan.script.spec.name)))
    return flow, load_transcript(rec).spec, rec


async def test_a_temporal_run_the_user_interrupted_replays_to_its_flow_on_the_local_engine(
    client: Client, tmp_path: Path
) -> None:
    """interrupt-demo (fenced as in test_temporal_control.py) on Temporal with the user's `dsh interrupt` over the client
    (`control.user_call`, what the CLI calls) once the root's first turn ended: the recording writes
    it as the transcript's `user` entry (read from the workers' logs), and the local replay of the
    file does it again, to the Temporal run's flow. Before, the recording kept the hang only and
    its replay waited there."""
    from test_temporal_control import fenced_demo

    plan = plan_flow(fenced_demo(tmp_path))  # the root's turn 1 ends once the child's hang is reached
    flow, doc, rec = await _record_with_user_call(client, tmp_path, plan, "start-child", "subagent.interrupt", {})
    assert [a.interrupt.agent for a in doc.user if a.interrupt is not None] == ["child-1"]
    replayed = await arun_flow(rec, home=tmp_path / "replay", timeout=60)
    assert replayed == flow


async def test_a_temporal_run_the_user_sent_to_replays_to_its_flow_on_the_local_engine(
    client: Client, tmp_path: Path
) -> None:
    """The user's `dsh send` over the client (`control.user_call`) to a worker whose first step is
    held until the message is in: the recording writes it as the transcript's `user` send, and the
    local replay of the file sends it again, to the Temporal run's flow."""
    plan = plan_flow(USER_SEND)
    flow, doc, rec = await _record_with_user_call(client, tmp_path, plan, "start-worker", "subagent.prompt",
                                                  {"message": "EXTRA"})
    assert [(a.send.agent, a.send.text) for a in doc.user if a.send is not None] == [("child-1", "EXTRA")]
    replayed = await arun_flow(rec, home=tmp_path / "replay", timeout=60)
    assert replayed == flow


USER_SEND = Path(__file__).parents[1] / "replay" / "user-send-live.yaml"  # the test is the user
