"""The root's run outcome (SPEC §7.4): stop reason, final text and summed usage over the events one
run appended. `dsh run` prints and exits by it, so every part is pinned here, table-driven over
synthetic logs (the mutation run's selection reaches this file; the headless tests it backs do not)."""

from __future__ import annotations

from typing import Any

import pytest

from dsh.loader.agent import run_outcome


def event(type: str, seq: int, **data: Any) -> dict[str, Any]:
    return {"type": type, "seq": seq, "time": 0, "data": data}


def said(seq: int, *blocks: dict[str, Any], usage: dict[str, Any] | None = None) -> dict[str, Any]:
    data: dict[str, Any] = {"message": {"role": "assistant", "content": list(blocks)}}
    if usage is not None:
        data["usage"] = usage
    return event("assistant/message", seq, **data)


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def turn(kind: str, *middle: dict[str, Any]) -> list[dict[str, Any]]:
    """One turn that claimed work and stepped, with `middle` inside its step."""
    events = [
        event("turn/start", 0, turn=1),
        event("agent/inbox/spliced", 1, target="next-turn", start=0, inserted=[], removedCount=1),
        event("step/start", 2, turn=1, step=1),
        *middle,
        event("step/end", 90, turn=1, step=1),
        event("turn/end", 91, turn=1, reason={"kind": kind}),
    ]
    return events


@pytest.mark.parametrize(("kind", "stop"), [
    ("completed", "completed"), ("max-tokens", "max-tokens"), ("aborted", "aborted"),
    ("blocked", "refusal"), ("error", "error"), ("interrupted", "error"),
])
def test_the_stop_reason_is_the_last_turn_end_mapped_for_one_shot_runs(kind: str, stop: str) -> None:
    outcome = run_outcome(turn(kind, said(3, text("x"))))

    assert outcome.stop_reason == stop
    assert outcome.end is not None and outcome.end["data"]["reason"] == {"kind": kind}


def test_a_run_that_ended_no_turn_has_no_end_and_is_an_error() -> None:
    outcome = run_outcome([event("agent/inbox/spliced", 0, target="next-turn", start=0, inserted=[{"id": "m"}])])

    assert (outcome.stop_reason, outcome.end, outcome.output) == ("error", None, "")


def test_the_output_is_the_last_reply_with_text_and_its_text_blocks_joined() -> None:
    events = turn(
        "completed",
        said(3, text("first")),
        said(4, text("second, "), {"type": "tool-call", "id": "c", "name": "t", "arguments": {}}, text("whole")),
        said(5, {"type": "tool-call", "id": "d", "name": "t", "arguments": {}}),  # no text: keeps the last
        said(6),  # usage-only
    )

    assert run_outcome(events).output == "second, whole"


def test_a_text_block_without_text_counts_as_empty() -> None:
    assert run_outcome(turn("completed", said(3, text("kept")), said(4, {"type": "text"}))).output == "kept"


def test_usage_sums_every_integer_count_over_the_run_starting_from_zero() -> None:
    events = turn(
        "completed",
        said(3, text("a"), usage={"inputTokens": 10, "outputTokens": 3, "cacheReadTokens": 4}),
        said(4, text("b"), usage={"inputTokens": 5, "outputTokens": 2, "note": "not a count", "ratio": 0.5}),
        said(5, text("c")),  # no usage at all
        said(6, text("d"), usage=None),
    )

    assert run_outcome(events).usage == {"inputTokens": 15, "outputTokens": 5, "cacheReadTokens": 4}


def test_a_run_without_replies_reports_zero_usage_and_no_output() -> None:
    outcome = run_outcome(turn("error"))

    assert (outcome.usage, outcome.output) == ({"inputTokens": 0, "outputTokens": 0}, "")


def test_only_assistant_messages_count_for_output_and_usage() -> None:
    events = turn(
        "completed",
        said(3, text("the answer"), usage={"inputTokens": 1, "outputTokens": 1}),
        event("user/message", 4, id="u", role="user", content=[text("not output")], usage={"inputTokens": 99}),
    )

    outcome = run_outcome(events)

    assert (outcome.output, outcome.usage) == ("the answer", {"inputTokens": 1, "outputTokens": 1})
