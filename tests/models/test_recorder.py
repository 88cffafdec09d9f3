"""Record mode (SPEC §13.3, §15.5; matrix row 90): the recorder around the real provider.

A scripted conversation is served by respx as SSE; the recorder wraps the real
`OpenAICompatibleProvider`, must pass every chunk through unchanged, and must write a transcript
that loads, validates and replays (through `ReplayProvider`) to the same assembled messages. The
stalling body sets `stalled` when the provider is blocked on it; tests abort only after that.
"""

from __future__ import annotations

import asyncio
import json
import os
import stat
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from dsh.loader.abort import AbortController, Aborted, AbortSignal
from dsh.loader.errors import ProviderError
from dsh.loader.models import (
    Assembler,
    Chunk,
    ModelRequest,
    OpenAICompatibleProvider,
    Recorder,
    ReplayProvider,
    TextDelta,
)
from dsh.loader.models.recorder import REDACTED, secrets_from_env
from dsh.loader.transcripts import load_transcript

from sse_kit import SSE_HEADERS, delta, sse, usage

KEY = "sk-record-key-42424242"
TOKEN = "ghp_tokenvalue_9999"
URL = "https://llm.example.test/chat/completions"
SPAWN = {"version": 1, "mode": "continuable", "provider": "spawn", "label": "counter",
         "spawnCallId": "call_spawn"}


class Body(httpx.AsyncByteStream):
    def __init__(self, *pieces: bytes, stall: bool = False) -> None:
        self.pieces, self.stall = pieces, stall
        self.stalled = asyncio.Event()
        self.closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for piece in self.pieces:
            yield piece
        if self.stall:
            self.stalled.set()
            await asyncio.Event().wait()

    async def aclose(self) -> None:
        self.closed = True


def ok(*pieces: bytes, stall: bool = False) -> httpx.Response:
    return httpx.Response(200, headers=SSE_HEADERS, stream=Body(*pieces, stall=stall))


def request(session_id: str) -> ModelRequest:
    return ModelRequest(session_id=session_id, turn=1, step=1, system="s", messages=[], tools=[],
                        model="deepseek-chat")


def no_retry(attempt: int, delay_ms: int, code: str, status: int | None) -> None:
    raise AssertionError("no retry expected")


async def noop_sleep(delay: float) -> None:
    return None


@pytest.fixture
async def recorder() -> AsyncIterator[Recorder]:
    provider = OpenAICompatibleProvider(base_url="https://llm.example.test", model="deepseek-chat",
                                        api_key=KEY, max_attempts=1, sleep=noop_sleep)
    rec = Recorder(provider)
    rec.note_root("root-session")
    yield rec
    await rec.aclose()


async def run(rec: Recorder | ReplayProvider, session_id: str,
              signal: AbortSignal | None = None) -> list[Chunk]:
    stream = rec.stream(request(session_id), signal or AbortController().signal, no_retry)
    return [chunk async for chunk in stream]


def assembled(chunks: list[Chunk]) -> dict[str, Any]:
    assembler = Assembler()
    for chunk in chunks:
        assembler.feed(chunk)
    result = assembler.result()
    content = [b | {"arguments": json.loads(b["arguments"])} if b["type"] == "tool-call" else b
               for b in result.content]
    return {"content": content, "finish": result.finish,
            "usage": {k: v for k, v in (result.usage or {}).items() if k != "cacheReadTokens"}}


CONVERSATION = [
    ("root-session", sse(
        delta(reasoning_content="I should delegate."),
        delta(content="Starting a counter.\nOne moment."),
        delta(tool_calls=[{"index": 0, "id": "call_spawn", "type": "function",
                           "function": {"name": "subagent", "arguments": '{"label": "coun'}}]),
        delta(tool_calls=[{"index": 0, "function": {"arguments": 'ter", "prompt": "count"}'}}]),
        delta(finish="tool_calls"), usage(20, 9, prompt_cache_hit_tokens=1), "[DONE]")),
    ("child-session", sse(delta(content="3 files"), delta(finish="stop"), usage(8, 2, prompt_cache_hit_tokens=1), "[DONE]")),
    ("root-session", sse(delta(content="Done: 3 files."), delta(finish="stop"), usage(30, 4, prompt_cache_hit_tokens=1),
                         "[DONE]")),
]


