"""The runner's quiescence (SPEC §17.2, span S11) under `run.parked: wait` and `release`.

A live run (no transcript) with a parked child is STALLED: with `wait` the runner prints T-CLI-STALLED
once and keeps waiting for a human (`dsh send` / `dsh interrupt`); with `release` it drains the
parked work and ends. The model is a replay script handed to `run_tree` as a provider, so the run is
not transcript-driven and the configured policy applies.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from dsh.loader.agent import Agent, PreStep
from dsh.loader.config import Config
from dsh.loader.headless import RunRequest, RunSinks, run_tree
from dsh.loader.models import ReplayProvider
from dsh.loader.texts import TEXTS
from dsh.loader.transcripts import load_transcript

SCRIPT = {
    "version": 1,
    "name": "parked-stall",
    "task": "start a worker, queue work, stop it",
    "agents": {
        "root": {
            "replies": [
                {"toolCalls": [{"id": "sa", "name": "subagent", "arguments": {"label": "worker", "prompt": "work"}}]},
                {"toolCalls": [{"id": "sb", "name": "send_message",
                                "arguments": {"agent_id": "{{child:sa}}", "message": "B"}}]},
                {"toolCalls": [{"id": "stop", "name": "interrupt_agent", "arguments": {"agent_id": "{{child:sa}}"}}]},
                {"text": "WAITING"},
            ]
        },
        "worker": {"spawnedBy": "sa", "replies": [{"hang": {"text": "partial"}}, {"text": "B_OK"}]},
    },
}


def config(parked: str) -> Config:
    return Config.model_validate({"persistence": {"batchDelayMs": 0, "fsync": False}, "run": {"parked": parked}})


def hold_root_step_3_until_hang(replay: ReplayProvider) -> Any:
    """Root step 3 (interrupt_agent) waits until the worker's stream hangs, so the interrupt lands
    on a running turn with B queued behind it."""
    hung = asyncio.Event()
    replay.add_hang_listener(lambda key: hung.set() if key == "worker" else None)

    def install(agent: Agent) -> None:
        if agent.header.get("parentSession") is None:
            async def hook(ctx: PreStep) -> None:
                if ctx.turn == 1 and ctx.step == 3:
                    await asyncio.wait_for(hung.wait(), 10)

            agent.pre_step.add(hook)

    return install


async def run_parked(tmp_path: Path, parked: str, on_warning: Any) -> Any:
    path = tmp_path / "parked.yaml"
    path.write_text(json.dumps(SCRIPT))
    replay = ReplayProvider(load_transcript(path))
    stop = asyncio.Event()
    request = RunRequest(
        home=tmp_path / "home", config=config(parked), task=SCRIPT["task"], provider=replay, stop=stop,
        sinks=RunSinks(on_warning=lambda text: on_warning(text, stop)),
        agent_hooks=[hold_root_step_3_until_hang(replay)], timeout=30,
    )
    return await run_tree(request), replay


async def test_parked_wait_reports_the_stall_once_and_keeps_waiting(tmp_path):
    warnings: list[str] = []

    def on_warning(text: str, stop: asyncio.Event) -> None:
        warnings.append(text)
        stop.set()  # the human gives up (first Ctrl-C); without it the run would wait on

    result, replay = await run_parked(tmp_path, "wait", on_warning)
    worker = replay.session_of("worker")
    # Issue 16: the stall names the `<parent>/<child>` address `dsh send` takes, not the bare id.
    root = result.root_session_id
    assert warnings == [TEXTS["T-CLI-STALLED"].format(ids=f"{root}/{worker}")]
    assert result.interrupted and not result.timed_out
    assert result.released == []  # `wait` never releases parked work by itself
    assert result.output == "WAITING"


async def test_parked_release_drains_parked_work_and_ends(tmp_path):
    warnings: list[str] = []
    result, replay = await run_parked(tmp_path, "release", lambda text, stop: warnings.append(text))
    worker = replay.session_of("worker")
    assert warnings == []
    assert result.released == [worker]
    assert result.stop_reason == "completed" and not result.interrupted
    assert [s["lastStopReason"] for s in result.subagents] == ["aborted"]

