"""Foreground one-shot children (SPEC §8.13): owned by one `subagent` tool call, exactly one turn.

Never in the Activation map (interrupting its id is a no-op) and never noticed: its output is the
tool result. It sees none of the delegation tools, so it cannot orphan descendants.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dsh.loader.abort import AbortSignal
from dsh.loader.agent import final_output, fold_consumed_work, one_shot_stop_reason, user_message
from dsh.loader.ids import new_child_id
from dsh.loader.session import make_header

if TYPE_CHECKING:
    from dsh.loader.agent import Agent
    from dsh.loader.subagents.manager import ContinuationManager

__all__ = ["OneShotResult", "run_one_shot"]


@dataclass(frozen=True)
class OneShotResult:
    session_id: str
    stop_reason: str
    output: list[dict[str, Any]]


async def run_one_shot(
    manager: ContinuationManager,
    parent: Agent,
    label: str,
    prompt: str,
    spawn_call_id: str | None,
    signal: AbortSignal,
) -> OneShotResult:
    manager.assert_admitting(parent)
    depth = manager.config.child_depth(parent)
    signal.throw_if_aborted()
    child_id = new_child_id()
    header = make_header(
        child_id, parent_session=parent.id, origin="subagent", delegation_depth=depth, cwd=parent.header.get("cwd")
    )
    descriptor = manager.config.descriptor("one-shot", label, spawn_call_id)
    child = await manager.agents.create(header, descriptor, "one-shot")
    off: Callable[[], None] = lambda: None  # noqa: E731
    try:
        child.followup(user_message(prompt, {"kind": "user"}))
        off = signal.add_listener(lambda _reason: child.cancel({"kind": "parent"}))
        await child.when_idle()
        events = child.session.events
        stop = one_shot_stop_reason(fold_consumed_work(events), owner_cancelled=signal.aborted)
        return OneShotResult(session_id=child_id, stop_reason=stop, output=final_output(events) or [])
    finally:
        off()
        await child.dispose()
