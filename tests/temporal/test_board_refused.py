"""A fence board the server refuses still reaches the agents held on it (loader/engines/long_polls.py).

The board's long-poll is an update on the root, and a server refuses one past the run's cap
(`history.maxTotalUpdates`: FAILED_PRECONDITION) or its in-flight limit (RESOURCE_EXHAUSTED). A
refused poll ended the mirror, and a refused `fence_facts` signal dropped its facts: the held agent
never saw the fact it waited for, and its fence timed out (FENCE_TIMEOUT; seen in CI under load in
tests/temporal/test_root_continue.py). Here a client interceptor refuses every `fence_facts_after`
update, as the cap does, and the first `fence_facts` signals, so the facts reach the board only by
being sent again and the held agents only by reading the board by query. The fence timeout is
short, so the refused path fails fast.
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
from refusals_kit import Refusals, refusal
from temporal_kit import dev_server
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from dsh.loader.config import Config, TemporalConfig
from dsh.loader.engines.client import run_tree_temporal
from dsh.loader.engines.worker import make_worker
from dsh.loader.headless import RunRequest
from dsh.loader.testing.runner import plan_flow

pytestmark = pytest.mark.asyncio(loop_scope="module")

FENCE_TIMEOUT = 20.0  # a held agent that never hears its fact fails at this, not at the backstop
BACKSTOP = 120.0
REFUSED_SIGNALS = 2  # the first `fence_facts` signals refused: a batch gets there by being sent again


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def client() -> AsyncIterator[Client]:
    async with dev_server() as c:
        yield c


def refusing(signals: int) -> Refusals:
    """Refuses every `fence_facts_after` update as the run's cap does, and the first `signals`
    `fence_facts` signals as a server under load does."""
    left = [signals]

    def update(input: Any) -> RPCError | None:
        if input.update != "fence_facts_after":
            return None
        return refusal(RPCStatusCode.FAILED_PRECONDITION,
                       "The limit on the total number of distinct updates in this workflow has been reached")

    def signal(input: Any) -> RPCError | None:
        if input.signal == "fence_facts" and left[0] > 0:
            left[0] -= 1
            return refusal(RPCStatusCode.RESOURCE_EXHAUSTED, "limit on number of concurrent in-flight requests")
        return None

    return Refusals(update=update, signal=signal)


def held(tmp_path: Path) -> Path:
    """The root starts w and says STARTED; w's turn is held until the root's first turn ended, a
    fact only the board carries from the root's turn to w's; w's notice opens the root's second."""
    root = [{"toolCalls": [{"id": "c1", "name": "subagent", "arguments": {"label": "w", "prompt": "Reply with W."}}]},
            {"text": "STARTED"}, {"text": "DONE"}]
    path = tmp_path / "held.json"
    path.write_text(json.dumps({
        "version": 1, "name": "held", "task": "Start w.",
        "fences": [{"hold": {"agent": "w", "turn": 1, "step": 1, "until": {"turnEnded": {"agent": "root", "turn": 1}}}}],
        "agents": {"root": {"replies": root}, "w": {"spawnedBy": "c1", "replies": [{"text": "W_DONE"}]}}}))
    return path


def short_fences(config: Config) -> Config:
    return config.model_copy(update={"testing": config.testing.model_copy(update={"fence_timeout_seconds": FENCE_TIMEOUT})})


async def run(plan_path: Path, home: Path, worker_client: Client, run_client: Client) -> Any:
    plan = plan_flow(str(plan_path))
    request = RunRequest(home=home, config=short_fences(plan.config), transcript=plan.script, fences_allowed=True)
    queue = f"dsh-test-{uuid.uuid4().hex[:8]}"
    async with make_worker(worker_client, queue):
        return await asyncio.wait_for(run_tree_temporal(request, TemporalConfig(task_queue=queue), client=run_client),
                                      BACKSTOP)


async def refusing_client(client: Client, refusals: Refusals) -> Client:
    return await Client.connect(client.service_client.config.target_host, namespace=client.namespace,
                                interceptors=[refusals])


async def test_a_held_turn_hears_its_fact_when_the_board_poll_and_the_first_publishes_are_refused(
    client: Client, tmp_path: Path
) -> None:
    refused = refusing(signals=REFUSED_SIGNALS)
    result = await run(held(tmp_path), tmp_path / "home", await refusing_client(client, refused), client)
    assert (result.stop_reason, result.output, result.violations) == ("completed", "DONE", [])
    assert [(s["label"], s["lastStopReason"]) for s in result.subagents] == [("w", "completed")]
    # The paths ran: w's mirror was refused its update and the root's facts their first signals.
    assert refused.refused["fence_facts_after"] >= 1 and refused.refused["fence_facts"] == REFUSED_SIGNALS


async def test_the_transcripts_user_acts_when_its_board_poll_is_refused(client: Client, tmp_path: Path) -> None:
    refused = refusing(signals=0)
    user_send = Path(__file__).parent.parent / "replay" / "user-send.yaml"
    result = await run(user_send, tmp_path / "home", client, await refusing_client(client, refused))
    assert (result.stop_reason, result.output, result.violations) == ("completed", "WORKER_DONE", [])
    assert refused.refused["fence_facts_after"] >= 1  # the user's mirror (the run's client) was refused its update
