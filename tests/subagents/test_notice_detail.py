"""Issue 16 item 5: the notice names the failure.

A child whose epoch ended in `error` gets a notice whose outcome sentence carries the error's code
and a short message; a `max-tokens` epoch names the output tokens of the truncated message. Both
are data in the notice source first (`source.error`, `source.outputTokens`) and the text is
rendered from them. Refusals carry no details in the log, so their notice text is unchanged.
The wording is pinned byte-exact here (literals, not `render`), and again in tests/test_texts.py.
"""

from __future__ import annotations

from dsh.loader.agent import text_block
from dsh.loader.subagents import render_settlement_notice, settlement_message
from dsh.loader.subagents.notice import DETAIL_LIMIT, settlement_detail
from dsh.loader.texts import TEXTS

from ._manager_kit import assert_script_consumed, entered, log, signal, within

CHILD = "0123456789abcdef"


def _turn_end(reason: dict[str, object]) -> dict[str, object]:
    return {"type": "turn/end", "data": {"turn": 1, "reason": reason}}


def test_error_notice_names_code_and_message_byte_exact():
    detail = settlement_detail("error", [_turn_end({"kind": "error", "error": {"code": "RATE_LIMITED", "message": "slow down", "status": 429}})])
    assert detail == {"error": {"code": "RATE_LIMITED", "message": "slow down"}}
    blocks = render_settlement_notice(CHILD, "error", None, detail)
    assert [b["text"] for b in blocks] == [
        "Subagent 0123456789abcdef ran into an error (RATE_LIMITED: slow down) and did not complete its task.",
        "The subagent produced no output.",
    ]


def test_max_tokens_notice_names_the_output_tokens_byte_exact():
    message = {"type": "assistant/message", "data": {"finish": "max-tokens", "usage": {"inputTokens": 9, "outputTokens": 512}}}
    detail = settlement_detail("max-tokens", [message])
    assert detail == {"outputTokens": 512}
    assert render_settlement_notice(CHILD, "max-tokens", [text_block("half")], detail)[0]["text"] == (
        "Subagent 0123456789abcdef reached its output token limit (512 output tokens) with the task unfinished."
    )


def test_a_long_multi_line_error_message_is_shortened_to_one_bounded_line():
    long = "first line\n" + "x" * 400
    detail = settlement_detail("error", [_turn_end({"kind": "error", "error": {"code": "NETWORK", "message": long}})])
    short = detail["error"]["message"]
    assert "\n" not in short and len(short) == DETAIL_LIMIT and short.endswith("…")
    assert short.startswith("first line xxx")


def test_without_details_the_notice_keeps_the_plain_sentence_and_source():
    """No error data in the log (or a refusal, which never has any): the spec's sentence, no extra keys."""
    assert settlement_detail("error", [_turn_end({"kind": "aborted", "reason": None})]) == {}
    assert settlement_detail("refusal", [_turn_end({"kind": "blocked"})]) == {}
    message = settlement_message(CHILD, "error", None, detail={})
    assert message["content"][0]["text"] == TEXTS["T-NOTICE-error"].format(id=CHILD)
    assert "error" not in message["source"] and "outputTokens" not in message["source"]


def test_detail_is_data_in_the_source_and_only_for_its_own_stop_reason():
    error = {"error": {"code": "AUTH", "message": "bad key"}}
    source = settlement_message(CHILD, "error", None, detail=error)["source"]
    assert source["error"] == {"code": "AUTH", "message": "bad key"} and source["stopReason"] == "error"
    # An error detail never decorates another outcome's notice.
    other = settlement_message(CHILD, "completed", None, detail=error)
    assert "error" not in other["source"]
    assert other["content"][0]["text"] == TEXTS["T-NOTICE-completed"].format(id=CHILD)


async def test_child_whose_model_call_fails_sends_a_notice_with_the_error_code(make_tree):
    """End to end: the child's request fails RATE_LIMITED; the parent's notice names it."""
    tree = await make_tree({
        "root": {"replies": [{"text": "NOTED"}]},
        "child": {"order": 1, "replies": [{"error": {"code": "RATE_LIMITED", "message": "slow down", "status": 429}}]},
    })
    root = await tree.create_root()
    child_id, _ = await tree.manager.start_continuable(root, "c", "do it", "c", signal())
    await within(tree.wait_quiet(root))

    [notice] = entered(log(tree, root), "subagent-settled")
    assert notice["source"]["stopReason"] == "error"
    assert notice["source"]["error"] == {"code": "RATE_LIMITED", "message": "slow down"}
    assert notice["content"][0]["text"] == (
        f"Subagent {child_id} ran into an error (RATE_LIMITED: slow down) and did not complete its task."
    )
    assert_script_consumed(tree)


async def test_child_that_hits_the_token_limit_sends_a_notice_with_the_token_count(make_tree):
    tree = await make_tree({
        "root": {"replies": [{"text": "NOTED"}]},
        "child": {"order": 1, "replies": [{"text": "half an ans", "finish": "max-tokens", "usage": {"inputTokens": 3, "outputTokens": 77}}]},
    })
    root = await tree.create_root()
    child_id, _ = await tree.manager.start_continuable(root, "c", "do it", "c", signal())
    await within(tree.wait_quiet(root))

    [notice] = entered(log(tree, root), "subagent-settled")
    assert notice["source"]["outputTokens"] == 77
    assert [b["text"] for b in notice["content"]] == [
        f"Subagent {child_id} reached its output token limit (77 output tokens) with the task unfinished.",
        "Most recent output from the subagent:",
        "half an ans",
    ]
