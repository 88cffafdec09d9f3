"""The real provider under a whole tree (SPEC §13.2, §15.5, §17.1; matrix rows 90 and 97).

A respx route plays the model: one side-effect function reads each chat-completions JSON body and
answers with SSE, so the root, its background child and the settlement notice all travel through
`OpenAICompatibleProvider`, a real `httpx.AsyncClient`, the agent loop and the JSONL store. The
function tells the agents apart by what the runtime sends: continuable children get the Reporting
section in their system prompt, the root does not; the root's replies depend on whether its
conversation already holds a tool result or a settlement notice.

Ordering is by facts, never by time. A background child races its parent's second step, so the
child's SSE body withholds its first byte until the root's log holds `turn/end` for turn 1 (seen
through an agent hook): the notice then reaches an idle root and opens turn 2, like scenario (b).
The one clock in this file measures how soon a stalled stream is closed after an interrupt; the
issue asks for that number, and the assertion on it is deliberately generous.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import stat
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
from tree_kit import reach
from typer.testing import CliRunner

from dsh.loader.agent import Agent, AgentOptions, user_message
from dsh.loader.config import Config
from dsh.loader.headless import RunRequest, RunResult, Tree, run_tree
from dsh.loader.models import OpenAICompatibleProvider
from dsh.loader.models.recorder import REDACTED
from dsh.loader.session import read, validate_log
from dsh.loader.subagents import UserAuthority, interrupt
from dsh.loader.testing.flow import project
from dsh.loader.testing.normalize import normalize
from dsh.loader.testing.runner import arun_flow
from dsh.loader.texts import TEXTS, render
from dsh.loader.transcripts import load_transcript

from sse_kit import SSE_HEADERS, delta, finish, sse, usage

KEY = "sk-test-live-tree-0123456789"
TOKEN = "ghp_live_tree_token_424242"  # the value of a `*_TOKEN` variable
BASE = "https://llm.live-tree.test"
URL = f"{BASE}/chat/completions"
SPAWN_CALL = "call_live_spawn_1"
NOTICE_OUTPUT = TEXTS["T-NOTICE-OUTPUT"]
REPLAYS = 50  # issue 10: every replay of a recording gives the live run's flow


# ---- SSE ---------------------------------------------------------------------------------------


def text_reply(*pieces: str) -> bytes:
    return sse(*(delta(content=p) for p in pieces), finish("stop"), usage(20, 3), "[DONE]")


def spawn_reply(label: str, prompt: str) -> bytes:
    """A `subagent` call split the way real servers send it: id and name in the first
    `tool_calls` delta only, the arguments in pieces cut mid-token."""
    arguments = json.dumps({"label": label, "prompt": prompt})
    pieces = [arguments[i : i + 9] for i in range(0, len(arguments), 9)]
    first = {"index": 0, "id": SPAWN_CALL, "type": "function",
             "function": {"name": "subagent", "arguments": ""}}
    return sse(
        delta(role="assistant", content=""),
        delta(tool_calls=[first]),
        *(delta(tool_calls=[{"index": 0, "function": {"arguments": p}}]) for p in pieces),
        finish("tool_calls"),
        usage(40, 12),
        "[DONE]",
    )


class Body(httpx.AsyncByteStream):
    """A streaming response body. With `gate`, no byte is sent before the gate opens; with `stall`,
    after its pieces it sets `stalled` and waits on `never`, which nobody sets."""

    def __init__(self, *pieces: bytes, gate: asyncio.Event | None = None, stall: bool = False) -> None:
        self.pieces = pieces
        self.gate = gate
        self.stall = stall
        self.stalled = asyncio.Event()
        self.never = asyncio.Event()
        self.closed = asyncio.Event()
        self.closed_at: float | None = None
        self.unwound = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            if self.gate is not None:
                await self.gate.wait()
            for piece in self.pieces:
                yield piece
            if self.stall:
                self.stalled.set()
                await self.never.wait()
        finally:
            self.unwound = True

    async def aclose(self) -> None:
        if self.closed_at is None:
            self.closed_at = time.perf_counter()
        self.closed.set()


def ok(body: Body) -> httpx.Response:
    return httpx.Response(200, headers=SSE_HEADERS, stream=body)


# ---- the scripted model --------------------------------------------------------------------------


class Model:
    """The respx side effect: answers each request from its JSON body.

    - child (Reporting section in the system prompt) → `child()`;
    - root whose conversation holds a settlement notice → `ROOT_GOT_<last line of the notice>`;
    - root with a tool result → `STARTED`;
    - root otherwise → one `subagent` call starting `label` with `prompt`.
    """

    def __init__(self, *, prompt: str = "Reply with CHILD_DONE.", label: str = "live child",
                 child: Callable[[Model], Body] | None = None) -> None:
        self.prompt = prompt
        self.label = label
        self.child = child or (lambda model: Body(text_reply("CHILD_", "DONE"), gate=model.root_turn_1_ended))
        self.root_turn_1_ended = asyncio.Event()
        self.requests: list[tuple[str, dict[str, Any]]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        messages = body["messages"]
        assert messages[0]["role"] == "system"
        if TEXTS["T-SYSTEM-REPORTING"] in messages[0]["content"]:
            kind, response = "child", self.child(self)
        else:
            notices = [m["content"] for m in messages if m["role"] == "user" and NOTICE_OUTPUT in m["content"]]
            if notices:
                kind = "notice"
                response = Body(text_reply("ROOT_GOT_", notices[-1].splitlines()[-1]))
            elif any(m["role"] == "tool" for m in messages):
                kind, response = "started", Body(text_reply("STAR", "TED"))
            else:
                kind, response = "spawn", Body(spawn_reply(self.label, self.prompt))
        self.requests.append((kind, body))
        return ok(response)

    def watch(self, agent: Agent) -> None:
        """Agent hook: opens the child's gate once the root's log holds `turn/end` for turn 1."""
        if agent.header.get("parentSession") is not None:
            return

        def on_event(event: dict[str, Any]) -> None:
            if event["type"] == "turn/end" and event["data"]["turn"] == 1:
                self.root_turn_1_ended.set()

        agent.session.subscribe(on_event)


def live_config() -> Config:
    return Config.model_validate({"model": {"baseUrl": BASE}, "persistence": {"batchDelayMs": 0, "fsync": False}})


def live_provider() -> OpenAICompatibleProvider:
    return OpenAICompatibleProvider(base_url=BASE, model="deepseek-chat", api_key=KEY, max_attempts=1)


def logs(home: Path) -> dict[str, list[dict[str, Any]]]:
    """Every session log under `home`, validated (§5.2 invariants), by session id."""
    out = {}
    for path in sorted((home / "sessions").glob("*/session.jsonl")):
        events = read(path).events
        validate_log(events)
        out[path.parent.name] = events
    return out


def of_type(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e["data"] for e in events if e["type"] == kind]


def inserted_notices(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [m for splice in of_type(events, "agent/inbox/spliced") for m in splice.get("inserted", [])
            if m.get("source", {}).get("kind") == "subagent-settled"]


def redacted(value: Any, secrets: tuple[str, ...]) -> Any:
    if isinstance(value, str):
        for secret in secrets:
            value = value.replace(secret, REDACTED)
        return value
    if isinstance(value, dict):
        return {k: redacted(v, secrets) for k, v in value.items()}
    if isinstance(value, list):
        return [redacted(v, secrets) for v in value]
    return value


# ---- a parent and a background child over the wire -----------------------------------------------


async def test_a_tool_call_round_trip_through_a_parent_and_a_background_child(llm, home):
    model = Model()
    route = llm.post(URL).mock(side_effect=model)
    result = await reach(run_tree(RunRequest(
        home=home, config=live_config(), task="Start a background child, then tell me what it said.",
        provider=live_provider(), agent_hooks=[model.watch],
    )))
    assert isinstance(result, RunResult)

    assert (result.stop_reason, result.exit_code, result.output) == ("completed", 0, "ROOT_GOT_CHILD_DONE")
    assert result.violations == [] and result.error is None
    kinds = [kind for kind, _ in model.requests]
    assert route.call_count == 4 and Counter(kinds) == {"spawn": 1, "child": 1, "started": 1, "notice": 1}
    assert kinds[0] == "spawn" and kinds[-1] == "notice"
    for _, body in model.requests:
        assert body["stream"] is True and body["model"] == "deepseek-chat"
    assert route.calls[0].request.headers["authorization"] == f"Bearer {KEY}"

    sessions = logs(home)
    assert set(sessions) == {result.root_session_id, *(c["sessionId"] for c in result.subagents)}
    assert len(sessions) == 2
    child_id = next(sid for sid in sessions if sid != result.root_session_id)
    root, child = sessions[result.root_session_id], sessions[child_id]

    # The split deltas became one call with the exact arguments, run by the real `subagent` tool.
    first = of_type(root, "assistant/message")[0]
    assert first["finish"] == "tool-calls"
    assert [b for b in first["message"]["content"] if b["type"] == "tool-call"] == [{
        "type": "tool-call", "id": SPAWN_CALL, "name": "subagent",
        "arguments": json.dumps({"label": "live child", "prompt": "Reply with CHILD_DONE."}),
    }]
    assert of_type(child, "subagent/descriptor")[0]["spawnCallId"] == SPAWN_CALL

    # The child answered without tools and settled once; the root heard exactly one notice.
    [answer] = of_type(child, "assistant/message")
    assert answer["message"]["content"] == [{"type": "text", "text": "CHILD_DONE"}]
    assert answer["finish"] == "stop" and not answer.get("interrupted")
    assert of_type(child, "tool/call") == []
    assert [e["reason"] for e in of_type(child, "turn/end")] == [{"kind": "completed"}]
    [notice] = inserted_notices(root)
    assert notice["source"]["senderSessionId"] == child_id and notice["source"]["stopReason"] == "completed"

    # The root's last request carried the settlement notice with the child's answer.
    last = model.requests[-1][1]["messages"][-1]
    assert last["role"] == "user"
    assert render("T-NOTICE-completed", id=child_id) in last["content"]
    assert last["content"].endswith(f"{NOTICE_OUTPUT}\n\nCHILD_DONE")  # text blocks joined by a blank line
    # The root's turn 1 ended before the child answered (the gate), so the notice opened turn 2.
    assert [e["turn"] for e in of_type(root, "turn/end")] == [1, 2]


# ---- matrix 90: record, then replay keylessly -----------------------------------------------------


async def test_m90_a_recorded_live_run_replays_to_the_same_flow(llm, home, tmp_path, monkeypatch):
    """Matrix 90: `record=` builds the provider from the environment and wraps it in a `Recorder`
    (§17.1); the written file holds no secret, is 0600 and replays keylessly to the same flow."""
    monkeypatch.setenv("DEEPSEEK_API_KEY", KEY)
    monkeypatch.setenv("LIVE_TREE_TOKEN", TOKEN)
    # The key travels inside the model's own tool-call arguments (the child's prompt), the token
    # inside the task: both are user-visible strings that the recording must not keep.
    model = Model(prompt=f"Reply with CHILD_DONE. Use the credential {KEY} if asked.")
    llm.post(URL).mock(side_effect=model)
    rec = tmp_path / "rec.yaml"
    task = f"Start a background child, then tell me what it said. Deploy token: {TOKEN}"
    result = await reach(run_tree(RunRequest(
        home=home, config=live_config(), task=task, record=rec, agent_hooks=[model.watch],
    )))
    assert isinstance(result, RunResult)
    assert (result.stop_reason, result.exit_code, result.output) == ("completed", 0, "ROOT_GOT_CHILD_DONE")
    assert [kind for kind, _ in model.requests].count("child") == 1

    text = rec.read_text()
    assert KEY not in text and TOKEN not in text
    assert stat.S_IMODE(rec.stat().st_mode) == 0o600
    script = load_transcript(rec).spec
    assert script.name == "rec" and script.task == task.replace(TOKEN, REDACTED)
    assert list(script.agents) == ["root", "child-1"]
    assert script.agents["child-1"].spawned_by == SPAWN_CALL
    [spawn_call] = script.agents["root"].replies[0].tool_calls or []
    assert spawn_call.arguments == {"label": "live child",
                                    "prompt": f"Reply with CHILD_DONE. Use the credential {REDACTED} if asked."}
    assert [r.text for r in script.agents["root"].replies[1:]] == ["STARTED", "ROOT_GOT_CHILD_DONE"]
    assert [r.text for r in script.agents["child-1"].replies] == ["CHILD_DONE"]

    # The live run was ordered by gating the child's response on the root's turn 1 ending; the
    # recording writes that observed order down as fences (issue 10), so the replay needs no
    # hand-written fence: the child's step waits for the root's turn 1 to end.
    assert [f.model_dump(by_alias=True, exclude_none=True) for f in script.fences] == [
        {"hold": {"agent": "child-1", "turn": 1, "step": 1, "until": {"turnEnded": {"agent": "root", "turn": 1}}}}]
    live = project(home, result.root_session_id, result, result.violations, script.name)
    # The one allowed difference: the replay saw `[redacted]` where the live run saw the key and
    # the token (the task, the child's prompt and everything quoting them), so the live flow is
    # compared after the same redaction. Everything else — ids by role, queues, claims, the notice's
    # `insertedAt: idle` and its claim in root turn 2 — must be equal, in every one of 50 replays.
    expected = normalize(redacted(live, (KEY, TOKEN)))
    for run in range(REPLAYS):
        replayed = await arun_flow(rec, home=tmp_path / f"replay-home-{run}")
        assert replayed == expected, f"replay {run + 1} differs from the live run"
    assert [t["turn"] for t in replayed["sessions"][0]["turns"]] == [1, 2]
    assert replayed["notices"][0]["insertedAt"] == "idle"


async def test_a_recorded_notice_steered_into_a_running_step_replays_to_the_live_flow(llm, home, tmp_path, monkeypatch):
    """Issue 10 item 3: live, the child's reply is released when the root's second request arrives,
    and the root's second reply only once the notice is in its inbox, so the notice is steered into
    root step 2's next-step queue and step 3 enters it. The recording's fences reproduce that claim
    in 50 replays (the insert position inside step 2 is the one known gap, below)."""
    monkeypatch.setenv("DEEPSEEK_API_KEY", KEY)
    second_request = asyncio.Event()
    notice_in = asyncio.Event()

    class Steered(Model):
        def __call__(self, request: httpx.Request) -> httpx.Response:
            body = json.loads(request.content)
            messages = body["messages"]
            is_child = TEXTS["T-SYSTEM-REPORTING"] in messages[0]["content"]
            has_notice = any(m["role"] == "user" and NOTICE_OUTPUT in m["content"] for m in messages)
            if not is_child and not has_notice and any(m["role"] == "tool" for m in messages):
                second_request.set()
                self.requests.append(("started", body))
                return ok(Body(text_reply("STAR", "TED"), gate=notice_in))
            return super().__call__(request)

    model = Steered(child=lambda m: Body(text_reply("CHILD_", "DONE"), gate=second_request))

    def watch(agent: Agent) -> None:
        if agent.header.get("parentSession") is None:
            agent.session.subscribe(lambda e: notice_in.set() if e["type"] == "agent/inbox/spliced" and any(
                x.get("source", {}).get("kind") == "subagent-settled" for x in e["data"].get("inserted", [])) else None)

    llm.post(URL).mock(side_effect=model)
    rec = tmp_path / "steered.yaml"
    result = await reach(run_tree(RunRequest(home=home, config=live_config(), task="Start a child.", record=rec,
                                             agent_hooks=[watch])))
    assert isinstance(result, RunResult) and result.output == "ROOT_GOT_CHILD_DONE"
    live = normalize(project(home, result.root_session_id, result, result.violations, "steered"))
    [notice] = live["notices"]
    assert (notice["queue"], notice["insertedAt"], notice["claimedAt"]) == (
        "next-step", {"turn": 1, "lastStep": 2}, {"turn": 1, "step": 3})

    assert load_transcript(rec).spec.fences, "the recording holds the observed order"
    # Not yet reproduced: *where inside* root step 2 the notice arrived. Live it came during step
    # 2's model request (after its `step/start`: `lastStep: 2`); a `hold` fence sits in the pre-step,
    # before `step/start`, so the replay inserts it while step 2 is held (`lastStep: 1`). Pinning
    # that needs a fence that delays a reply, not a pre-step. Everything else, including the claim
    # (queue next-step, root turn 1 step 3), equals the live flow in every replay.
    def without_insert_position(flow: Any) -> Any:
        data = json.loads(json.dumps(getattr(flow, "data", flow)))
        for n in data["notices"]:
            n.pop("insertedAt")
        return data

    for run in range(REPLAYS):
        replayed = await arun_flow(rec, home=tmp_path / f"replay-home-{run}")
        assert without_insert_position(replayed) == without_insert_position(live), f"replay {run + 1} differs"
        assert replayed["notices"][0]["insertedAt"] == {"turn": 1, "lastStep": 1}


# ---- matrix 97 under a tree: a stalled stream is closed at once -----------------------------------


async def test_m97_interrupting_a_live_child_closes_its_stalled_stream_at_once(llm, home):
    """Matrix 97: the child's stream yields one chunk and then stalls forever; `interrupt` with
    user authority ends its turn `aborted` (cause user) while the stall is still pending, the
    partial text is logged `interrupted: true`, and the response is closed before the child's turn
    ends (the turn does not wait on the stall). The latency is printed, not asserted."""
    stalling = Body(sse(delta(content="partial ")), stall=True)
    model = Model(label="slow child", prompt="Stream slowly.", child=lambda _model: stalling)
    llm.post(URL).mock(side_effect=model)
    turn_ended_at: dict[str, float] = {}
    closed_at_turn_end: dict[str, bool] = {}

    def clock_turn_ends(agent: Agent) -> None:
        def on_event(event: dict[str, Any]) -> None:
            if event["type"] == "turn/end":
                turn_ended_at.setdefault(agent.id, time.perf_counter())
                closed_at_turn_end.setdefault(agent.id, stalling.closed.is_set())

        agent.session.subscribe(on_event)

    provider = live_provider()
    tree = Tree(home=home, provider=provider, options=AgentOptions(model="deepseek-chat"))
    tree.agent_hooks.append(clock_turn_ends)
    root = await tree.create_root()
    try:
        root.followup(user_message("Start a child that streams slowly, then report how it ended."))
        await reach(stalling.stalled)
        [child_id] = list(tree.manager.activations)

        started = time.perf_counter()
        interrupt(tree.manager, child_id, UserAuthority(root.id))
        await reach(stalling.closed)
        assert stalling.closed_at is not None
        close_latency = stalling.closed_at - started
        await reach(tree.wait_quiet(root))
        turn_end_latency = turn_ended_at[child_id] - started
        print(f"\nstalled stream closed {close_latency * 1000:.2f} ms after interrupt; "
              f"child turn/end after {turn_end_latency * 1000:.2f} ms")
        assert closed_at_turn_end[child_id], "the child's turn ended before its stalled stream was closed"
        assert not stalling.never.is_set() and stalling.unwound  # the stall itself never ended
    finally:
        await tree.shutdown(root)

    sessions = logs(home)
    child = sessions[child_id]
    assert [e["reason"] for e in of_type(child, "turn/end")] == [{"kind": "aborted", "reason": {"kind": "user"}}]
    [partial] = of_type(child, "assistant/message")
    assert partial["interrupted"] is True and "finish" not in partial
    assert partial["message"]["content"] == [{"type": "text", "text": "partial "}]
    [notice] = inserted_notices(sessions[root.id])
    assert notice["source"]["stopReason"] == "aborted"
    answers = of_type(sessions[root.id], "assistant/message")
    assert answers[-1]["message"]["content"][-1]["text"].startswith("ROOT_GOT_")
    assert [kind for kind, _ in model.requests].count("child") == 1  # nothing was retried


# ---- `dsh run TASK --record FILE` -----------------------------------------------------------------


def test_dsh_run_record_writes_a_private_redacted_transcript(llm, tmp_path):
    """§15.5 through the CLI: respx patches httpx in-process, so `CliRunner` reaches the route."""
    from dsh.cli.main import app

    route = llm.post(URL).mock(side_effect=lambda request: ok(Body(text_reply("RECORDED ", "ANSWER"))))
    short = Path(tempfile.mkdtemp(prefix="dsh-rec-", dir="/tmp"))  # a short path for the control socket
    rec = tmp_path / "cli-run.yaml"
    env: dict[str, str | None] = {name: None for name in os.environ if name.upper().startswith("DSH_")}
    env.update({"DEEPSEEK_API_KEY": KEY, "DSH_MODEL__BASE_URL": BASE, "DSH_PERSISTENCE__BATCH_DELAY_MS": "0",
                "DSH_PERSISTENCE__FSYNC": "false"})
    try:
        result = CliRunner().invoke(app, ["run", f"Say it. ({KEY})", "--record", str(rec),
                                          "--home", str(short / "h")], env=env)
        assert (result.exit_code, result.stdout, result.stderr) == (0, "RECORDED ANSWER\n", "")
        logs(short / "h")
    finally:
        shutil.rmtree(short, ignore_errors=True)
    assert route.call_count == 1
    assert stat.S_IMODE(rec.stat().st_mode) == 0o600
    assert KEY not in rec.read_text()
    script = load_transcript(rec).spec
    assert script.name == "cli-run" and script.task == f"Say it. ({REDACTED})"
    assert [(r.text, r.finish) for r in script.agents["root"].replies] == [("RECORDED ANSWER", "stop")]
