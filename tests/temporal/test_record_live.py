"""`dsh run --engine temporal --record FILE` of live, untranscribed runs (issue 12 "Not yet" item 4).

The worker's own provider asks `sse_server`'s scripted server (the key only in the worker's
environment); the client, which has no key and not the workers' home, rebuilds the recording from
the logs it reads over the server (loader/engines/recording.py). Pinned here:
- a request that streams some text and then fails is recorded as `error` with that `text`, as the
  local `Recorder` records the same server script (the turn activity notes the text in the log as
  `engine/failed-text`, loader/engines/failed_text.py); the recording replays;
- a small live tree (root + a background child, its notice settled) recorded on Temporal replays
  on the local engine to the Temporal run's flow, and no key is in the file.
"""

from __future__ import annotations

import asyncio
import re
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import respx
import yaml
from sse_kit import delta, sse
from sse_server import Reply, first_user_text, text, tool_call
from temporal_kit import client  # noqa: F401  (client: the module's dev-server fixture)
from temporalio.client import Client
from test_live import KEY, KEY_ENV, PROMPT, TASK, flow_of, last, live_config, serving

from dsh.loader.config import Config, TemporalConfig
from dsh.loader.engines.client import run_tree_temporal
from dsh.loader.engines.failed_text import FAILED_TEXT_EVENT
from dsh.loader.engines.worker import make_worker
from dsh.loader.headless import RunRequest, RunResult, run_tree
from dsh.loader.session import SessionStore, validate_log
from dsh.loader.testing.runner import Flow, arun_flow

pytestmark = pytest.mark.asyncio(loop_scope="module")

BACKSTOP = 120.0  # a loud failure, never an ordering
PART = "Half an answer, then"


def failing_helper() -> Callable[[dict[str, Any]], Reply]:
    """The root runs a one-shot helper (no race: the root's turn waits for it), whose stream sends
    PART and then an in-stream error event (PROVIDER_ERROR); the root then answers DONE."""

    def reply(body: dict[str, Any]) -> Reply:
        if first_user_text(body) == PROMPT:
            return Reply(sse(delta(content=PART), {"error": {"message": "overloaded", "code": "overloaded"}}))
        if last(body)["role"] == "user" and last(body)["content"] == TASK:
            return tool_call("fg", "subagent", {"label": "helper", "prompt": PROMPT, "run_in_background": False})
        return text("DONE")

    return reply


async def recorded_on_temporal(client: Client, config: Config, tmp_path: Path, rec: Path,
                               streamed: list[dict[str, Any]] | None = None) -> tuple[RunResult, Path]:
    """A Temporal run of `config`'s live model recorded to `rec` by a client with no key and no
    home of the workers'; the result and the workers' home. `streamed` gets the events the
    client's stream hands its sinks."""
    workers, home = tmp_path / "workers", tmp_path / "client"
    home.mkdir(parents=True)
    queue = f"dsh-rec-{uuid.uuid4().hex[:8]}"
    async with make_worker(client, queue, home=workers, model=config.model, environ={KEY_ENV: KEY}):
        request = RunRequest(home=home, config=config, task=TASK, record=rec)
        request.sinks.on_event = lambda sid, event: (streamed if streamed is not None else []).append(event)
        result = await asyncio.wait_for(run_tree_temporal(request, TemporalConfig(task_queue=queue), client=client),
                                        BACKSTOP)
    assert list(home.iterdir()) == []  # the logs came over the server
    return result, workers


def replayable(flow: Flow) -> dict[str, Any]:
    """A flow without its transcript name (the live run has none)."""
    return {k: v for k, v in flow.data.items() if k != "transcript"}


async def recorded_locally(config: Config, home: Path, rec: Path, monkeypatch: pytest.MonkeyPatch) -> RunResult:
    monkeypatch.setenv(KEY_ENV, KEY)  # the local engine reads the key in this process
    try:
        return await asyncio.wait_for(run_tree(RunRequest(home=home, config=config, task=TASK, record=rec)), BACKSTOP)
    finally:
        monkeypatch.delenv(KEY_ENV)


def children(home: Path, root_id: str) -> list[str]:
    return sorted(p.name for p in (home / "sessions").iterdir() if p.name != root_id)


