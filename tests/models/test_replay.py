"""The replay provider serves transcript replies per bound session (SPEC §13.3, §15.2–§15.4).

Each test builds a small transcript in memory and drives `stream` directly, as the agent loop would.
Every test runs inside `respx.mock(assert_all_mocked=True)` with no routes, so any network access
fails. Ordering is by facts: the hang tests wait for the hang listener, never for time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import respx

from dsh.loader.abort import AbortController, Aborted, AbortSignal
from dsh.loader.errors import ProviderError
from dsh.loader.models import (
    Chunk,
    Finish,
    ModelRequest,
    ReasoningDelta,
    ReplayProvider,
    TextDelta,
    ToolCallDelta,
    Usage,
)
from dsh.loader.transcripts import Transcript, TranscriptSpec


@pytest.fixture(autouse=True)
def no_network() -> Iterator[None]:
    with respx.mock(assert_all_mocked=True):
        yield


def transcript(agents: dict[str, Any]) -> Transcript:
    spec = TranscriptSpec.model_validate({"version": 1, "name": "t", "task": "T", "agents": agents})
    return Transcript(spec=spec, path=Path("t.yaml"))


def provider(agents: dict[str, Any]) -> ReplayProvider:
    replay = ReplayProvider(transcript(agents))
    replay.bind_root("root-session")
    return replay


def request(session_id: str = "root-session") -> ModelRequest:
    return ModelRequest(
        session_id=session_id, turn=1, step=1, system="", messages=[], tools=[], model="m"
    )


def ignore_retry(attempt: int, delay_ms: int, code: str, status: int | None) -> None:
    raise AssertionError("replay never retries")


async def collect(
    replay: ReplayProvider, session_id: str = "root-session", signal: AbortSignal | None = None
) -> list[Chunk]:
    signal = signal or AbortController().signal
    return [chunk async for chunk in replay.stream(request(session_id), signal, ignore_retry)]


async def fails_with(replay: ReplayProvider, session_id: str = "root-session") -> ProviderError:
    with pytest.raises(ProviderError) as info:
        await collect(replay, session_id)
    return info.value


def child(call_id: str | None) -> dict[str, Any]:
    descriptor: dict[str, Any] = {
        "version": 1,
        "mode": "continuable",
        "provider": "spawn",
        "label": "x",
    }
    if call_id is not None:
        descriptor["spawnCallId"] = call_id
    return descriptor


def sa(call_id: str) -> dict[str, Any]:
    return {"id": call_id, "name": "subagent", "arguments": {"prompt": "go"}}


# ---- reply forms ---------------------------------------------------------------------------------


async def test_message_reply_is_served_one_delta_per_field_then_usage_then_finish() -> None:
    replay = provider(
        {
            "root": {
                "replies": [
                    {
                        "reasoning": "why",
                        "text": "hello",
                        "toolCalls": [
                            {"id": "a", "name": "report", "arguments": {"output": "é x"}},
                            {"id": "b", "name": "report", "arguments": '{"output" : "raw"}'},
                        ],
                        "usage": {"inputTokens": 7, "outputTokens": 2},
                        "finish": "max-tokens",
                    }
                ]
            }
        }
    )

    assert await collect(replay) == [
        ReasoningDelta("why"),
        TextDelta("hello"),
        ToolCallDelta(0, "a", "report", '{"output":"é x"}'),
        ToolCallDelta(1, "b", "report", '{"output" : "raw"}'),
        Usage(7, 2),
        Finish("max-tokens"),
    ]


async def test_usage_defaults_to_10_5_and_finish_to_stop_without_tool_calls() -> None:
    replay = provider({"root": {"replies": [{"text": "hi"}]}})

    assert await collect(replay) == [TextDelta("hi"), Usage(10, 5), Finish("stop")]


async def test_a_reply_without_tool_calls_is_served_from_its_fields_with_the_same_chunks() -> None:
    """Issue 13: such replies skip `model_dump` (`_build_plain`); the chunks are `_build`'s."""
    replay = provider(
        {
            "root": {
                "replies": [
                    {"reasoning": "why", "text": "hi", "usage": {"inputTokens": 7, "outputTokens": 2},
                     "finish": "max-tokens"},
                    {"reasoning": "only"},
                    {"text": "braces { } and {{ alone"},
                    {"text": "", "toolCalls": []},
                ]
            }
        }
    )

    assert await collect(replay) == [ReasoningDelta("why"), TextDelta("hi"), Usage(7, 2), Finish("max-tokens")]
    assert await collect(replay) == [ReasoningDelta("only"), Usage(10, 5), Finish("stop")]
    assert await collect(replay) == [TextDelta("braces { } and {{ alone"), Usage(10, 5), Finish("stop")]
    assert await collect(replay) == [Usage(10, 5), Finish("stop")]


