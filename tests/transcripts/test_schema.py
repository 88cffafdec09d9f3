"""Transcript schema rules that need no file (SPEC §15.1): reply forms and their served defaults."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from dsh.loader.transcripts import Reply, TranscriptSpec


def spec(agents: dict[str, Any]) -> TranscriptSpec:
    return TranscriptSpec.model_validate({"version": 1, "name": "t", "task": "T", "agents": agents})


@pytest.mark.parametrize(
    ("data", "form"),
    [
        pytest.param({"text": "hi"}, "message", id="text"),
        pytest.param({"usage": {"inputTokens": 1, "outputTokens": 1}}, "message", id="usage-only"),
        pytest.param({"error": {"code": "X", "message": "m"}, "text": "p"}, "error", id="error"),
        pytest.param({"hang": {"text": "p"}}, "hang", id="hang"),
        pytest.param({"hang": {}}, "hang", id="empty-hang"),
        pytest.param({"hang": None}, "hang", id="null-hang"),
    ],
)
def test_each_reply_has_exactly_one_form(data: dict[str, Any], form: str) -> None:
    assert Reply.model_validate(data).form == form


@pytest.mark.parametrize(
    "data",
    [
        pytest.param({}, id="empty"),
        pytest.param({"hang": {}, "text": "x"}, id="hang-and-text"),
        pytest.param(
            {"error": {"code": "X", "message": "m"}, "finish": "stop"}, id="error-and-finish"
        ),
        pytest.param(
            {"error": {"code": "X", "message": "m"}, "toolCalls": []}, id="error-and-calls"
        ),
        pytest.param({"text": "x", "colour": "red"}, id="unknown-key"),
    ],
)
def test_replies_mixing_forms_or_with_unknown_keys_are_rejected(data: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        Reply.model_validate(data)


def test_finish_defaults_to_tool_calls_with_tool_calls_and_stop_without() -> None:
    call = {"id": "a", "name": "report", "arguments": "{}"}

    assert Reply.model_validate({"toolCalls": [call]}).finish_reason == "tool-calls"
    assert Reply.model_validate({"text": "x"}).finish_reason == "stop"
    assert Reply.model_validate({"text": "x", "finish": "max-tokens"}).finish_reason == "max-tokens"


def test_string_arguments_are_kept_verbatim_even_when_not_json() -> None:
    reply = Reply.model_validate(
        {"toolCalls": [{"id": "a", "name": "report", "arguments": "{oops"}]}
    )

    assert reply.tool_calls is not None and reply.tool_calls[0].arguments == "{oops"


def test_snake_case_names_are_accepted_alongside_camel_case() -> None:
    reply = Reply.model_validate({"tool_calls": [{"id": "a", "name": "n", "arguments": {}}]})

    assert reply.tool_calls is not None and len(reply.tool_calls) == 1


def test_fences_and_overlays_are_parsed() -> None:
    fence = {"hold": {"agent": "root", "until": {"hangReached": {"agent": "root"}}}}
    loaded = TranscriptSpec.model_validate(
        {
            "version": 1,
            "name": "t",
            "task": "T",
            "overlays": ["quiet-reports"],
            "fences": [fence],
            "agents": {"root": {"replies": []}},
        }
    )

    assert loaded.overlays == ["quiet-reports"]
    assert [f.kind for f in loaded.fences] == ["hold"]
    assert loaded.fences[0].model_dump(by_alias=True, exclude_none=True) == fence


def test_fence_naming_an_unknown_agent_is_refused() -> None:
    fence = {"hold": {"agent": "root", "until": {"all": [{"turnEnded": {"agent": "ghost", "turn": 1}}]}}}
    with pytest.raises(ValueError, match="no agent 'ghost'"):
        TranscriptSpec.model_validate(
            {"version": 1, "name": "t", "task": "T", "fences": [fence], "agents": {"root": {"replies": []}}}
        )


def test_fence_with_two_kinds_is_refused() -> None:
    fence = {"hold": {"agent": "root", "until": {"parked": {"agent": "root"}}},
             "failCheckpoint": {"agent": "root"}}
    with pytest.raises(ValueError, match="exactly one of"):
        TranscriptSpec.model_validate(
            {"version": 1, "name": "t", "task": "T", "fences": [fence], "agents": {"root": {"replies": []}}}
        )


def test_two_children_may_not_claim_the_same_spawning_call() -> None:
    with pytest.raises(ValidationError, match="already the spawnedBy"):
        spec(
            {
                "root": {
                    "replies": [{"toolCalls": [{"id": "s", "name": "subagent", "arguments": {}}]}]
                },
                "a": {"spawnedBy": "s", "replies": []},
                "b": {"spawnedBy": "s", "replies": []},
            }
        )


def test_an_agent_may_not_be_spawned_by_its_own_tool_call() -> None:
    with pytest.raises(ValidationError, match="own tool call"):
        spec(
            {
                "root": {"replies": []},
                "a": {
                    "spawnedBy": "s",
                    "replies": [{"toolCalls": [{"id": "s", "name": "subagent", "arguments": {}}]}],
                },
            }
        )


def test_children_returns_every_agent_but_root() -> None:
    loaded = spec({"root": {"replies": []}, "w": {"order": 1, "replies": []}})

    assert list(loaded.children()) == ["w"]