async def test_a_failed_requests_streamed_text_is_recorded_on_temporal_as_on_the_local_engine(
    client: Client, llm: respx.MockRouter, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    local_rec, remote_rec = tmp_path / "local" / "failed-text.yaml", tmp_path / "temporal" / "failed-text.yaml"
    local_rec.parent.mkdir()
    remote_rec.parent.mkdir()
    with serving(llm, failing_helper()) as server:
        config = live_config(server.base_url)
        local = await recorded_locally(config, tmp_path / "local-home", local_rec, monkeypatch)
        streamed: list[dict[str, Any]] = []
        remote, workers = await recorded_on_temporal(client, config, tmp_path / "t", remote_rec, streamed)
    assert (local.stop_reason, local.output) == (remote.stop_reason, remote.output) == ("completed", "DONE")
    [helper] = children(workers, remote.root_session_id)
    noted = [e["data"] for e in SessionStore(workers).read(helper).events if e["type"] == FAILED_TEXT_EVENT]
    assert noted == [{"turn": 1, "step": 1, "text": PART}]
    validate_log(SessionStore(workers).read(helper).events)  # ignorable: a valid log
    assert streamed and FAILED_TEXT_EVENT not in {e["type"] for e in streamed}  # the stream is the local one
    docs = [yaml.safe_load(rec.read_text()) for rec in (local_rec, remote_rec)]
    assert docs[1] == docs[0]
    [failed] = docs[0]["agents"]["child-1"]["replies"]
    assert (failed["text"], failed["error"]["code"]) == (PART, "PROVIDER_ERROR")
    replayed = await arun_flow(remote_rec, home=tmp_path / "replay")
    assert replayable(replayed) == replayable(flow_of(workers, remote))


def tree_with_follow_up(child_may_answer: threading.Event) -> Callable[[dict[str, Any]], Reply]:
    """The root starts a background helper, sends it MORE (naming it by the id its spawn result
    gave), says STARTED; the helper answers HELPED once STARTED was served, then MORE_DONE; the
    request holding the notice is answered NOTED."""

    def reply(body: dict[str, Any]) -> Reply:
        if first_user_text(body) == PROMPT:
            if last(body)["content"] == "MORE":
                return text("MORE_DONE")
            return Reply(text("HELPED").body, hold=child_may_answer)
        if last(body)["role"] == "user" and last(body)["content"] == TASK:
            return tool_call("bg", "subagent", {"label": "helper", "prompt": PROMPT})
        if last(body)["role"] == "tool" and last(body)["tool_call_id"] == "bg":
            [child] = re.findall(r"session-[0-9a-f-]{36}", str(last(body)["content"]))
            return tool_call("more", "send_message", {"agent_id": child, "message": "MORE"})
        if last(body)["role"] == "tool":
            child_may_answer.set()
            return text("STARTED")
        return text("NOTED")

    return reply


async def test_a_live_temporal_tree_recorded_replays_locally_to_its_flow(
    client: Client, llm: respx.MockRouter, tmp_path: Path
) -> None:
    """The recording names the child by placeholder (`{{child:bg}}`, not the id the live run
    minted) and holds the observed notice order as fences; no key and no endpoint is in it."""
    rec = tmp_path / "live-tree.yaml"
    with serving(llm, tree_with_follow_up(threading.Event())) as server:
        result, workers = await recorded_on_temporal(client, live_config(server.base_url), tmp_path, rec)
        seen = len(server.seen)
    live = flow_of(workers, result)
    assert (result.stop_reason, result.output, result.violations) == ("completed", "NOTED", [])
    assert [n["stopReason"] for n in live.data["notices"]] == ["completed"]
    text = rec.read_text()
    assert KEY not in text and server.base_url not in text and result.subagents[0]["sessionId"] not in text
    doc = yaml.safe_load(text)
    assert doc["agents"]["child-1"]["spawnedBy"] == "bg"
    assert doc["agents"]["root"]["replies"][1]["toolCalls"][0]["arguments"] == {"agent_id": "{{child:bg}}",
                                                                               "message": "MORE"}
    assert sum(len(a["replies"]) for a in doc["agents"].values()) == seen  # one reply per request
    replayed = await arun_flow(rec, home=tmp_path / "replay")
    assert replayable(replayed) == replayable(live)
