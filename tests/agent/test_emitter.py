"""The emit listener lists (SPEC §4.1): registration order, a snapshot per emit, failures logged.

Issue 13 keeps the listeners as copy-on-write tuples instead of copying the list at every emit;
these pin what the copy guaranteed.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from dsh.loader.emitter import Emitter


def test_listeners_added_or_removed_during_an_emit_do_not_change_who_that_emit_calls() -> None:
    events = Emitter()
    calls: list[str] = []
    offs: dict[str, Any] = {}

    def first(payload: Any) -> None:
        calls.append(f"first:{payload}")
        offs["second"]()  # removed during the emit: still called by this one
        events.on("x", lambda p: calls.append(f"late:{p}"))  # added during it: not called

    def second(payload: Any) -> None:
        calls.append(f"second:{payload}")

    events.on("x", first)
    offs["second"] = events.on("x", second)
    events.emit("x", 1)
    assert calls == ["first:1", "second:1"]
    calls.clear()
    offs["first"] = None
    events.emit("x", 2)
    assert calls[:1] == ["first:2"] and "second:2" not in calls and "late:2" in calls


def test_off_removes_one_registration_and_after_the_last_one_is_harmless() -> None:
    events = Emitter()
    calls: list[int] = []
    fn = calls.append
    off_a = events.on("x", fn)
    events.on("x", fn)
    off_a()
    events.emit("x", 7)
    assert calls == [7]
    off_a()
    off_a()
    events.emit("x", 8)
    assert calls == [7]


async def test_a_failing_listener_is_logged_and_an_async_one_is_scheduled(caplog: pytest.LogCaptureFixture) -> None:
    events = Emitter()
    done = asyncio.Event()

    def boom(_: Any) -> None:
        raise RuntimeError("boom")

    async def later(_: Any) -> None:
        done.set()

    events.on("x", boom)
    events.on("x", later)
    with caplog.at_level(logging.ERROR):
        events.emit("x", None)
    await asyncio.wait_for(done.wait(), 5)  # backstop only
    assert any("listener for x failed" in r.getMessage() for r in caplog.records)
