"""Third-party OpenAI-compatible endpoints (issue 16 item 4), against respx routes: keyless servers,
finish reasons other servers send, `retry-after-ms`, HTTP 529 and the missing-`/v1` hint.

Same harness as test_openai.py: the real provider over a real `httpx.AsyncClient`, `sleep` and
`uniform` injected so no retry waits. The llmock test (test_llmock.py) repeats the wire-level cases
against a real server.
"""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from dsh.loader.agent import Agent, AgentOptions, user_message
from dsh.loader.models import Assembler, Finish, OpenAICompatibleProvider, TextDelta, ToolCallDelta, Usage
from dsh.loader.session import SessionStore, make_header
from dsh.loader.texts import render

from sse_kit import delta, finish, sse, usage
from .test_openai import (  # noqa: F401  (clock and make_provider are fixtures)
    BASE,
    KEY,
    URL,
    FakeClock,
    Retries,
    clock,
    collect,
    failure,
    make_provider,
    ok,
)


def settings(**overrides: Any) -> SimpleNamespace:
    retry = SimpleNamespace(max_attempts=2, initial_backoff_seconds=0.5, max_backoff_seconds=5.0)
    fields: dict[str, Any] = dict(base_url=BASE, model="llama3.2", api_key_env=None,
                                  connect_timeout_seconds=10.0, read_timeout_seconds=120.0, retry=retry)
    fields.update(overrides)
    return SimpleNamespace(**fields)


# ---- keyless endpoints ---------------------------------------------------------------------------


async def test_api_key_env_null_reads_no_variable_and_sends_no_authorization_header(llm, clock):
    """`apiKeyEnv: null`: an empty environment is enough, and the request has no Authorization."""
    provider = OpenAICompatibleProvider.from_env(settings(), {}, sleep=clock.sleep, uniform=clock.uniform)
    try:
        route = llm.post(URL).mock(return_value=ok(sse(delta(content="hi"), finish("stop"), "[DONE]")))
        assert await collect(provider) == [TextDelta("hi"), Finish("stop")]
        sent = route.calls.last.request
        assert "authorization" not in sent.headers
        assert sent.headers["accept"] == "text/event-stream"
    finally:
        await provider.aclose()


async def test_a_named_key_variable_still_sends_its_bearer_header(llm, clock):
    provider = OpenAICompatibleProvider.from_env(settings(api_key_env="MY_LLM_KEY"), {"MY_LLM_KEY": KEY},
                                                 sleep=clock.sleep, uniform=clock.uniform)
    try:
        route = llm.post(URL).mock(return_value=ok(sse(finish("stop"))))
        await collect(provider)
        assert route.calls.last.request.headers["authorization"] == f"Bearer {KEY}"
    finally:
        await provider.aclose()


# ---- finish reasons ------------------------------------------------------------------------------


CALL = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}


@pytest.mark.parametrize(("events", "expected"), [
    pytest.param([delta(content="ok"), finish("eos")], "stop", id="eos-is-stop"),
    pytest.param([delta(content="ok"), finish("end_turn")], "stop", id="end-turn-is-stop"),
    pytest.param([delta(content="ok"), finish("max_tokens")], "max-tokens", id="max-tokens"),
    pytest.param([delta(content="ok"), finish("something_new")], "stop", id="unknown-without-calls-is-stop"),
    pytest.param([delta(tool_calls=[CALL]), finish("something_new")], "tool-calls",
                 id="unknown-with-calls-is-tool-calls"),
    pytest.param([delta(tool_calls=[CALL]), finish("tool_use")], "tool-calls", id="tool-use"),
    pytest.param([delta(content="ok"), finish("function_call")], "stop", id="function-call-without-a-call-is-stop"),
])
async def test_finish_reasons_of_other_servers_map_onto_the_three(llm, make_provider, events, expected):
    llm.post(URL).mock(return_value=ok(sse(*events, usage(3, 1), "[DONE]")))
    chunks = await collect(make_provider())
    assert chunks[-2:] == [Usage(3, 1), Finish(expected)]


async def test_an_unknown_finish_reason_is_logged_with_what_it_became(llm, make_provider, caplog):
    caplog.set_level(logging.WARNING)
    llm.post(URL).mock(return_value=ok(sse(delta(content="ok"), finish("weird_reason"), "[DONE]")))
    await collect(make_provider())
    expected = render("T-LOG-UNKNOWN-FINISH", reason="'weird_reason'", mapped="stop")
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [expected]


async def test_legacy_function_call_deltas_become_tool_call_zero(llm, make_provider):
    """`finish_reason: function_call` with `delta.function_call` (pre-tools servers)."""
    body = sse(
        delta(role="assistant", content=None, function_call={"name": "read_file", "arguments": '{"pa'}),
        delta(function_call={"arguments": 'th": "a"}'}),
        finish("function_call"),
        "[DONE]",
    )
    llm.post(URL).mock(return_value=ok(body))
    chunks = await collect(make_provider())
    assert chunks == [ToolCallDelta(0, None, "read_file", '{"pa'), ToolCallDelta(0, None, None, 'th": "a"}'),
                      Finish("tool-calls")]
    assembler = Assembler()
    for chunk in chunks:
        assembler.feed(chunk)
    assert assembler.result().content == [
        {"type": "tool-call", "id": "call-0", "name": "read_file", "arguments": '{"path": "a"}'}]


