"""The per-child lock (SPEC §4.3).

`run(child_id, op)` runs `op` after the previous op for that id has settled, whether it succeeded or
failed; a failure never propagates to later callers. The entry is removed when its chain is empty,
so the map holds only ids with work in flight.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

__all__ = ["ChildLock"]

T = TypeVar("T")


class ChildLock:
    def __init__(self) -> None:
        self._tails: dict[str, asyncio.Future[None]] = {}

    def __contains__(self, child_id: object) -> bool:
        return child_id in self._tails

    def tail(self, child_id: str) -> asyncio.Future[None] | None:
        """The last queued operation's future, or None when the lock is free (the watcher decides
        synchronously when it is, and after this future otherwise)."""
        return self._tails.get(child_id)

    async def run(self, child_id: str, op: Callable[[], Awaitable[T]]) -> T:
        previous = self._tails.get(child_id)
        mine: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._tails[child_id] = mine
        try:
            if previous is not None:
                await asyncio.shield(previous)
            return await op()
        finally:
            mine.set_result(None)
            if self._tails.get(child_id) is mine:
                del self._tails[child_id]
