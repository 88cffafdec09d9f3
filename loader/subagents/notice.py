"""The settlement notice (SPEC §9): runtime-authored, delivered inside the disposal transaction.

The notice is data first (`source.stopReason`), and its text is rendered from that data by a pure
function. Delivery never blocks or fails teardown and is never retried; a parent that is not live
simply loses it (the child's session is the record).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from loader.agent import text_block, user_message
from loader.agent.fold import STOP_REASONS
from loader.errors import error_chain
from loader.texts import TEXTS, render

if TYPE_CHECKING:
    from loader.subagents.activation import Activation
    from loader.subagents.manager import ContinuationManager

__all__ = ["SUMMARY_LIMIT", "notify_settlement", "render_settlement_notice", "settlement_message"]

logger = logging.getLogger(__name__)

SUMMARY_LIMIT = 120


def render_settlement_notice(
    child_id: str, stop_reason: str, output: list[dict[str, Any]] | None
) -> list[dict[str, Any]]:
    if stop_reason in STOP_REASONS:
        summary = render(f"T-NOTICE-{stop_reason}", id=child_id)
    else:
        summary = render("T-NOTICE-other", id=child_id, reason=stop_reason)
    blocks = [text_block(summary)]
    rendered: list[dict[str, Any]] = []
    for block in output or []:
        if block.get("type") == "text":
            rendered.append(text_block(block.get("text", "")))
        elif block.get("type") == "tool-call":
            rendered.append(
                text_block(render("T-NOTICE-TOOLCALL", name=block.get("name"), arguments=block.get("arguments")))
            )
        # reasoning blocks are dropped: the notice reports what the child said, not how it thought
    if rendered:
        blocks.append(text_block(TEXTS["T-NOTICE-OUTPUT"]))
        blocks.extend(rendered)
    else:
        blocks.append(text_block(TEXTS["T-NOTICE-NO-OUTPUT"]))
    return blocks


def _summary(text: str) -> str:
    return text if len(text) <= SUMMARY_LIMIT else text[: SUMMARY_LIMIT - 1] + "…"


def settlement_message(child_id: str, stop_reason: str, output: list[dict[str, Any]] | None) -> dict[str, Any]:
    content = render_settlement_notice(child_id, stop_reason, output)
    source = {
        "kind": "subagent-settled",
        "form": "notice",
        "summary": _summary(content[0]["text"]),
        "senderSessionId": child_id,
        "stopReason": stop_reason,
    }
    return user_message(content, source)


def notify_settlement(
    manager: ContinuationManager, a: Activation, stop_reason: str, output: list[dict[str, Any]] | None
) -> None:
    """Part of sync span S6; see §9.4 for what each parent state experiences."""
    if not a.announced:
        return  # a rolled-back materialization never accepted work
    try:
        parent = manager.registry.get(a.parent_session)
        if parent is None:
            return  # ordinary outcome: the child's session remains the record
        message = settlement_message(a.child_id, stop_reason, output)
        pa = manager.activations.get(parent.id)
        own = pa if pa is not None and pa.agent is parent else None
        if manager.closing_for(parent) is not None or (own is not None and own.disposal is not None):
            # A closing parent must not start a model turn for it (§24 item 3).
            parent.inject(message)
            return
        # Steer, not inject, for a running parent: a parent whose turn was already cancelled only
        # picks the notice up through the latch a waking send sets. Status read and send share S6.
        send = parent.followup if parent.status == "idle" else parent.steer
        if own is not None:
            manager.admit_waking(own, message["id"], lambda: send(message))
        else:
            send(message)
    except Exception as exc:
        logger.warning(TEXTS["T-LOG-NOTICE-FAILED"].format(id=a.child_id, detail=error_chain(exc)))
