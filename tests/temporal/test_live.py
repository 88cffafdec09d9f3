"""Live providers on the Temporal engine (issue 12; loader/engines/README.md "Live providers").

Without a transcript the turn activity runs the worker's own OpenAI-compatible provider: its
`model.*` settings, the key read from its environment. No network: every model here is
`sse_server`'s scripted server on 127.0.0.1, which a worker in another process reaches too. The
same tree on both engines gives the same settlement facts; the key is in no history and no log;
provider failures end turns as they do locally; a missing key is the local MISSING_API_KEY; and a
worker SIGKILLed mid-turn, also mid one-shot child, loses nothing and re-sends no recorded reply.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import subprocess
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import pytest
import respx
from sse_server import Gate, Reply, ScriptedServer, error, first_user_text, scripted_server, text, tool_call
from sse_kit import delta, finish, sse, usage
from temporal_kit import dev_server, settlement_facts, with_turn_runs
from test_faults import dsh_worker as faults_worker
from test_turn import RecordingLink
from temporalio.client import Client

from dsh.loader.config import Config, TemporalConfig
from dsh.loader.engines.client import run_tree_temporal
from dsh.loader.agent import user_message
from dsh.loader.engines.turn import LiveModel, run_turn
from dsh.loader.engines.wire import Delivery, RunSpec, TreeInput, TurnInput, child_workflow_id
from dsh.loader.engines.worker import make_worker
from dsh.loader.errors import ConfigError
from dsh.loader.headless import RunRequest, RunResult, run_tree
from dsh.loader.session import SessionStore
from dsh.loader.subagents import continuation_message
from dsh.loader.testing.flow import project
from dsh.loader.testing.normalize import normalize
from dsh.loader.testing.runner import Flow

KEY_ENV = "DSH_TLIVE_TEST_KEY"
KEY = f"sk-tlive-{uuid.uuid4().hex}"
TASK = "Start a helper, then note how it ended."
PROMPT = "Help with the task."
BACKSTOP = 120  # a loud failure, never an ordering


@contextmanager
def serving(llm: respx.MockRouter, reply: Callable[[dict[str, Any]], Reply]) -> Iterator[ScriptedServer]:
    """The scripted server, reachable from this process too: the suite's no-network router lets
    requests to it (and only it) through (tests/conftest.py)."""
    with scripted_server(reply) as server:
        host, port = server.httpd.server_address[:2]
        llm.route(host=str(host), port=port).pass_through()
        yield server


def live_config(base_url: str, heartbeat: float = 60.0) -> Config:
    config = Config()
    retry = config.model.retry.model_copy(update={"initial_backoff_seconds": 0.0, "max_backoff_seconds": 0.0})
    model = config.model.model_copy(update={"base_url": base_url, "api_key_env": KEY_ENV, "model": "live-test",
                                            "retry": retry})
    temporal = config.temporal.model_copy(update={"heartbeat_timeout_seconds": heartbeat})
    return config.model_copy(update={"model": model, "temporal": temporal})


async def local_run(config: Config, home: Path, monkeypatch: pytest.MonkeyPatch) -> RunResult:
    monkeypatch.setenv(KEY_ENV, KEY)  # the local engine reads the key in this process
    try:
        return await asyncio.wait_for(run_tree(RunRequest(home=home, config=config, task=TASK)), BACKSTOP)
    finally:
        monkeypatch.delenv(KEY_ENV)


async def temporal_run(client: Client, config: Config, home: Path, environ: dict[str, str],
                       started: list[str] | None = None) -> RunResult:
    """A worker in this process whose environment is `environ` alone; this client has no key."""
    assert KEY_ENV not in os.environ
    queue = f"dsh-live-{uuid.uuid4().hex[:8]}"
    async with make_worker(client, queue, model=config.model, environ=environ):
        request = RunRequest(home=home, config=config, task=TASK)
        request.sinks.on_started = (started if started is not None else []).append
        return await asyncio.wait_for(run_tree_temporal(request, TemporalConfig(task_queue=queue), client=client),
                                      BACKSTOP)


def flow_of(home: Path, result: RunResult) -> Flow:
    return Flow(normalize(project(home, result.root_session_id, result, result.violations, "live")))


def last(body: dict[str, Any]) -> dict[str, Any]:
    message: dict[str, Any] = body["messages"][-1]
    return message


def one_shot_tree(gate: Gate | None = None) -> Callable[[dict[str, Any]], Reply]:
    """The root runs a foreground (one-shot) helper, then answers DONE; the helper's first reply
    is held by `gate` when given."""
    asked: list[str] = []

    def reply(body: dict[str, Any]) -> Reply:
        if first_user_text(body) == PROMPT:
            asked.append("helper")
            answer = text("HELPED")
            return gate.hold(answer) if gate is not None and asked.count("helper") == 1 else answer
        if last(body)["role"] == "user" and last(body)["content"] == TASK:
            return tool_call("fg", "subagent", {"label": "helper", "prompt": PROMPT, "run_in_background": False})
        return text("DONE")

    return reply


def background_tree(child_may_answer: threading.Event) -> Callable[[dict[str, Any]], Reply]:
    """The root starts a continuable helper and says STARTED; the helper answers HELPED once the
    root's STARTED was served; a request holding the notice is answered NOTED."""

    def reply(body: dict[str, Any]) -> Reply:
        if first_user_text(body) == PROMPT:
            return Reply(text("HELPED").body, hold=child_may_answer)
        if last(body)["role"] == "user" and last(body)["content"] == TASK:
            return tool_call("bg", "subagent", {"label": "helper", "prompt": PROMPT})
        if last(body)["role"] == "tool":
            child_may_answer.set()
            return text("STARTED")
        return text("NOTED")

    return reply


