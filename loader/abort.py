"""Abort signals (SPEC §4.1).

An `AbortController` keeps the *first* reason it is given: a later `abort()` is a no-op. The signal's
`aborted` and `reason` are set before listeners run, so a listener that inspects the signal sees the
final state. The runtime classifies failures by `signal.aborted`, never by exception type.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

__all__ = ["AbortController", "AbortSignal", "Aborted", "CancelCause"]

logger = logging.getLogger(__name__)

CancelCause = dict[str, Any]
"""`{"kind": "user" | "parent" | "disposed" | "hook"}`, stored verbatim in `turn/end.reason.reason`."""


class Aborted(Exception):
    """Raised by `throw_if_aborted` and by awaits abandoned because their signal aborted."""

    def __init__(self, reason: CancelCause | None = None) -> None:
        super().__init__(f"aborted: {reason!r}")
        self.reason = reason


class AbortSignal:
    def __init__(self) -> None:
        self.aborted = False
        self.reason: CancelCause | None = None
        self._listeners: list[Callable[[CancelCause], None]] = []
        self._future: asyncio.Future[CancelCause] | None = None

    def throw_if_aborted(self) -> None:
        if self.aborted:
            raise Aborted(self.reason)

    def add_listener(self, fn: Callable[[CancelCause], None]) -> Callable[[], None]:
        """Call `fn(reason)` on abort (at once if already aborted). Returns an unsubscribe."""
        if self.aborted:
            _call_logged(fn, self.reason or {})
            return lambda: None
        self._listeners.append(fn)

        def remove() -> None:
            if fn in self._listeners:
                self._listeners.remove(fn)

        return remove

    def wait(self) -> asyncio.Future[CancelCause]:
        """One shared future per signal, completed on abort; calling it per await leaks nothing."""
        # A waiter cancelled while awaiting the shared future cancels it; hand out a fresh one.
        if self._future is None or self._future.cancelled():
            self._future = asyncio.get_running_loop().create_future()
            if self.aborted:
                self._future.set_result(self.reason or {})
        return self._future

    def _fire(self, reason: CancelCause) -> None:
        self.aborted = True
        self.reason = reason
        if self._future is not None and not self._future.done():
            self._future.set_result(reason)
        listeners, self._listeners = self._listeners, []
        for fn in listeners:
            _call_logged(fn, reason)


class AbortController:
    def __init__(self) -> None:
        self.signal = AbortSignal()

    def abort(self, reason: CancelCause) -> None:
        # First reason wins (§4.1): later aborts of the same activity change nothing.
        if self.signal.aborted:
            return
        self.signal._fire(dict(reason))


def _call_logged(fn: Callable[[CancelCause], None], reason: CancelCause) -> None:
    try:
        fn(reason)
    except Exception:
        logger.exception("abort listener failed")
