"""The assembler turns a chunk stream into one assistant message (SPEC §13.1).

Pure unit tests: no loop, no provider; chunks are fed by hand in the shapes providers produce.
"""

from __future__ import annotations

import pytest

from dsh.loader.errors import ProviderError
from dsh.loader.models import (
    Assembler,
    Finish,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    Usage,
)
from dsh.loader.models.protocol import Chunk


def assemble(*chunks: Chunk) -> Assembler:
    assembler = Assembler()
    for chunk in chunks:
        assembler.feed(chunk)
    return assembler


def test_split_tool_call_deltas_with_id_and_name_only_on_the_first_make_one_call() -> None:
    result = assemble(
        ToolCallDelta(0, "call-abc", "subagent", '{"pro'),
        ToolCallDelta(0, None, None, 'mpt": "go"'),
        ToolCallDelta(0, None, None, "}"),
        Finish("tool-calls"),
    ).result()

    assert result.content == [
        {"type": "tool-call", "id": "call-abc", "name": "subagent", "arguments": '{"prompt": "go"}'}
    ]
    assert result.finish == "tool-calls"


def test_first_id_and_name_seen_win_over_later_ones() -> None:
    result = assemble(
        ToolCallDelta(0, "first", "report", "{}"),
        ToolCallDelta(0, "second", "subagent", ""),
        Finish("tool-calls"),
    ).result()

    assert result.content[0]["id"] == "first"
    assert result.content[0]["name"] == "report"


def test_text_and_reasoning_are_concatenated_into_one_block_each() -> None:
    result = assemble(
        TextDelta("Hel"),
        ReasoningDelta("think "),
        TextDelta("lo"),
        ReasoningDelta("hard"),
        Finish("stop"),
    ).result()

    assert result.content == [
        {"type": "reasoning", "text": "think hard"},
        {"type": "text", "text": "Hello"},
    ]


def test_blocks_are_ordered_reasoning_text_tool_calls_whatever_the_chunk_order() -> None:
    result = assemble(
        ToolCallDelta(1, "b", "report", "{}"),
        TextDelta("answer"),
        ToolCallDelta(0, "a", "subagent", "{}"),
        ReasoningDelta("why"),
        Finish("tool-calls"),
    ).result()

    assert [(b["type"], b.get("id")) for b in result.content] == [
        ("reasoning", None),
        ("text", None),
        ("tool-call", "a"),
        ("tool-call", "b"),
    ]


def test_empty_text_and_reasoning_blocks_are_omitted() -> None:
    result = assemble(TextDelta(""), ReasoningDelta(""), Finish("stop")).result()

    assert result.content == []


def test_missing_call_ids_are_minted_from_the_index() -> None:
    result = assemble(
        ToolCallDelta(0, None, "report", "{}"),
        ToolCallDelta(3, None, "report", "{}"),
        Finish("tool-calls"),
    ).result()

    assert [b["id"] for b in result.content] == ["call-0", "call-3"]


def test_a_minted_id_never_collides_with_an_id_the_provider_gave() -> None:
    result = assemble(
        ToolCallDelta(0, None, "report", "{}"),
        ToolCallDelta(1, "call-0", "report", "{}"),
        Finish("tool-calls"),
    ).result()

    ids = [b["id"] for b in result.content]
    assert ids[1] == "call-0"
    assert ids[0] != "call-0" and ids[0].startswith("call-0")


def test_empty_arguments_become_an_empty_json_object() -> None:
    result = assemble(ToolCallDelta(0, "x", "list_agents", ""), Finish("tool-calls")).result()

    assert result.content[0]["arguments"] == "{}"


def test_usage_maps_to_camel_case_keys_and_omits_absent_cache_reads() -> None:
    plain = assemble(Usage(12, 3), Finish("stop")).result()
    cached = assemble(Usage(12, 3, cache_read_tokens=7), Finish("stop")).result()

    assert plain.usage == {"inputTokens": 12, "outputTokens": 3}
    assert cached.usage == {"inputTokens": 12, "outputTokens": 3, "cacheReadTokens": 7}


def test_usage_is_none_when_the_stream_carried_none() -> None:
    assert assemble(TextDelta("x"), Finish("stop")).result().usage is None


def test_usage_after_finish_is_kept() -> None:
    result = assemble(TextDelta("x"), Finish("max-tokens"), Usage(1, 2)).result()

    assert result.usage == {"inputTokens": 1, "outputTokens": 2}
    assert result.finish == "max-tokens"


def test_a_stream_without_finish_is_an_incomplete_stream() -> None:
    assembler = assemble(TextDelta("half"), Usage(1, 1))

    with pytest.raises(ProviderError) as info:
        assembler.result()

    assert info.value.code == "INCOMPLETE_STREAM"


def test_partial_content_keeps_reasoning_and_text_but_not_tool_calls() -> None:
    assembler = assemble(
        TextDelta("par"),
        ToolCallDelta(0, "c", "report", '{"out'),
        ReasoningDelta("r"),
        TextDelta("tial"),
    )

    assert assembler.partial_content() == [
        {"type": "reasoning", "text": "r"},
        {"type": "text", "text": "partial"},
    ]
