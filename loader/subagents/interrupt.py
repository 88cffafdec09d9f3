"""Interrupt (SPEC §10): stop a resident child's current turn without destroying it.

`interrupt` is a plain function (span S8): it authorizes, issues `cancel(cause, keep_inbox=True)` and
returns without waiting. It disposes, releases, cascades, clears and closes nothing, so unclaimed
queued work survives, parked, until a waking send resumes it in FIFO order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from dsh.loader.subagents.errors import err

if TYPE_CHECKING:
    from dsh.loader.agent import Agent
    from dsh.loader.subagents.manager import ContinuationManager

__all__ = ["AncestorAuthority", "Authority", "UserAuthority", "interrupt"]


@dataclass(frozen=True)
class UserAuthority:
    """A human presenting the durable direct-parent address; no live parent agent is needed."""

    parent_session_id: str


@dataclass(frozen=True, eq=False)
class AncestorAuthority:
    """An exact live ancestor agent (direct parent or deeper)."""

    agent: Agent


Authority = UserAuthority | AncestorAuthority


def interrupt(manager: ContinuationManager, target: str, authority: Authority) -> None:
    # Sync span S8: every check and the cancel happen before this returns; nothing is awaited.
    if isinstance(authority, AncestorAuthority):
        caller = authority.agent
        if manager.registry.get(caller.id) is not caller:
            raise err("UNAUTHORIZED", "T-ERR-STALE", aid=caller.id)
        if caller.id == target:
            raise err("UNAUTHORIZED", "T-ERR-SELF", aid=caller.id)
        a = manager.activations.get(target)
        if a is None or not a.resident:
            return  # accepted no-op: unknown, one-shot, settled or still materializing
        if caller not in a.ancestry:
            raise err("UNAUTHORIZED", "T-ERR-NOT-DESCENDANT", aid=caller.id, id=target)
        if a.disposal is not None:
            return
        a.agent.cancel({"kind": "parent"}, keep_inbox=True)
        return
    a = manager.activations.get(target)
    if a is None or not a.resident:
        return
    if a.agent.header.get("parentSession") != authority.parent_session_id:
        raise err("UNAUTHORIZED", "T-ERR-NOT-PARENT", id=target)
    if a.disposal is not None:
        return
    a.agent.cancel({"kind": "user"}, keep_inbox=True)