async def test_placeholders_in_a_text_only_reply_resolve_in_text_and_reasoning() -> None:
    replay = provider({"root": {"replies": [{"reasoning": "r {{session:root}}", "text": "me {{session:root}}"}]}})

    assert await collect(replay) == [
        ReasoningDelta("r root-session"), TextDelta("me root-session"), Usage(10, 5), Finish("stop"),
    ]


async def test_finish_defaults_to_tool_calls_when_the_reply_has_tool_calls() -> None:
    replay = provider({"root": {"replies": [{"toolCalls": [sa("start")]}]}})

    chunks = await collect(replay)

    assert chunks[-1] == Finish("tool-calls")


async def test_error_reply_streams_its_prefix_then_raises_the_provider_error() -> None:
    replay = provider(
        {
            "root": {
                "replies": [
                    {
                        "text": "part",
                        "error": {"code": "RATE_LIMITED", "message": "slow down", "status": 429},
                    }
                ]
            }
        }
    )
    seen: list[Chunk] = []

    with pytest.raises(ProviderError) as info:
        async for chunk in replay.stream(request(), AbortController().signal, ignore_retry):
            seen.append(chunk)

    assert seen == [TextDelta("part")]
    assert (info.value.code, info.value.message, info.value.status) == (
        "RATE_LIMITED",
        "slow down",
        429,
    )
    assert replay.violations == []


# ---- cursor and strictness -----------------------------------------------------------------------


async def test_cursor_advances_when_a_request_is_served_not_when_it_finishes() -> None:
    replay = provider({"root": {"replies": [{"text": "one"}, {"text": "two"}]}})
    signal = AbortController().signal
    first = replay.stream(request(), signal, ignore_retry)

    assert await anext(first) == TextDelta("one")
    assert await collect(replay) == [TextDelta("two"), Usage(10, 5), Finish("stop")]
    await first.aclose()


async def test_a_request_aborted_before_serving_consumes_no_reply() -> None:
    replay = provider({"root": {"replies": [{"text": "one"}]}})
    controller = AbortController()
    controller.abort({"kind": "user"})

    with pytest.raises(Aborted):
        await collect(replay, signal=controller.signal)

    assert await collect(replay) == [TextDelta("one"), Usage(10, 5), Finish("stop")]


async def test_a_request_beyond_the_script_is_a_violation_and_a_provider_error() -> None:
    replay = provider({"root": {"replies": [{"text": "only"}]}})
    await collect(replay)

    error = await fails_with(replay)

    assert error.code == "REPLAY_SCRIPT_EXHAUSTED"
    assert [(v["code"], v.get("agent")) for v in replay.violations] == [
        ("REPLAY_SCRIPT_EXHAUSTED", "root")
    ]
    assert "#2" in replay.violations[0]["message"]


async def test_finish_checks_report_partly_consumed_and_unbound_scripts_once() -> None:
    replay = provider(
        {
            "root": {
                "replies": [{"toolCalls": [sa("start")]}, {"text": "done"}, {"text": "extra"}]
            },
            "child": {"spawnedBy": "start", "replies": [{"text": "c"}]},
        }
    )
    await collect(replay)

    first = replay.finish_checks()
    second = replay.finish_checks()

    assert [(v["code"], v["agent"]) for v in first] == [
        ("REPLAY_UNCONSUMED", "root"),
        ("REPLAY_UNCONSUMED", "child"),
    ]
    assert "1/3" in first[0]["message"]
    assert second == first
    assert len(replay.violations) == 2


