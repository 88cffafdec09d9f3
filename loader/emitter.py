"""Emit and waterfall listener lists (SPEC §4.1).

*Emit* calls plain listeners synchronously in registration order and logs each failure; a listener
that returns an awaitable gets it scheduled as a task whose failure is logged. A *waterfall* awaits its
listeners in order and lets failures propagate: that is the `pre_step` chain.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

__all__ = ["Emitter", "Waterfall"]

logger = logging.getLogger(__name__)

Listener = Callable[..., Any]
T = TypeVar("T")

_background: set[asyncio.Task[Any]] = set()


def _log_task_failure(task: asyncio.Task[Any]) -> None:
    _background.discard(task)
    if not task.cancelled() and task.exception() is not None:
        logger.error("listener task failed", exc_info=task.exception())


class Emitter:
    """Named synchronous events. Listeners are called as `fn(payload)`."""

    def __init__(self) -> None:
        # Copy-on-write tuples (issue 13): `on`/`off` build a new tuple, so an emit iterates the one
        # it read, unchanged by listeners added or removed meanwhile, without a copy per emit.
        self._listeners: dict[str, tuple[Listener, ...]] = {}

    def on(self, name: str, fn: Listener) -> Callable[[], None]:
        self._listeners[name] = (*self._listeners.get(name, ()), fn)

        def off() -> None:
            fns = self._listeners.get(name, ())
            if fn in fns:
                index = fns.index(fn)  # the first registration, as list.remove took
                self._listeners[name] = fns[:index] + fns[index + 1:]

        return off

    def on_each(self, fns: dict[str, Listener]) -> Callable[[], None]:
        """`on(name, fn)` for each pair, in order, with one `off` for all of them (issue 13: the
        registry's forwarders, 7 per agent, cost 7 `off` closures and 7 removals each)."""
        listeners = self._listeners
        for name, fn in fns.items():
            listeners[name] = (*listeners.get(name, ()), fn)

        def off() -> None:
            for name, fn in fns.items():
                present = listeners.get(name, ())
                if fn in present:
                    index = present.index(fn)
                    listeners[name] = present[:index] + present[index + 1:]

        return off

    def emit(self, name: str, payload: Any) -> None:
        fns = self._listeners.get(name)
        if not fns:
            return  # issue 13: most events have no listener; no awaitable check
        for fn in fns:  # a snapshot: listeners added or removed during the emit do not change who is called
            try:
                result = fn(payload)
            except Exception:
                logger.exception("listener for %s failed", name)
                continue
            if result is not None and inspect.isawaitable(result):
                task = asyncio.ensure_future(result)
                _background.add(task)
                task.add_done_callback(_log_task_failure)


class Waterfall(Generic[T]):
    """Ordered async listeners; lower `order` runs first, ties keep registration order."""

    def __init__(self) -> None:
        self._entries: list[tuple[int, int, Callable[[T], Awaitable[Any]]]] = []
        self._counter = 0
        # Invariant: _fns == tuple(fn for _, _, fn in _entries) (issue 13: read once per step).
        self._fns: tuple[Callable[[T], Awaitable[Any]], ...] = ()

    def add(self, fn: Callable[[T], Awaitable[Any]], *, order: int = 100) -> Callable[[], None]:
        self._counter += 1
        entry = (order, self._counter, fn)
        self._entries.append(entry)
        self._entries.sort(key=lambda e: (e[0], e[1]))
        self._fns = tuple(fn for _, _, fn in self._entries)

        def remove() -> None:
            if entry in self._entries:
                self._entries.remove(entry)
                self._fns = tuple(fn for _, _, fn in self._entries)

        return remove

    def listeners(self) -> tuple[Callable[[T], Awaitable[Any]], ...]:
        """A snapshot: listeners added or removed while these run do not change who is called."""
        return self._fns
