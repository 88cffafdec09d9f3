"""Cancelling the driver task itself (a hard stop) mid-stream (issue 14 item 5, §4.1, STYLE §7).

Cancellation normally travels by abort signal; `Task.cancel()` is the hard stop. The chunk race in
`loop._next_chunk` abandons a read when the signal aborts and swallows *that read's* cancellation,
but a cancellation of the driver task must always propagate: the task ends cancelled, the agent
still converges to idle, and the log still balances.

The provider here is a test double at the model seam: its stream yields one text chunk, then blocks
on a future the test never resolves, and records what happens to the blocked read.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from dsh.loader.agent import Agent, AgentRegistry, user_message
from dsh.loader.models import TextDelta
from dsh.loader.session import SessionStore, make_header, validate_log

BACKSTOP_SECONDS = 5.0


class BlockingProvider:
    """Streams `prefix`, then awaits `blocked` (never resolved). `reading` is set when the stream
    is parked there; `read_cancelled` when that read received its cancellation; `on_read_cancelled`
    runs at that moment, before the read unwinds."""

    name = "blocking"

    def __init__(self, prefix: str = "partial answer") -> None:
        self.prefix = prefix
        self.blocked: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.reading = asyncio.Event()
        self.read_cancelled = asyncio.Event()
        self.on_read_cancelled: Callable[[], None] | None = None

    def stream(self, request: Any, signal: Any, on_retry: Any) -> AsyncIterator[Any]:
        return self._stream()

    async def _stream(self) -> AsyncIterator[Any]:
        yield TextDelta(self.prefix)
        self.reading.set()
        try:
            await self.blocked
        except asyncio.CancelledError:
            self.read_cancelled.set()
            if self.on_read_cancelled is not None:
                self.on_read_cancelled()
            raise

    async def aclose(self) -> None:
        return None


async def start(home: Path) -> tuple[Agent, BlockingProvider, asyncio.Task[None]]:
    store = SessionStore(home, batch_delay_ms=0, fsync=False)
    session = await store.create(make_header("session-test-driver-cancel"))
    provider = BlockingProvider()
    agent = Agent(session, store=store, provider=provider, registry=AgentRegistry())  # type: ignore[arg-type]
    agent.followup(user_message("go"))
    [driver] = [t for t in asyncio.all_tasks() if t.get_name() == f"driver:{agent.id}"]
    await asyncio.wait_for(provider.reading.wait(), BACKSTOP_SECONDS)
    return agent, provider, driver


async def finish(agent: Agent, driver: asyncio.Task[None]) -> None:
    await asyncio.wait({driver}, timeout=BACKSTOP_SECONDS)
    assert driver.done(), "the driver did not end"
    await asyncio.wait_for(agent.when_idle(), BACKSTOP_SECONDS)
    await asyncio.wait_for(agent.dispose(), BACKSTOP_SECONDS)


def reasons(agent: Agent) -> list[dict[str, Any]]:
    return [e["data"]["reason"] for e in agent.session.events if e["type"] == "turn/end"]


def interrupted_prefixes(agent: Agent) -> list[str]:
    return [
        e["data"]["message"]["content"][0]["text"]
        for e in agent.session.events
        if e["type"] == "assistant/message" and e["data"].get("interrupted")
    ]


async def test_cancelling_the_driver_mid_stream_ends_it_cancelled_without_a_signal_abort(home):
    """The driver is cancelled while its read is blocked and no abort was ever issued. A user
    expects a hard stop, not a fake cancel: the task ends cancelled (the CancelledError is not
    turned into `Aborted`), the blocked read is cancelled too (it must not outlive the task), the
    agent converges to idle, and the log balances with one `turn/end`. No cancel cause exists, so
    the turn does not claim one: it is not `aborted` (that kind carries a cause, §6.10) but `error`
    with code UNKNOWN naming the cancellation, and no interrupted prefix is written (that is the
    signal-abort path, §6.8 step 3)."""
    agent, provider, driver = await start(home)

    driver.cancel()
    await finish(agent, driver)

    assert driver.cancelled()
    assert provider.read_cancelled.is_set()
    assert agent.status == "idle"
    [reason] = reasons(agent)
    assert reason["kind"] == "error" and reason["error"]["code"] == "UNKNOWN"
    assert "CancelledError" in reason["error"]["message"]
    assert interrupted_prefixes(agent) == []
    validate_log(agent.session.events)


async def test_a_driver_cancelled_while_its_abandoned_read_unwinds_still_ends_cancelled(home):
    """The user cancels the turn (signal abort, cause `user`), so the driver abandons the read; while
    it waits for that read to unwind, the driver task itself is cancelled. The read's own
    CancelledError is expected and swallowed, but the task's is not: the task ends cancelled instead
    of finishing as if only the signal had fired. The turn did end by the user's abort, so its
    `turn/end` is `aborted/user`, with the streamed prefix kept as an interrupted message, and the
    log balances."""
    agent, provider, driver = await start(home)
    provider.on_read_cancelled = driver.cancel  # lands while the driver awaits the abandoned read

    agent.cancel({"kind": "user"}, keep_inbox=True)
    await finish(agent, driver)

    assert provider.read_cancelled.is_set()
    assert driver.cancelled(), "the driver's own cancellation was swallowed"
    assert agent.status == "idle"
    assert reasons(agent) == [{"kind": "aborted", "reason": {"kind": "user"}}]
    assert interrupted_prefixes(agent) == ["partial answer"]
    validate_log(agent.session.events)


async def test_a_signal_abort_alone_still_ends_the_driver_normally(home):
    """Control for the two above: with only the signal aborted, the abandoned read's cancellation is
    swallowed and the driver finishes normally (not cancelled), the turn `aborted/user`."""
    agent, provider, driver = await start(home)

    agent.cancel({"kind": "user"}, keep_inbox=True)
    await finish(agent, driver)

    assert provider.read_cancelled.is_set()
    assert not driver.cancelled() and driver.exception() is None
    assert reasons(agent) == [{"kind": "aborted", "reason": {"kind": "user"}}]
    validate_log(agent.session.events)