async def test_an_unknown_finish_reason_completes_the_agent_turn(llm, make_provider, home: Path):
    """The real agent loop: the turn ends `completed` with the answer, not `error`."""
    llm.post(URL).mock(return_value=ok(sse(delta(content="the answer"), finish("brand_new"), "[DONE]")))
    store = SessionStore(home, batch_delay_ms=0, fsync=False)
    session = await store.create(make_header("session-x"))
    agent = Agent(session, store=store, provider=make_provider(), options=AgentOptions(model="llama3.2"))
    try:
        agent.followup(user_message("go"))
        await agent.when_idle()
        events = {e["type"]: e["data"] for e in agent.session.events}
        assert events["turn/end"]["reason"] == {"kind": "completed"}
        assert events["assistant/message"]["finish"] == "stop"
        assert events["assistant/message"]["message"]["content"] == [{"type": "text", "text": "the answer"}]
    finally:
        await agent.dispose()


# ---- retry-after-ms and 529 ----------------------------------------------------------------------


async def test_retry_after_ms_wins_over_the_rounded_retry_after(llm, make_provider, clock: FakeClock):
    """Issue 16: `retry-after: 1` with `retry-after-ms: 300` waits 300 ms, not 1,000."""
    llm.post(URL).mock(side_effect=[
        httpx.Response(429, headers={"Retry-After": "1", "retry-after-ms": "300"}),
        ok(sse(delta(content="hi"), finish("stop"), "[DONE]")),
    ])
    retries = Retries()
    await collect(make_provider(), retries=retries)
    assert clock.sleeps == [0.3] and clock.uniforms == []
    assert retries.calls == [(1, 300, "RATE_LIMITED", 429)]


@pytest.mark.parametrize(("headers", "sleeps"), [
    pytest.param({"retry-after-ms": "soon", "Retry-After": "2"}, [2.0], id="unparsable-ms-falls-back"),
    pytest.param({"retry-after-ms": "nan"}, [0.5], id="non-finite-ms-falls-back-to-jitter"),
    pytest.param({"retry-after-ms": "-5"}, [0.0], id="negative-ms-is-no-wait"),
])
async def test_retry_after_ms_that_cannot_be_used_falls_back(llm, make_provider, clock, headers, sleeps):
    llm.post(URL).mock(side_effect=[httpx.Response(503, headers=headers), ok(sse(finish("stop")))])
    await collect(make_provider(initial_backoff=1.0))
    assert clock.sleeps == sleeps


async def test_http_529_is_retried_as_overloaded(llm, make_provider, clock):
    route = llm.post(URL).mock(side_effect=[httpx.Response(529), ok(sse(delta(content="hi"), finish("stop")))])
    retries = Retries()
    assert await collect(make_provider(), retries=retries) == [TextDelta("hi"), Finish("stop")]
    assert route.call_count == 2
    assert retries.calls == [(1, 500, "PROVIDER_OVERLOADED", 529)]


async def test_http_529_until_the_attempts_run_out_is_provider_overloaded(llm, make_provider):
    route = llm.post(URL).mock(return_value=httpx.Response(529))
    err = await failure(make_provider(max_attempts=3))
    assert (err.code, err.status, route.call_count) == ("PROVIDER_OVERLOADED", 529, 3)
    assert "after 3 attempts" in str(err)


# ---- the missing /v1 hint ------------------------------------------------------------------------


@pytest.mark.parametrize(("base", "suggested"), [
    pytest.param("http://localhost:11434", "http://localhost:11434/v1/chat/completions", id="bare-host"),
    pytest.param("http://me:pw@localhost:8000/api/", "http://localhost:8000/api/v1/chat/completions",
                 id="userinfo-dropped"),
])
async def test_a_404_from_a_base_url_without_v1_hints_that_v1_may_be_missing(llm, make_provider, base, suggested):
    llm.post(base.rstrip("/") + "/chat/completions").mock(return_value=httpx.Response(404))
    err = await failure(make_provider(base_url=base))
    assert err.code == "PROVIDER_REJECTED" and err.status == 404
    assert str(err) == ("the model provider answered HTTP 404 (PROVIDER_REJECTED); "
                        + render("T-PROVIDER-NO-V1", suggested=suggested))
    assert "pw" not in str(err)


@pytest.mark.parametrize(("base", "status"), [
    pytest.param("http://localhost:11434/v1", 404, id="404-with-v1"),
    pytest.param("http://localhost:11434", 422, id="422-without-v1"),
])
async def test_no_v1_hint_when_the_url_has_v1_or_the_status_is_not_404(llm, make_provider, base, status):
    llm.post(base + "/chat/completions").mock(return_value=httpx.Response(status))
    err = await failure(make_provider(base_url=base))
    assert str(err) == f"the model provider answered HTTP {status} (PROVIDER_REJECTED)"