async def test_finish_checks_are_empty_when_every_reply_was_served() -> None:
    replay = provider({"root": {"replies": [{"text": "a"}]}})
    await collect(replay)

    assert replay.finish_checks() == []
    assert replay.violations == []


# ---- binding -------------------------------------------------------------------------------------


async def test_children_bind_by_spawned_by_whatever_their_creation_order() -> None:
    replay = provider(
        {
            "root": {"replies": [{"toolCalls": [sa("c1"), sa("c2")]}]},
            "w1": {"spawnedBy": "c1", "replies": [{"text": "W1"}]},
            "w2": {"spawnedBy": "c2", "replies": [{"text": "W2"}]},
        }
    )

    replay.bind_child("s2", child("c2"))
    replay.bind_child("s1", child("c1"))

    assert (replay.agent_key_of("s1"), replay.agent_key_of("s2")) == ("w1", "w2")
    assert replay.session_of("w2") == "s2"
    assert (await collect(replay, "s2"))[0] == TextDelta("W2")


async def test_order_counts_only_children_that_did_not_bind_by_spawned_by() -> None:
    replay = provider(
        {
            "root": {"replies": [{"toolCalls": [sa("keyed")]}]},
            "keyed": {"spawnedBy": "keyed", "replies": [{"text": "K"}]},
            "first": {"order": 1, "replies": [{"text": "F"}]},
            "second": {"order": 2, "replies": [{"text": "S"}]},
        }
    )

    replay.bind_child("a", child("unscripted-call"))
    replay.bind_child("k", child("keyed"))
    replay.bind_child("b", child(None))

    assert [replay.agent_key_of(s) for s in ("a", "k", "b")] == ["first", "keyed", "second"]


async def test_a_second_child_of_the_same_spawn_call_is_a_binding_conflict_and_unrecorded() -> None:
    replay = provider(
        {
            "root": {"replies": [{"toolCalls": [sa("start")]}]},
            "child": {"spawnedBy": "start", "replies": [{"text": "C"}]},
            "spare": {"order": 1, "replies": [{"text": "S"}]},
        }
    )
    replay.bind_child("s1", child("start"))

    replay.bind_child("s2", child("start"))

    assert [(v["code"], v["agent"]) for v in replay.violations] == [
        ("REPLAY_BINDING_CONFLICT", "child")
    ]
    assert replay.agent_key_of("s2") is None
    assert (await fails_with(replay, "s2")).code == "REPLAY_UNRECORDED_SESSION"
    replay.bind_child("s3", child(None))
    assert replay.agent_key_of("s3") == "spare"


async def test_a_child_with_no_matching_script_is_unrecorded_and_each_request_fails() -> None:
    replay = provider({"root": {"replies": [{"text": "r"}]}})
    replay.bind_child("stray", child("nothing"))

    first = await fails_with(replay, "stray")
    second = await fails_with(replay, "stray")

    assert first.code == second.code == "REPLAY_UNRECORDED_SESSION"
    assert [v["code"] for v in replay.violations] == ["REPLAY_UNRECORDED_SESSION"] * 2
    assert "agent" not in replay.violations[0]
    assert "stray" in replay.violations[0]["message"]


async def test_rebinding_a_cold_resumed_child_keeps_its_script_and_cursor() -> None:
    replay = provider(
        {
            "root": {"replies": [{"text": "r"}]},
            "worker": {"order": 1, "replies": [{"text": "FIRST"}, {"text": "SECOND"}]},
            "other": {"order": 2, "replies": [{"text": "OTHER"}]},
        }
    )
    replay.bind_child("w", child(None))
    await collect(replay, "w")

    replay.bind_child("w", child(None))

    assert replay.agent_key_of("w") == "worker"
    assert (await collect(replay, "w"))[0] == TextDelta("SECOND")
    replay.bind_child("o", child(None))
    assert replay.agent_key_of("o") == "other"


# ---- placeholders --------------------------------------------------------------------------------


