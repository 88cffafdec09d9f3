"""The OpenAI-compatible provider (SPEC §13.2; matrix rows 95, 96, 97).

The real provider and a real `httpx.AsyncClient` run against respx routes (the autouse fixture in
tests/conftest.py mocks every request). SSE bodies are served as async byte streams cut at awkward
places, so the tests exercise the incremental parser. Retries never wait: `sleep` and `uniform` are
injected. Ordering is by facts: the stalling stream sets `stalled` when the provider is blocked on
it, and only then does a test abort. The one timer test (read gap) uses a few milliseconds because
the read gap *is* a duration the spec names.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from dsh.loader.abort import AbortController, Aborted, AbortSignal
from dsh.loader.agent import Agent, AgentOptions, user_message
from dsh.loader.errors import ConfigError, ProviderError, error_chain
from dsh.loader.models import (
    Assembler,
    Chunk,
    Finish,
    ModelRequest,
    OpenAICompatibleProvider,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    Usage,
)
from dsh.loader.models._openai_wire import to_openai_messages, to_openai_tools
from dsh.loader.session import SessionStore, make_header

from sse_kit import SSE_HEADERS, delta, finish, sse, usage

KEY = "sk-test-0123456789abcdef"
BASE = "https://llm.example.test"
URL = f"{BASE}/chat/completions"


# ---- helpers -----------------------------------------------------------------------------------


class ByteChunks(httpx.AsyncByteStream):
    """A streaming body: `pieces` one per read, then (with `stall`) a read that never completes."""

    def __init__(self, *pieces: bytes, stall: bool = False, fail: Exception | None = None) -> None:
        self.pieces = pieces
        self.stall = stall
        self.fail = fail
        self.stalled = asyncio.Event()  # the provider is blocked reading from us
        self.never = asyncio.Event()  # never set
        self.closed = False
        self.unwound = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            for piece in self.pieces:
                yield piece
            if self.fail is not None:
                raise self.fail
            if self.stall:
                self.stalled.set()
                await self.never.wait()
        finally:
            self.unwound = True

    async def aclose(self) -> None:
        self.closed = True


def split(data: bytes, size: int = 7) -> list[bytes]:
    """Cut a body into small pieces, so events and even lines straddle reads."""
    return [data[i : i + size] for i in range(0, len(data), size)]


def ok(*pieces: bytes, **kw: Any) -> httpx.Response:
    return httpx.Response(200, headers=SSE_HEADERS, stream=ByteChunks(*pieces, **kw))


def request(**overrides: Any) -> ModelRequest:
    fields: dict[str, Any] = dict(
        session_id="session-x", turn=1, step=1, system="be brief",
        messages=[user_message("hi")], tools=[], model="deepseek-chat",
    )
    fields.update(overrides)
    return ModelRequest(**fields)


class Retries:
    def __init__(self) -> None:
        self.calls: list[tuple[int, int, str, int | None]] = []

    def __call__(self, attempt: int, delay_ms: int, code: str, status: int | None) -> None:
        self.calls.append((attempt, delay_ms, code, status))


class FakeClock:
    """Injected `sleep` and `uniform`: records every call, never waits."""

    def __init__(self) -> None:
        self.sleeps: list[float] = []
        self.uniforms: list[tuple[float, float]] = []

    async def sleep(self, delay: float) -> None:
        self.sleeps.append(delay)

    def uniform(self, lo: float, hi: float) -> float:
        self.uniforms.append((lo, hi))
        return hi / 2


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def make_provider(clock: FakeClock) -> AsyncIterator[Callable[..., OpenAICompatibleProvider]]:
    made: list[OpenAICompatibleProvider] = []

    def factory(**kw: Any) -> OpenAICompatibleProvider:
        args: dict[str, Any] = dict(base_url=BASE, model="deepseek-chat", api_key=KEY,
                                    sleep=clock.sleep, uniform=clock.uniform)
        args.update(kw)
        provider = OpenAICompatibleProvider(**args)
        made.append(provider)
        return provider

    yield factory
    for provider in made:
        await provider.aclose()


async def collect(
    provider: OpenAICompatibleProvider, req: ModelRequest | None = None,
    signal: AbortSignal | None = None, retries: Retries | None = None,
) -> list[Chunk]:
    signal = signal or AbortController().signal
    return [c async for c in provider.stream(req or request(), signal, retries or Retries())]


async def failure(provider: OpenAICompatibleProvider, retries: Retries | None = None) -> ProviderError:
    with pytest.raises(ProviderError) as info:
        await collect(provider, retries=retries)
    return info.value


# ---- matrix 95: parsing ------------------------------------------------------------------------


async def test_split_tool_call_deltas_assemble_into_one_call_with_exact_arguments(llm, make_provider):
    """Matrix 95: id/name only on the first delta, arguments split, usage after the finish chunk."""
    body = sse(
        delta(role="assistant", content=""),
        delta(tool_calls=[{"index": 0, "id": "call_abc", "type": "function",
                           "function": {"name": "read_file", "arguments": '{"pa'}}]),
        delta(tool_calls=[{"index": 0, "function": {"arguments": 'th": "a b.txt",'}}]),
        delta(tool_calls=[{"index": 0, "function": {"arguments": ' "n": 2}'}}]),
        finish("tool_calls"),
        usage(12, 7, prompt_cache_hit_tokens=3),
        "[DONE]",
    )
    route = llm.post(URL).mock(return_value=ok(*split(body)))
    chunks = await collect(make_provider())

    assert chunks == [
        ToolCallDelta(0, "call_abc", "read_file", '{"pa'),
        ToolCallDelta(0, None, None, 'th": "a b.txt",'),
        ToolCallDelta(0, None, None, ' "n": 2}'),
        Usage(12, 7, 3),
        Finish("tool-calls"),
    ]
    assembler = Assembler()
    for chunk in chunks:
        assembler.feed(chunk)
    result = assembler.result()
    assert result.content == [{"type": "tool-call", "id": "call_abc", "name": "read_file",
                               "arguments": '{"path": "a b.txt", "n": 2}'}]
    assert result.usage == {"inputTokens": 12, "outputTokens": 7, "cacheReadTokens": 3}
    assert route.call_count == 1
    sent = route.calls.last.request
    assert sent.headers["authorization"] == f"Bearer {KEY}"
    assert sent.headers["accept"] == "text/event-stream"
    payload = json.loads(sent.content)
    assert payload["stream"] is True and payload["stream_options"] == {"include_usage": True}
    assert payload["model"] == "deepseek-chat"
    assert "tools" not in payload and "max_tokens" not in payload and "temperature" not in payload


@pytest.mark.parametrize(
    ("reason", "expected"),
    [
        pytest.param("stop", "stop", id="m95-stop"),
        pytest.param("tool_calls", "tool-calls", id="m95-tool-calls"),
        pytest.param("length", "max-tokens", id="m95-length"),
        pytest.param("content_filter", "CONTENT_FILTERED", id="m95-content-filter"),
        pytest.param("insufficient_system_resource", "PROVIDER_OVERLOADED", id="m95-overloaded"),
        pytest.param("something_new", "stop", id="m95-unknown-is-stop"),
    ],
)
async def test_every_finish_reason_maps_to_a_finish_or_an_error(llm, make_provider, reason, expected):
    """Matrix 95: the finish_reason table of §13.2."""
    body = sse(delta(content="Hel"), delta(content="lo"), finish(reason), usage(5, 2), "[DONE]")
    llm.post(URL).mock(return_value=ok(body))
    provider = make_provider()
    if expected.isupper():
        with pytest.raises(ProviderError) as info:
            await collect(provider)
        assert info.value.code == expected and info.value.status is None
        assert expected in str(info.value)
    else:
        chunks = await collect(provider)
        assert chunks == [TextDelta("Hel"), TextDelta("lo"), Usage(5, 2), Finish(expected)]


async def test_reasoning_comments_and_blank_lines_and_eof_without_done(llm, make_provider):
    body = (b": keep-alive\n\n\n" + sse(delta(reasoning_content="think"), delta(content="ok"))
            + b": another comment\n" + sse({**finish("stop"), "usage": {"prompt_tokens": 1,
                                                                        "completion_tokens": 1}}))
    llm.post(URL).mock(return_value=ok(*split(body, 5)))
    chunks = await collect(make_provider())
    assert chunks == [ReasoningDelta("think"), TextDelta("ok"), Usage(1, 1), Finish("stop")]


async def test_a_stream_without_finish_reason_emits_no_finish(llm, make_provider):
    llm.post(URL).mock(return_value=ok(sse(delta(content="half"), "[DONE]")))
    chunks = await collect(make_provider())
    assert chunks == [TextDelta("half")]
    assembler = Assembler()
    for chunk in chunks:
        assembler.feed(chunk)
    with pytest.raises(ProviderError) as info:
        assembler.result()
    assert info.value.code == "INCOMPLETE_STREAM"


async def test_a_response_that_is_not_an_event_stream_is_a_bad_response(llm, make_provider):
    route = llm.post(URL).mock(return_value=httpx.Response(200, json={"choices": []}))
    err = await failure(make_provider())
    assert err.code == "BAD_RESPONSE" and route.call_count == 1


async def test_a_failure_after_the_first_event_is_terminal(llm, make_provider):
    body = sse(delta(content="par"))
    route = llm.post(URL).mock(return_value=ok(body, fail=httpx.ReadError("reset")))
    retries = Retries()
    chunks: list[Chunk] = []
    with pytest.raises(ProviderError) as info:
        async for chunk in make_provider().stream(request(), AbortController().signal, retries):
            chunks.append(chunk)
    assert chunks == [TextDelta("par")]
    assert info.value.code == "NETWORK" and route.call_count == 1 and retries.calls == []


# ---- matrix 96: retries and errors -------------------------------------------------------------


async def test_retry_after_is_honoured_without_waiting(llm, make_provider, clock):
    """Matrix 96: 429 with Retry-After: 1, then 200 → one llm/retry of 1000 ms, one sleep(1.0)."""
    route = llm.post(URL).mock(side_effect=[
        httpx.Response(429, headers={"Retry-After": "1"}),
        ok(sse(delta(content="hi"), finish("stop"), "[DONE]")),
    ])
    retries = Retries()
    chunks = await collect(make_provider(), retries=retries)
    assert chunks == [TextDelta("hi"), Finish("stop")]
    assert retries.calls == [(1, 1000, "RATE_LIMITED", 429)]
    assert clock.sleeps == [1.0] and clock.uniforms == []
    assert route.call_count == 2


async def test_5xx_four_times_is_provider_unavailable_after_four_attempts(llm, make_provider, clock):
    """Matrix 96: full-jitter delays uniform(0, min(max, initial·2^(n-1)))."""
    route = llm.post(URL).mock(side_effect=[httpx.Response(s) for s in (500, 502, 503, 504)])
    retries = Retries()
    err = await failure(make_provider(max_attempts=4, initial_backoff=1.0, max_backoff=3.0), retries)
    assert err.code == "PROVIDER_UNAVAILABLE" and err.status == 504
    assert "504" in str(err) and "4 attempts" in str(err)
    assert route.call_count == 4
    assert clock.uniforms == [(0.0, 1.0), (0.0, 2.0), (0.0, 3.0)]
    assert clock.sleeps == [0.5, 1.0, 1.5]
    assert retries.calls == [(1, 500, "PROVIDER_UNAVAILABLE", 500), (2, 1000, "PROVIDER_UNAVAILABLE", 502),
                             (3, 1500, "PROVIDER_UNAVAILABLE", 503)]


async def test_retry_after_is_capped_by_max_backoff(llm, make_provider, clock):
    llm.post(URL).mock(side_effect=[httpx.Response(503, headers={"Retry-After": "100"}),
                                      ok(sse(finish("stop")))])
    retries = Retries()
    await collect(make_provider(max_backoff=30.0), retries=retries)
    assert clock.sleeps == [30.0] and retries.calls == [(1, 30000, "PROVIDER_UNAVAILABLE", 503)]


async def test_rate_limited_when_429_exhausts_the_attempts(llm, make_provider):
    llm.post(URL).mock(return_value=httpx.Response(429))
    err = await failure(make_provider(max_attempts=2))
    assert err.code == "RATE_LIMITED" and err.status == 429


@pytest.mark.parametrize(
    ("status", "code"),
    [
        pytest.param(401, "AUTH", id="m96-401"),
        pytest.param(403, "AUTH", id="m96-403"),
        pytest.param(400, "BAD_REQUEST", id="400"),
        pytest.param(404, "PROVIDER_REJECTED", id="404"),
        pytest.param(422, "PROVIDER_REJECTED", id="422"),
    ],
)
async def test_client_errors_are_not_retried(llm, make_provider, clock, status, code):
    route = llm.post(URL).mock(return_value=httpx.Response(status, json={"error": KEY}))
    retries = Retries()
    err = await failure(make_provider(), retries)
    assert (err.code, err.status) == (code, status)
    assert str(status) in str(err) and code in str(err)
    assert route.call_count == 1 and retries.calls == [] and clock.sleeps == []


@pytest.mark.parametrize(
    ("exc", "code"),
    [
        pytest.param(httpx.ConnectError("refused"), "NETWORK", id="connect"),
        pytest.param(httpx.ConnectTimeout("slow"), "TIMEOUT", id="connect-timeout"),
        pytest.param(httpx.ReadTimeout("slow"), "TIMEOUT", id="read-timeout"),
    ],
)
async def test_transport_errors_are_retried_then_reported(llm, make_provider, exc, code):
    route = llm.post(URL).mock(side_effect=exc)
    retries = Retries()
    err = await failure(make_provider(max_attempts=3), retries)
    assert err.code == code and err.status is None and route.call_count == 3
    assert [c[2] for c in retries.calls] == [code, code]
    assert isinstance(err.__cause__, httpx.TransportError)


async def test_a_connect_error_then_success_streams_normally(llm, make_provider):
    llm.post(URL).mock(side_effect=[httpx.ConnectError("refused"), ok(sse(finish("stop")))])
    retries = Retries()
    assert await collect(make_provider(), retries=retries) == [Finish("stop")]
    assert [c[2] for c in retries.calls] == ["NETWORK"]


async def test_the_key_appears_in_no_log_record_error_or_repr(llm, make_provider, caplog):
    """Matrix 96: retries are logged, failures raised; the key is in none of them."""
    caplog.set_level(logging.DEBUG)
    llm.post(URL).mock(side_effect=[
        httpx.Response(429, headers={"Retry-After": "0"}),
        httpx.ConnectError("refused"),
        httpx.Response(401, json={"error": {"message": f"bad key {KEY}"}}),
    ])
    provider = make_provider()
    err = await failure(provider)
    assert err.code == "AUTH"
    assert any("RATE_LIMITED" in r.getMessage() for r in caplog.records)
    for text in [r.getMessage() for r in caplog.records] + [str(err), repr(err), error_chain(err),
                                                            repr(provider), str(provider)]:
        assert KEY not in text


# ---- cancellation and read gaps (matrix 97) ------------------------------------------------------


async def test_abort_ends_a_stalled_read_at_once_and_closes_the_response(llm, make_provider):
    """Matrix 97 (provider level): the stall is still pending when the read ends with Aborted."""
    body = ByteChunks(sse(delta(content="partial")), stall=True)
    llm.post(URL).mock(return_value=httpx.Response(200, headers=SSE_HEADERS, stream=body))
    ctrl = AbortController()
    stream = make_provider().stream(request(), ctrl.signal, Retries())
    assert await anext(stream) == TextDelta("partial")
    pending = asyncio.ensure_future(anext(stream))
    await body.stalled.wait()
    ctrl.abort({"kind": "user"})
    with pytest.raises(Aborted) as info:
        await pending
    assert info.value.reason == {"kind": "user"}
    assert body.closed and body.unwound and not body.never.is_set()


async def test_abort_during_backoff_stops_the_sleep_after_on_retry(llm, make_provider):
    entered = asyncio.Event()

    async def endless_sleep(delay: float) -> None:
        entered.set()
        await asyncio.Event().wait()

    llm.post(URL).mock(return_value=httpx.Response(503))
    ctrl = AbortController()
    retries = Retries()
    pending = asyncio.ensure_future(collect(make_provider(sleep=endless_sleep), signal=ctrl.signal,
                                            retries=retries))
    await entered.wait()
    assert len(retries.calls) == 1  # on_retry ran before the sleep began
    ctrl.abort({"kind": "parent"})
    with pytest.raises(Aborted):
        await pending


async def test_an_already_aborted_signal_sends_nothing(make_provider):
    # No route: any request would fail the test with respx's AllMockedAssertionError.
    ctrl = AbortController()
    ctrl.abort({"kind": "user"})
    with pytest.raises(Aborted):
        await collect(make_provider(), signal=ctrl.signal)


async def test_a_read_gap_after_the_first_event_is_a_terminal_timeout(llm, make_provider):
    body = ByteChunks(sse(delta(content="x")), stall=True)
    route = llm.post(URL).mock(return_value=httpx.Response(200, headers=SSE_HEADERS, stream=body))
    retries = Retries()
    with pytest.raises(ProviderError) as info:
        await collect(make_provider(read_timeout=0.02), retries=retries)
    assert info.value.code == "TIMEOUT" and route.call_count == 1 and retries.calls == []
    assert body.closed


async def test_a_read_gap_before_the_first_event_is_retried(llm, make_provider):
    route = llm.post(URL).mock(side_effect=[ok(stall=True), ok(stall=True)])
    retries = Retries()
    err = await failure(make_provider(read_timeout=0.02, max_attempts=2), retries)
    assert err.code == "TIMEOUT" and route.call_count == 2
    assert [c[2] for c in retries.calls] == ["TIMEOUT"]


async def test_an_interrupted_agent_turn_logs_the_partial_message(llm, make_provider, home: Path):
    """Matrix 97: the real agent loop, a stream that stalls forever after one chunk, interrupt."""
    body = ByteChunks(sse(delta(content="partial ")), b"data: {\"choi", stall=True)
    llm.post(URL).mock(return_value=httpx.Response(200, headers=SSE_HEADERS, stream=body))
    store = SessionStore(home, batch_delay_ms=0, fsync=False)
    session = await store.create(make_header("session-x"))
    provider = make_provider()
    agent = Agent(session, store=store, provider=provider, options=AgentOptions(model="deepseek-chat"))
    try:
        agent.followup(user_message("go"))
        await body.stalled.wait()
        agent.cancel({"kind": "user"})
        await agent.when_idle()
        assert not body.never.is_set() and body.closed
        events = {e["type"]: e["data"] for e in agent.session.events}
        assert events["turn/end"]["reason"] == {"kind": "aborted", "reason": {"kind": "user"}}
        message = events["assistant/message"]
        assert message["interrupted"] is True and "finish" not in message
        assert message["message"]["content"] == [{"type": "text", "text": "partial "}]
        assert message["message"]["source"] == {"kind": "model", "provider": "openai-compatible",
                                                "model": "deepseek-chat"}
    finally:
        await agent.dispose()


# ---- request mapping ---------------------------------------------------------------------------


def test_messages_map_to_chat_completions_and_reasoning_is_never_sent_back():
    call = {"type": "tool-call", "id": "call_1", "name": "read_file", "arguments": '{"path":"a"}'}
    messages = [
        user_message([{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]),
        {"id": "m2", "role": "assistant", "source": {"kind": "model"},
         "content": [{"type": "reasoning", "text": "secret thoughts"},
                     {"type": "text", "text": "reading"}, call]},
        {"id": "m3", "role": "user", "source": {"kind": "tool", "callId": "call_1"},
         "content": [{"type": "tool-result", "toolCallId": "call_1", "isError": False,
                      "content": [{"type": "text", "text": "file body"}]}]},
        {"id": "m4", "role": "assistant", "source": {"kind": "model"},
         "content": [{"type": "reasoning", "text": "interrupted thinking"}]},
        {"id": "m5", "role": "assistant", "source": {"kind": "model"}, "content": [call | {"id": "c2"}]},
    ]
    assert to_openai_messages("sys", messages) == [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "one\n\ntwo"},
        {"role": "assistant", "content": "reading",
         "tool_calls": [{"id": "call_1", "type": "function",
                         "function": {"name": "read_file", "arguments": '{"path":"a"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "file body"},
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": "c2", "type": "function",
                         "function": {"name": "read_file", "arguments": '{"path":"a"}'}}]},
    ]
    assert "secret thoughts" not in json.dumps(to_openai_messages("sys", messages))


async def test_the_request_body_carries_tools_and_sampling_settings(llm, make_provider):
    route = llm.post(URL).mock(return_value=ok(sse(finish("stop"))))
    tools = [{"name": "read_file", "description": "reads", "parameters": {"type": "object"}}]
    req = request(tools=tools, max_tokens=64, temperature=0.5,
                  messages=[user_message("hi"), {"id": "a", "role": "assistant", "source": {},
                                                 "content": [{"type": "reasoning", "text": "r"},
                                                             {"type": "text", "text": "yo"}]}])
    await collect(make_provider(), req)
    payload = json.loads(route.calls.last.request.content)
    assert payload["tools"] == to_openai_tools(tools) == [
        {"type": "function", "function": {"name": "read_file", "description": "reads",
                                          "parameters": {"type": "object"}}}]
    assert payload["max_tokens"] == 64 and payload["temperature"] == 0.5
    assert payload["messages"] == [{"role": "system", "content": "be brief"},
                                   {"role": "user", "content": "hi"},
                                   {"role": "assistant", "content": "yo"}]


# ---- construction ------------------------------------------------------------------------------


def settings(**overrides: Any) -> SimpleNamespace:
    retry = SimpleNamespace(max_attempts=2, initial_backoff_seconds=0.5, max_backoff_seconds=5.0)
    fields: dict[str, Any] = dict(base_url=BASE, model="deepseek-chat", api_key_env="MY_LLM_KEY",
                                  connect_timeout_seconds=10.0, read_timeout_seconds=120.0,
                                  retry=retry)
    fields.update(overrides)
    return SimpleNamespace(**fields)


@pytest.mark.parametrize("environ", [{}, {"MY_LLM_KEY": ""}, {"OTHER_KEY": KEY}])
def test_from_env_without_the_key_names_the_variable_only(environ):
    with pytest.raises(ConfigError) as info:
        OpenAICompatibleProvider.from_env(settings(), environ)
    assert "MY_LLM_KEY" in str(info.value) and KEY not in str(info.value)


async def test_from_env_reads_the_key_and_repr_hides_it(llm, clock):
    provider = OpenAICompatibleProvider.from_env(settings(), {"MY_LLM_KEY": KEY}, sleep=clock.sleep,
                                                 uniform=clock.uniform)
    try:
        assert KEY not in repr(provider) and "deepseek-chat" in repr(provider)
        assert provider.max_attempts == 2 and provider.name == "openai-compatible"
        route = llm.post(URL).mock(return_value=ok(sse(finish("stop"))))
        await collect(provider)
        assert route.calls.last.request.headers["authorization"] == f"Bearer {KEY}"
    finally:
        await provider.aclose()
