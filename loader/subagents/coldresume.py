"""The header side of a cold resume (SPEC §8.7, §22): read the child's log, authorize the caller
against its header read-only, and only then load (and so repair) the session."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from dsh.loader.abort import AbortSignal
from dsh.loader.errors import DshError, SessionError
from dsh.loader.session import Session
from dsh.loader.subagents.errors import err

if TYPE_CHECKING:
    from dsh.loader.agent import Agent
    from dsh.loader.session import SessionStore

__all__ = ["read_resumable"]


async def read_resumable(
    store: SessionStore,
    parent: Agent,
    child_id: str,
    signal: AbortSignal,
    assert_admitting: Callable[[], None],
) -> tuple[Session, dict[str, Any]]:
    """The loaded session of `parent`'s continuable child and its descriptor, or a typed refusal."""
    try:
        if store.inline_io:  # replay: no thread decides the order (SPEC §26 item 1)
            found = store.read(child_id)
        else:
            found = await asyncio.to_thread(store.read, child_id)
    except SessionError as exc:
        signal.throw_if_aborted()
        raise err("NOT_RESUMABLE", "T-ERR-NOT-FOUND", id=child_id) from exc
    signal.throw_if_aborted()
    assert_admitting()
    # Authorize against the header read-only, before anything is written or repaired (§22).
    if found.header.get("parentSession") != parent.id:
        raise err("UNAUTHORIZED", "T-ERR-NOT-PARENT", id=child_id)
    descriptor = next((e["data"] for e in found.events if e["type"] == "subagent/descriptor"), None)
    if descriptor is None or descriptor.get("mode") != "continuable":
        raise err("NOT_RESUMABLE", "T-ERR-NOT-CONTINUABLE", id=child_id)
    try:
        session = await store.load(child_id)
    except DshError as exc:
        raise err("NOT_RESUMABLE", "T-ERR-NOT-FOUND", id=child_id) from exc
    return session, descriptor