async def test_child_and_session_placeholders_resolve_to_live_session_ids_when_served() -> None:
    replay = provider(
        {
            "root": {
                "replies": [
                    {"toolCalls": [sa("start")]},
                    {
                        "text": "child {{child:start}} and me {{session:root}}",
                        "toolCalls": [
                            {
                                "id": "send",
                                "name": "send_message",
                                "arguments": {"id": "{{session:worker}}", "content": "x"},
                            }
                        ],
                    },
                ]
            },
            "worker": {"spawnedBy": "start", "replies": [{"text": "w"}]},
        }
    )
    await collect(replay)
    replay.bind_child("child-123", child("start"))

    chunks = await collect(replay)

    assert chunks[0] == TextDelta("child child-123 and me root-session")
    assert chunks[1] == ToolCallDelta(0, "send", "send_message", '{"id":"child-123","content":"x"}')


async def test_an_unresolvable_placeholder_fails_the_request_and_is_a_violation() -> None:
    replay = provider({"root": {"replies": [{"text": "{{child:never}}"}, {"text": "next"}]}})

    error = await fails_with(replay)

    assert error.code == "REPLAY_PLACEHOLDER"
    assert [(v["code"], v["agent"]) for v in replay.violations] == [("REPLAY_PLACEHOLDER", "root")]
    assert "{{child:never}}" in replay.violations[0]["message"]
    assert (await collect(replay))[0] == TextDelta("next")  # the failed request used its reply


# ---- hang ----------------------------------------------------------------------------------------


async def test_hang_streams_its_prefix_is_reached_after_consumption_and_ends_on_abort() -> None:
    replay = provider({"root": {"replies": [{"hang": {"text": "partial"}}]}})
    controller = AbortController()
    reached = asyncio.Event()
    heard: list[str] = []

    def on_hang(key: str) -> None:
        heard.append(key)
        reached.set()

    replay.add_hang_listener(on_hang)
    chunks = replay.stream(request(), controller.signal, ignore_retry)

    assert await anext(chunks) == TextDelta("partial")
    assert not replay.hang_reached("root")
    rest = asyncio.ensure_future(anext(chunks))
    await reached.wait()
    assert replay.hang_reached("root") and heard == ["root"]
    assert not rest.done()

    controller.abort({"kind": "parent"})

    with pytest.raises(Aborted) as info:
        await rest
    assert info.value.reason == {"kind": "parent"}
    assert replay.hang_reached("root")  # monotone


async def test_hang_without_prefix_is_reached_on_the_first_read() -> None:
    replay = provider({"root": {"replies": [{"hang": {}}]}})
    controller = AbortController()
    reached = asyncio.Event()
    replay.add_hang_listener(lambda key: reached.set())

    read = asyncio.create_task(collect(replay, signal=controller.signal))
    await reached.wait()
    controller.abort({"kind": "user"})

    with pytest.raises(Aborted):
        await read


async def test_cancelling_a_hung_read_does_not_cancel_other_waiters_on_the_signal() -> None:
    replay = provider({"root": {"replies": [{"hang": {}}]}})
    controller = AbortController()
    reached = asyncio.Event()
    replay.add_hang_listener(lambda key: reached.set())

    async def other_waiter() -> dict[str, Any]:
        return await controller.signal.wait()

    other = asyncio.create_task(other_waiter())
    read = asyncio.create_task(collect(replay, signal=controller.signal))
    await reached.wait()

    read.cancel()
    with pytest.raises(asyncio.CancelledError):
        await read
    controller.abort({"kind": "user"})

    assert await other == {"kind": "user"}


async def test_an_unsubscribed_hang_listener_is_not_called() -> None:
    replay = provider({"root": {"replies": [{"hang": {}}]}})
    controller = AbortController()
    reached = asyncio.Event()
    heard: list[str] = []
    unsubscribe = replay.add_hang_listener(heard.append)
    replay.add_hang_listener(lambda key: reached.set())
    unsubscribe()

    read = asyncio.create_task(collect(replay, signal=controller.signal))
    await reached.wait()
    controller.abort({"kind": "user"})
    with pytest.raises(Aborted):
        await read

    assert heard == []


async def test_replay_provider_is_named_replay_and_closes_without_effect() -> None:
    replay = provider({"root": {"replies": [{"text": "a"}]}})

    await replay.aclose()

    assert replay.name == "replay"
    assert (await collect(replay))[0] == TextDelta("a")