async def test_a_recorded_run_writes_a_transcript_that_replays_to_the_same_messages(
    llm, recorder, tmp_path
):
    """Matrix 90: record against respx-served SSE, then replay the written file."""
    llm.post(URL).mock(side_effect=[ok(body) for _, body in CONVERSATION])
    recorder.note_child("child-session", SPAWN)
    live = []
    for session_id, _ in CONVERSATION:
        live.append(await run(recorder, session_id))

    doc = recorder.transcript("counting", "count the files", ["quiet-reports"])
    assert doc == {
        "version": 1, "name": "counting", "task": "count the files", "overlays": ["quiet-reports"],
        "agents": {
            "root": {"replies": [
                {"reasoning": "I should delegate.", "text": "Starting a counter.\nOne moment.",
                 "toolCalls": [{"id": "call_spawn", "name": "subagent",
                                "arguments": {"label": "counter", "prompt": "count"}}],
                 "usage": {"inputTokens": 20, "outputTokens": 9}, "finish": "tool-calls"},
                {"text": "Done: 3 files.", "usage": {"inputTokens": 30, "outputTokens": 4},
                 "finish": "stop"},
            ]},
            "child-1": {"spawnedBy": "call_spawn", "replies": [
                {"text": "3 files", "usage": {"inputTokens": 8, "outputTokens": 2}, "finish": "stop"},
            ]},
        },
    }

    path = recorder.write(tmp_path / "Counting Run.yaml", task="count the files",
                          overlays=["quiet-reports"], redact=[KEY])
    text = path.read_text()
    assert "|" in text  # the multi-line answer is a block scalar
    transcript = load_transcript(path)
    assert transcript.spec.name == "counting-run"
    replay = ReplayProvider(transcript)
    replay.bind_root("root-session")
    replay.bind_child("child-session", SPAWN)
    replayed = [await run(replay, session_id) for session_id, _ in CONVERSATION]
    assert [assembled(c) for c in replayed] == [assembled(c) for c in live]
    assert replay.finish_checks() == []


async def test_chunks_pass_through_unchanged(llm, recorder):
    llm.post(URL).mock(side_effect=[ok(CONVERSATION[0][1]), ok(CONVERSATION[0][1])])
    inner = [c async for c in recorder.inner.stream(request("x"), AbortController().signal, no_retry)]
    assert await run(recorder, "root-session") == inner


async def test_redaction_removes_the_key_and_secret_env_values_everywhere(llm, recorder, tmp_path):
    environ = {"GITHUB_TOKEN": TOKEN, "DB_SECRET": "s3cr3t-db", "DEEPSEEK_API_KEY": KEY,
               "EMPTY_KEY": "", "HOME": "/root", "TOKENS": "not-a-secret"}
    assert secrets_from_env(environ) == ["s3cr3t-db", KEY, TOKEN]
    body = sse(delta(content=f"key={KEY} token={TOKEN}"),
               delta(tool_calls=[{"index": 0, "id": "c1", "type": "function",
                                  "function": {"name": "push", "arguments": json.dumps({"auth": TOKEN})}}]),
               delta(finish="tool_calls"), "[DONE]")
    llm.post(URL).mock(return_value=ok(body))
    await run(recorder, "root-session")
    path = recorder.write(tmp_path / "rec.yaml", task=f"use {TOKEN}",
                          redact=[KEY, *secrets_from_env(environ)])
    text = path.read_text()
    assert KEY not in text and TOKEN not in text and "s3cr3t-db" not in text
    reply = load_transcript(path).spec.agents["root"].replies[0]
    assert reply.text == f"key={REDACTED} token={REDACTED}"
    assert reply.tool_calls is not None and reply.tool_calls[0].arguments == {"auth": REDACTED}
    assert "not-a-secret" not in secrets_from_env(environ)


async def test_the_file_is_written_atomically_with_mode_0600(recorder, tmp_path):
    target = tmp_path / "rec.yaml"
    target.write_text("old")
    os.chmod(target, 0o644)
    recorder.write(target, task="t")
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rec.yaml"]  # no temp file left
    assert load_transcript(target).spec.agents["root"].replies == []


async def test_provider_errors_become_error_entries_with_their_text_prefix(llm, recorder):
    llm.post(URL).mock(side_effect=[
        httpx.Response(401),
        ok(sse(delta(content="par"), delta(content="tial"), delta(finish="content_filter"))),
        ok(sse(delta(content="cut"))),
    ])
    for _ in range(3):
        with pytest.raises(ProviderError):  # the third one fails in the assembler, as in the agent
            assembled(await run(recorder, "root-session"))
    replies = recorder.transcript("e", "t")["agents"]["root"]["replies"]
    assert replies[0] == {"error": {"code": "AUTH", "message": replies[0]["error"]["message"],
                                    "status": 401}}
    assert "401" in replies[0]["error"]["message"]
    assert replies[1]["text"] == "partial" and replies[1]["error"]["code"] == "CONTENT_FILTERED"
    assert "status" not in replies[1]["error"]
    assert replies[2] == {"text": "cut", "error": {
        "code": "INCOMPLETE_STREAM", "message": "the model stream ended without a finish reason"}}


