"""Reads started on the driver's task (issue 13, `stream_read._first_step`), for providers that declare
`reads_move_between_tasks` (the replay provider does).

A read that finishes without suspending returns on the driver's task: no task, future and
`asyncio.wait` per chunk. A read that suspends is finished on its own task and raced against the
abort exactly as before, so the hard-stop rules of test_driver_cancel.py hold for it too; they are
run here again over such a read. A provider that does not declare it (httpx's anyio cancel scopes
must be entered and exited on one task) gets every read on a task of its own.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import aclosing
from pathlib import Path
from typing import Any

from dsh.loader.agent import Agent, AgentRegistry, user_message
from dsh.loader.models import Finish, TextDelta
from dsh.loader.session import SessionStore, make_header, validate_log

from .test_driver_cancel import BlockingProvider, finish, interrupted_prefixes, reasons

BACKSTOP_SECONDS = 5.0


class MovableProvider(BlockingProvider):
    """`BlockingProvider` that may be read across tasks; `read_tasks` records the task each read
    step ran on (the first chunk's, then the blocked read's resumption)."""

    reads_move_between_tasks = True

    def __init__(self, prefix: str = "partial answer") -> None:
        super().__init__(prefix)
        self.read_tasks: list[asyncio.Task[Any] | None] = []
        self.rest: str | None = None  # when set, resolving `blocked` streams it and ends the reply

    async def _stream(self) -> AsyncIterator[Any]:
        self.read_tasks.append(asyncio.current_task())
        async with aclosing(super()._stream()) as blocking:  # the prefix, then the blocked read
            async for chunk in blocking:
                yield chunk
        self.read_tasks.append(asyncio.current_task())
        if self.rest is not None:
            yield TextDelta(self.rest)
            yield Finish("stop")


async def start(home: Path, provider: Any, reading: asyncio.Event | None = None) -> tuple[Agent, asyncio.Task[None]]:
    store = SessionStore(home, batch_delay_ms=0, fsync=False)
    session = await store.create(make_header("session-test-inline-reads"))
    agent = Agent(session, store=store, provider=provider, registry=AgentRegistry())
    agent.followup(user_message("go"))
    [driver] = [t for t in asyncio.all_tasks() if t.get_name() == f"driver:{agent.id}"]
    await asyncio.wait_for((reading or provider.reading).wait(), BACKSTOP_SECONDS)
    return agent, driver


def assistant_texts(agent: Agent) -> list[str]:
    return [b["text"] for e in agent.session.events if e["type"] == "assistant/message"
            for b in e["data"]["message"]["content"] if b.get("type") == "text"]


async def test_a_ready_chunk_is_read_on_the_driver_and_a_suspended_read_finishes_on_its_own_task(home):
    provider = MovableProvider()
    provider.rest = " and the rest"
    agent, driver = await start(home, provider)

    provider.blocked.set_result(None)
    await finish(agent, driver)

    first, resumed = provider.read_tasks
    assert first is driver
    assert resumed is not None and resumed is not driver
    assert "".join(assistant_texts(agent)) == "partial answer and the rest"
    assert reasons(agent) == [{"kind": "completed"}]
    validate_log(agent.session.events)


async def test_a_provider_that_does_not_declare_it_reads_on_a_task_of_its_own(home):
    class Pinned(MovableProvider):
        reads_move_between_tasks = False

    provider = Pinned()
    agent, driver = await start(home, provider)

    provider.blocked.set_result(None)
    await finish(agent, driver)

    first, resumed = provider.read_tasks
    assert first is not None and first is not driver and resumed is not driver
    validate_log(agent.session.events)


async def test_cancelling_the_driver_during_a_moved_read_ends_it_cancelled(home):
    provider = MovableProvider()
    agent, driver = await start(home, provider)

    driver.cancel()
    await finish(agent, driver)

    assert driver.cancelled()
    assert provider.read_cancelled.is_set()
    assert agent.status == "idle"
    [reason] = reasons(agent)
    assert reason["kind"] == "error" and "CancelledError" in reason["error"]["message"]
    assert interrupted_prefixes(agent) == []
    validate_log(agent.session.events)


async def test_a_driver_cancelled_while_its_abandoned_moved_read_unwinds_still_ends_cancelled(home):
    provider = MovableProvider()
    agent, driver = await start(home, provider)
    provider.on_read_cancelled = driver.cancel

    agent.cancel({"kind": "user"}, keep_inbox=True)
    await finish(agent, driver)

    assert provider.read_cancelled.is_set()
    assert driver.cancelled(), "the driver's own cancellation was swallowed"
    assert reasons(agent) == [{"kind": "aborted", "reason": {"kind": "user"}}]
    assert interrupted_prefixes(agent) == ["partial answer"]
    validate_log(agent.session.events)


async def test_a_signal_abort_during_a_moved_read_ends_the_driver_normally(home):
    provider = MovableProvider()
    agent, driver = await start(home, provider)

    agent.cancel({"kind": "user"}, keep_inbox=True)
    await finish(agent, driver)

    assert provider.read_cancelled.is_set()
    assert not driver.cancelled() and driver.exception() is None
    assert reasons(agent) == [{"kind": "aborted", "reason": {"kind": "user"}}]
    validate_log(agent.session.events)


async def test_the_run_budgets_wrapper_moves_its_reads_only_when_the_inner_provider_does(home):
    """`dsh run` wraps every agent's provider in a `BudgetedProvider` (`--max-requests`): it forwards
    the declaration, so a replayed fan-out keeps the inline reads and a live provider never gets them."""
    from dsh.loader.models.budget import RunBudget, RunLimits, BudgetedProvider

    budget = RunBudget(RunLimits())
    movable, pinned = MovableProvider(), BlockingProvider()
    assert BudgetedProvider(movable, budget).reads_move_between_tasks is True  # type: ignore[arg-type]
    assert BudgetedProvider(pinned, budget).reads_move_between_tasks is False  # type: ignore[arg-type]

    inner = MovableProvider()
    wrapped = BudgetedProvider(inner, budget)  # type: ignore[arg-type]
    agent, driver = await start(home, wrapped, inner.reading)
    driver.cancel()
    await finish(agent, driver)
    assert inner.read_tasks[0] is driver