def history_text(dumped: str) -> str:
    """A history's JSON with every payload's base64 `data` decoded beside it: the converter's JSON
    is what a leaked key would be in, and the history JSON holds it only base64-encoded."""
    parts: list[str] = [dumped]

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "data" and isinstance(value, str):
                    try:
                        parts.append(base64.b64decode(value, validate=True).decode("utf-8", "replace"))
                    except ValueError:
                        pass
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(json.loads(dumped))
    return "\n".join(parts)


def race_free(flow: Flow) -> dict[str, Any]:
    """Settlement facts a background child's timing cannot change: whether the notice entered
    the root's turn 1 (steered) or opened turn 2 depends on it, so turn counts are left out."""
    facts = settlement_facts(flow)
    return {"notices": facts["notices"], "result": facts["result"]}


async def test_a_live_tree_gives_the_same_settlement_facts_on_both_engines(llm: respx.MockRouter, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with dev_server() as client:
        with serving(llm, one_shot_tree()) as server:
            config = live_config(server.base_url)
            local = await local_run(config, tmp_path / "local", monkeypatch)
            remote = await temporal_run(client, config, tmp_path / "temporal", {KEY_ENV: KEY})
        assert (local.stop_reason, local.output, local.exit_code) == ("completed", "DONE", 0), local.error
        assert settlement_facts(flow_of(tmp_path / "temporal", remote)) == settlement_facts(
            flow_of(tmp_path / "local", local))
        assert (remote.model, remote.budget) == (local.model, local.budget) and local.budget["requests"] == 3
        flows = []
        for engine in ("local", "temporal"):
            with serving(llm, background_tree(threading.Event())) as server:
                config = live_config(server.base_url)
                home = tmp_path / f"bg-{engine}"
                if engine == "local":
                    result = await local_run(config, home, monkeypatch)
                else:
                    result = await temporal_run(client, config, home, {KEY_ENV: KEY})
            assert (result.stop_reason, result.output, result.exit_code) == ("completed", "NOTED", 0)
            flows.append(race_free(flow_of(home, result)))
        assert flows[0] == flows[1] and [n["stopReason"] for n in flows[0]["notices"]] == ["completed"]


async def test_the_worker_reads_the_key_and_it_is_in_no_history_and_no_log(llm: respx.MockRouter, tmp_path: Path) -> None:
    """The key is set only in the worker's environment: the client has none, every request
    carried it, and neither any workflow history of the tree (inputs, results, updates, signals,
    heartbeats) nor any file under the home holds it."""
    async with dev_server() as client:
        with serving(llm, background_tree(threading.Event())) as server:
            result = await temporal_run(client, live_config(server.base_url), tmp_path, {KEY_ENV: KEY})
            seen = list(server.seen)
        assert (result.stop_reason, result.output) == ("completed", "NOTED")
        assert len(seen) >= 4 and {s.authorization for s in seen} == {f"Bearer {KEY}"}
        [child] = [s["sessionId"] for s in result.subagents]
        histories = [await client.get_workflow_handle(w).fetch_history()
                     for w in (result.root_session_id, child_workflow_id(result.root_session_id, child))]
        dumped = [history_text(h.to_json()) for h in histories]
        assert TASK in dumped[0] and all(PROMPT in d for d in dumped)  # decoded: the inputs are readable
        assert all(KEY not in d for d in dumped)
        files = [p for p in tmp_path.rglob("*") if p.is_file()]
        assert any(p.name == "session.jsonl" for p in files)
        assert not [p for p in files if KEY.encode() in p.read_bytes()]


async def test_provider_failures_end_turns_as_on_the_local_engine(llm: respx.MockRouter, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A 503 before the first event is retried inside the turn (`llm/retry`, then the reply); a
    401 is not retried and ends the turn `error` AUTH: the same facts on both engines."""
    def flaky() -> Callable[[dict[str, Any]], Reply]:
        calls: list[int] = []

        def reply(body: dict[str, Any]) -> Reply:
            calls.append(1)
            return error(503, retry_after="0") if len(calls) == 1 else text("RECOVERED")
        return reply

    def refused(body: dict[str, Any]) -> Reply:
        return error(401, code="invalid_api_key")

    async with dev_server() as client:
        for script, wanted in ((flaky, ("completed", "RECOVERED", None)), (lambda: refused, ("error", "", "AUTH"))):
            outcomes = []
            for engine in ("local", "temporal"):
                with serving(llm, script()) as server:
                    config, home = live_config(server.base_url), tmp_path / f"{engine}-{uuid.uuid4().hex[:6]}"
                    if engine == "local":
                        result = await local_run(config, home, monkeypatch)
                    else:
                        result = await temporal_run(client, config, home, {KEY_ENV: KEY})
                    asked = len(server.seen)
                events = SessionStore(home).read(result.root_session_id).events
                retries = [(e["data"]["attempt"], e["data"]["code"]) for e in events if e["type"] == "llm/retry"]
                code = (result.error or {}).get("code")
                outcomes.append(((result.stop_reason, result.output, code), retries, asked, settlement_facts(flow_of(home, result))))
            assert outcomes[0] == outcomes[1]
            assert outcomes[0][0] == wanted
            assert outcomes[0][1:3] == (([(1, "PROVIDER_UNAVAILABLE")], 2) if wanted[2] is None else ([], 1))


async def test_a_worker_without_the_key_refuses_the_turn_once_with_missing_api_key(llm: respx.MockRouter, tmp_path: Path) -> None:
    """The local engine's typed error (exit 2, naming the variable), from the worker's side, and
    not retried: a turn that cannot get its key fails at once instead of five times."""
    async with dev_server() as client:
        with scripted_server(one_shot_tree()) as server:  # not served: no route through the mock
            config = live_config(server.base_url)
            started: list[str] = []
            with pytest.raises(ConfigError) as raised:
                await temporal_run(client, config, tmp_path, {}, started)
            assert server.seen == []
        assert raised.value.code == "MISSING_API_KEY" and KEY_ENV in raised.value.message
        [root] = started
        attempts = []
        for events in await with_turn_runs(client, root):  # the root's turn runs in a workflow of its own
            turns = {e.event_id for e in events if e.HasField("activity_task_scheduled_event_attributes")
                     and e.activity_task_scheduled_event_attributes.activity_type.name == "dsh.turn"}
            attempts += [e.activity_task_started_event_attributes.attempt for e in events
                         if e.HasField("activity_task_started_event_attributes")
                         and e.activity_task_started_event_attributes.scheduled_event_id in turns]
        assert attempts == [1]


async def test_a_live_turn_heartbeats_per_streamed_chunk(llm: respx.MockRouter, tmp_path: Path) -> None:
    """`run_turn` itself with the worker's live provider: one beat for the delivery, then one per
    chunk of the stream (six text deltas, the usage and the finish), none from the key's side."""
    pieces = [f"p{i} " for i in range(6)]

    def reply(body: dict[str, Any]) -> Reply:
        return Reply(sse(*(delta(content=p) for p in pieces), finish("stop"), usage(10, 5), "[DONE]"))

    with serving(llm, reply) as server:
        config = live_config(server.base_url)
        run = RunSpec(home=str(tmp_path), root_id="session-00000000-0000-4000-8000-000000000001", model="live-test")
        spec = TurnInput(agent=TreeInput(run=run, session_id=run.root_id),
                         deliveries=[Delivery(dict(user_message(TASK, {"kind": "user"})))], offset=0)
        link = RecordingLink()
        result = await run_turn(spec, link, live=LiveModel(config.model, {KEY_ENV: KEY}))
    assert (result.stop_reason, result.output) == ("completed", "".join(pieces))
    assert link.beats == 1 + len(pieces) + 2
    assert [s.authorization for s in server.seen] == [f"Bearer {KEY}"]


# -- a worker SIGKILLed mid-turn (issue 12 item 5, live) ----------------------------------------------


def dsh_worker(address: str, queue: str, base_url: str, cwd: Path) -> AbstractContextManager[subprocess.Popen[bytes]]:
    """`dsh worker` in its own process group, with its own model settings and key."""
    return faults_worker(address, queue, cwd, DSH_MODEL__BASE_URL=base_url, DSH_MODEL__API_KEY_ENV=KEY_ENV,
                         **{KEY_ENV: KEY})


async def killed_mid_request(tmp_path: Path, base_url: str, gate: Gate) -> RunResult:
    """Run the tree on a `dsh worker`; once the gated request is in flight (the server has it),
    SIGKILL the worker, let the gated reply go (to nobody) and finish the tree on a second worker."""
    async with dev_server() as client:
        address = client.service_client.config.target_host
        queue = f"live-kill-{uuid.uuid4().hex[:8]}"
        config = live_config(base_url, heartbeat=2.0)
        request = RunRequest(home=tmp_path / "home", config=config, task=TASK)
        with dsh_worker(address, queue, base_url, tmp_path) as first:
            task = asyncio.create_task(run_tree_temporal(request, TemporalConfig(task_queue=queue), client=client))
            assert await asyncio.to_thread(gate.arrived.wait, BACKSTOP)
            os.killpg(first.pid, signal.SIGKILL)  # the worker and nothing else: its own session
            assert await asyncio.to_thread(first.wait) == -signal.SIGKILL
        gate.let_go.set()
        assert not task.done()
        with dsh_worker(address, queue, base_url, tmp_path):
            return await asyncio.wait_for(task, BACKSTOP)


def inserted(store: SessionStore, session_id: str) -> list[dict[str, Any]]:
    return [m for e in store.read(session_id).events if e["type"] == "agent/inbox/spliced"
            for m in e["data"].get("inserted") or []]


async def test_a_retried_live_turn_does_not_resend_a_reply_its_log_holds(tmp_path: Path) -> None:
    """Killed while step 2's request is in flight: step 1's reply (a tool call, run, its result
    logged) is never requested again; the retry continues the cut-off turn from the log, so the
    model is asked three times in all, the task once."""
    gate = Gate()

    def reply(body: dict[str, Any]) -> Reply:
        if last(body)["role"] == "user" and last(body)["content"] == TASK:
            return tool_call("look", "list_agents", {})
        if last(body)["role"] == "tool":
            return gate.hold(text("LOOKED"))
        return text("DONE")

    with scripted_server(reply) as server:  # asked by `dsh worker`s, not by this process
        result = await killed_mid_request(tmp_path, server.base_url, gate)
        seen = [s.body for s in server.seen]
    assert (result.stop_reason, result.output, result.violations) == ("completed", "DONE", [])
    assert [last(b)["role"] for b in seen] == ["user", "tool", "user"]
    assert [b for b in seen if last(b).get("content") == TASK] == [seen[0]]  # the task's request once
    assert last(seen[2])["content"] == continuation_message()["content"][0]["text"]
    calls = [m for m in seen[2]["messages"] if m["role"] == "assistant" and m.get("tool_calls")]
    assert [c["tool_calls"][0]["id"] for c in calls] == ["look"]  # the recorded reply, once
    assert [m["role"] for m in seen[2]["messages"]].count("tool") == 1
    store = SessionStore(tmp_path / "home")
    assert [m["source"] for m in inserted(store, result.root_session_id)] == [
        {"kind": "user"}, continuation_message()["source"]]


async def test_a_worker_killed_mid_one_shot_child_completes_the_tree_once(tmp_path: Path) -> None:
    """One-shot children stay in the calling turn's activity (README "One-shot children"): killed
    while the helper's request is in flight, the retried root turn repairs the dangling call
    (TOOL_OUTCOME_UNKNOWN, as `dsh run --resume` would) and continues; the helper is not run
    again, the task's request is not re-sent, no notice exists (a one-shot child sends none)."""
    gate = Gate()
    with scripted_server(one_shot_tree(gate)) as server:  # asked by `dsh worker`s
        result = await killed_mid_request(tmp_path, server.base_url, gate)
        seen = [s.body for s in server.seen]
    assert (result.stop_reason, result.output, result.violations) == ("completed", "DONE", [])
    assert [first_user_text(b) for b in seen] == [TASK, PROMPT, TASK]
    assert last(seen[2])["content"] == continuation_message()["content"][0]["text"]
    store = SessionStore(tmp_path / "home")
    root = store.read(result.root_session_id).events
    results = [e["data"] for e in root if e["type"] == "tool/result"]
    assert [(r["callId"], (r.get("error") or {}).get("code")) for r in results] == [("fg", "TOOL_OUTCOME_UNKNOWN")]
    sources = [m["source"]["kind"] for m in inserted(store, result.root_session_id)]
    assert sources == ["user", continuation_message()["source"]["kind"]]  # no notice, nothing twice
    [helper] = [p.name for p in (tmp_path / "home" / "sessions").iterdir() if p.name != result.root_session_id]
    helper_events = store.read(helper).events
    assert [e["data"]["mode"] for e in helper_events if e["type"] == "subagent/descriptor"] == ["one-shot"]
    assert [e["data"]["turn"] for e in helper_events if e["type"] == "turn/start"] == [1]