async def test_an_aborted_stream_becomes_a_hang_with_its_partial_text(llm, recorder):
    first, second = ok(sse(delta(content="partial")), stall=True), ok(stall=True)
    llm.post(URL).mock(side_effect=[first, second])
    for response, expected in ((first, {"hang": {"text": "partial"}}), (second, {"hang": {}})):
        ctrl = AbortController()
        pending = asyncio.ensure_future(run(recorder, "root-session", ctrl.signal))
        await response.stream.stalled.wait()  # type: ignore[union-attr]
        ctrl.abort({"kind": "user"})
        with pytest.raises(Aborted):
            await pending
        assert recorder.transcript("h", "t")["agents"]["root"]["replies"][-1] == expected


async def test_a_stream_closed_early_or_still_open_is_a_hang(llm, recorder):
    llm.post(URL).mock(side_effect=[ok(sse(delta(content="a"), delta(content="b"), delta(finish="stop"))),
                                    ok(sse(delta(content="open")), stall=True)])
    closed = recorder.stream(request("root-session"), AbortController().signal, no_retry)
    assert await anext(closed) == TextDelta("a")
    await closed.aclose()  # type: ignore[attr-defined]
    still_open = recorder.stream(request("root-session"), AbortController().signal, no_retry)
    assert await anext(still_open) == TextDelta("open")
    replies = recorder.transcript("h", "t")["agents"]["root"]["replies"]
    assert replies == [{"hang": {"text": "a"}}, {"hang": {"text": "open"}}]
    await still_open.aclose()  # type: ignore[attr-defined]


def test_children_are_numbered_in_creation_order_and_bind_by_call_or_order(recorder):
    recorder.note_child("c-a", {"mode": "one-shot"})
    recorder.note_child("c-b", SPAWN)
    recorder.note_child("c-c", {"mode": "continuable"})
    recorder.note_child("c-a", {"mode": "one-shot"})  # resumed: noted once
    agents = recorder.transcript("kids", "t")["agents"]
    assert agents == {
        "root": {"replies": []},
        "child-1": {"order": 1, "replies": []},
        "child-2": {"spawnedBy": "call_spawn", "replies": []},
        "child-3": {"order": 2, "replies": []},
    }


def test_multiline_and_awkward_strings_survive_the_yaml_round_trip(recorder, tmp_path: Path):
    path = recorder.write(tmp_path / "odd.yaml", task="line 1\n  indented\ttab\nbell\x07\r\nend\n\n")
    assert load_transcript(path).spec.task == "line 1\n  indented\ttab\nbell\x07\r\nend\n\n"


# ---- issue 15 finding 10: redaction is exact ------------------------------------------------------

EXACT_SPAWN = {**SPAWN, "spawnCallId": "call_xe"}


@pytest.mark.parametrize("key", ["e", "x", KEY])
async def test_redaction_is_exact_so_any_key_leaves_a_recording_that_loads_and_replays(
    llm, recorder, tmp_path, key
):
    """A throwaway one-letter key must not rewrite words, tool names or call ids; a whole value
    equal to the key is still redacted, and a real key appears nowhere in the file."""
    conversation = [
        ("root-session", sse(
            delta(content=f"Next: execute. key={key}" if len(key) > 1 else "Next: execute."),
            delta(tool_calls=[{"index": 0, "id": "call_xe", "type": "function", "function": {
                "name": "subagent", "arguments": json.dumps({"label": "exec", "prompt": key})}}]),
            delta(finish="tool_calls"), usage(5, 3), "[DONE]")),
        ("child-session", sse(delta(content="fixed"), delta(finish="stop"), usage(4, 1), "[DONE]")),
        ("root-session", sse(delta(content="Done, the test passed."), delta(finish="stop"), usage(9, 4), "[DONE]")),
    ]
    llm.post(URL).mock(side_effect=[ok(body) for _, body in conversation])
    recorder.note_child("child-session", EXACT_SPAWN)
    live = [assembled(await run(recorder, sid)) for sid, _ in conversation]
    path = recorder.write(tmp_path / "exact.yaml", task=f"execute the subagent with {key}", redact=[key])
    text = path.read_text()
    if len(key) > 1:
        assert key not in text
    transcript = load_transcript(path)
    root_reply = transcript.spec.agents["root"].replies[0]
    assert root_reply.tool_calls is not None
    assert (root_reply.tool_calls[0].id, root_reply.tool_calls[0].name) == ("call_xe", "subagent")
    assert root_reply.tool_calls[0].arguments == {"label": "exec", "prompt": REDACTED}
    replay = ReplayProvider(transcript)
    replay.bind_root("root-session")
    replay.bind_child("child-session", EXACT_SPAWN)
    replayed = [assembled(await run(replay, sid)) for sid, _ in conversation]
    live[0]["content"][-1]["arguments"]["prompt"] = REDACTED
    if len(key) > 1:
        live[0]["content"][0]["text"] = "Next: execute. key=" + REDACTED
    assert replayed == live
    assert replay.finish_checks() == []
