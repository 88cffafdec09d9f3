"""Report (SPEC §11): a child-authored message to its direct parent.

A report crosses exactly one edge, never cold-resumes a parent, never ends the child's turn and is
not retracted if the child is later cancelled. `wakeup` steers (through `admit_waking` for a
resident parent); `quiet` injects and waits for another waking input.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dsh.loader.abort import AbortSignal
from dsh.loader.agent import Message, text_block, user_message
from dsh.loader.subagents.errors import err
from dsh.loader.texts import render

if TYPE_CHECKING:
    from dsh.loader.agent import Agent
    from dsh.loader.subagents.manager import ContinuationManager

__all__ = ["report_from", "report_message"]


def report_message(child_id: str, content: str) -> Message:
    """The report as the parent reads it (T-REPORT-RELAY, then the child's words); both engines."""
    return user_message(
        [text_block(render("T-REPORT-RELAY", id=child_id)), text_block(content)],
        {"kind": "subagent-report", "form": "relay", "senderSessionId": child_id},
    )


def report_from(manager: ContinuationManager, child: Agent, content: str, signal: AbortSignal) -> str:
    signal.throw_if_aborted()
    # Sync span S9 from here: the report cannot race its own admission.
    manager.assert_admitting(child)
    a = manager.activations.get(child.id)
    if a is None or a.agent is not child:
        raise err("UNAUTHORIZED", "T-ERR-NOT-REPORTER")
    if a.disposal is not None:
        raise err("ACTIVATION_CLOSING", "T-ERR-CLOSING-REPORT")
    parent = manager.registry.get(str(child.header.get("parentSession")))
    if parent is None:
        raise err("PARENT_UNAVAILABLE", "T-ERR-PARENT-GONE")
    message = report_message(child.id, content)
    try:
        if manager.config.report_delivery == "quiet":
            parent.inject(message)
        else:
            pa = manager.activations.get(parent.id)
            if pa is not None and pa.agent is parent:
                manager.admit_waking(pa, message["id"], lambda: parent.steer(message))
            else:
                parent.steer(message)
    except Exception as exc:
        raise err("PARENT_UNAVAILABLE", "T-ERR-PARENT-GONE") from exc
    return str(message["id"])
