"""Replies served whole (issue 13, `ReplayProvider.ready`): a message or error reply is fed to the
step without a stream; a hang, an exhausted script or an unbound session still go through `stream`.

Each case runs a real Agent over a SessionStore twice, once with the provider as shipped and once
with `ready` hidden (so every reply is streamed as before), and the two logs must agree event for
event once ids and times are set aside.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dsh.loader.agent import Agent, AgentRegistry, user_message
from dsh.loader.models import ReplayProvider
from dsh.loader.session import SessionStore, make_header, validate_log
from dsh.loader.transcripts import load_transcript

BACKSTOP_SECONDS = 5.0


class StreamingOnly(ReplayProvider):
    """The replay provider as it was: every reply through `stream`."""

    ready = None  # type: ignore[assignment]


REPLIES: list[dict[str, Any]] = [
    {"reasoning": "why", "text": "one", "usage": {"inputTokens": 3, "outputTokens": 4}},
    {"text": "partial", "error": {"code": "scripted-overload", "message": "busy", "status": 529}},
    {"text": "three {{session:root}}"},
]


def transcript_file(tmp_path: Path, replies: list[dict[str, Any]]) -> Path:
    path = tmp_path / "t.yaml"
    path.write_text(json.dumps({"version": 1, "name": "t", "task": "x", "agents": {"root": {"replies": replies}}}))
    return path


async def run(home: Path, provider: ReplayProvider, prompts: int) -> list[dict[str, Any]]:
    store = SessionStore(home, batch_delay_ms=0, fsync=False, inline_io=True)
    session = await store.create(make_header("session-ready"))
    provider.bind_root(session.id)
    agent = Agent(session, store=store, provider=provider, registry=AgentRegistry())
    for i in range(prompts):
        agent.followup(user_message(f"prompt {i}"))
        await agent.when_idle()
    await agent.dispose()
    validate_log(session.events)
    return session.events


def comparable(events: list[dict[str, Any]]) -> list[Any]:
    """The log without times and message ids (generated afresh per run), ids numbered in order of first use."""
    text = json.dumps([{k: v for k, v in e.items() if k != "time"} for e in events], sort_keys=True)
    for n, message_id in enumerate(dict.fromkeys(m for e in events for m in _ids(e["data"]))):
        text = text.replace(message_id, f"<id{n}>")
    return json.loads(text)


def _ids(data: Any) -> list[str]:
    if isinstance(data, dict):
        own = [data["id"]] if "role" in data and isinstance(data.get("id"), str) else []
        return own + [i for v in data.values() for i in _ids(v)]
    if isinstance(data, list):
        return [i for v in data for i in _ids(v)]
    return []


@pytest.mark.parametrize("prompts", [3, 4])  # 4: the script is exhausted on the last prompt
async def test_a_reply_served_whole_logs_what_the_stream_logged(tmp_path: Path, prompts: int) -> None:
    path = transcript_file(tmp_path, REPLIES)
    whole = ReplayProvider(load_transcript(path))
    streamed = StreamingOnly(load_transcript(path))

    events = await run(tmp_path / "whole", whole, prompts)
    reference = await run(tmp_path / "streamed", streamed, prompts)

    assert comparable(events) == comparable(reference)
    ends = [e["data"]["reason"] for e in events if e["type"] == "turn/end"]
    assert ends[1] == {"kind": "error", "error": {"code": "scripted-overload", "message": "busy", "status": 529}}
    assert [e["data"]["message"]["content"] for e in events if e["type"] == "assistant/message"] == [
        [{"type": "reasoning", "text": "why"}, {"type": "text", "text": "one"}],
        [{"type": "text", "text": "three session-ready"}],
    ]
    if prompts == 4:
        assert ends[3]["error"]["code"] == "REPLAY_SCRIPT_EXHAUSTED"
    assert whole.violations == streamed.violations


async def test_ready_leaves_hangs_exhausted_scripts_and_unbound_sessions_to_the_stream(tmp_path: Path) -> None:
    from dsh.loader.abort import AbortController
    from dsh.loader.models import ModelRequest

    provider = ReplayProvider(load_transcript(transcript_file(tmp_path, [{"text": "a"}, {"hang": {"text": "h"}}])))
    provider.bind_root("root-session")
    signal = AbortController().signal

    def request(session_id: str = "root-session") -> ModelRequest:
        return ModelRequest(session_id=session_id, turn=1, step=1, system="", messages=[], tools=[], model="m")

    assert provider.ready(request("nobody"), signal) is None
    served = provider.ready(request(), signal)
    assert served is not None and served[1] is None
    assert provider.ready(request(), signal) is None  # the hang: not consumed here
    assert provider.ready(request(), signal) is None  # still the hang: the cursor did not move
    assert provider.violations == []


class Recording(StreamingOnly):
    """Streams every reply and keeps what each request carried."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.seen: list[list[dict[str, Any]]] = []

    def stream(self, request: Any, signal: Any, on_retry: Any) -> Any:
        self.seen.append(request.messages)
        return super().stream(request, signal, on_retry)


async def test_a_streaming_provider_gets_the_messages_of_its_request_and_a_list_of_its_own(tmp_path: Path) -> None:
    """The loop copies the messages only for `stream` (issue 13); they are the log's messages up to
    the request, in a fresh list: later steps neither grow nor share it."""
    provider = Recording(load_transcript(transcript_file(tmp_path, [{"text": "a"}, {"text": "b"}, {"text": "c"}])))

    events = await run(tmp_path / "home", provider, 3)

    requests = [e["data"] for e in events if e["type"] == "llm/request"]
    assert [len(m) for m in provider.seen] == [r["messageCount"] for r in requests] == [1, 3, 5]
    texts = [[block["text"] for message in m for block in message["content"]] for m in provider.seen]
    assert texts == [["prompt 0"], ["prompt 0", "a", "prompt 1"], ["prompt 0", "a", "prompt 1", "b", "prompt 2"]]
    assert len({id(m) for m in provider.seen}) == 3
