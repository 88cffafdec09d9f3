"""The reader workflow: one page of a tree's logs for a client without the workers' `--home`
(loader/engines/README.md "The stream over the server").

Workflow code: it only runs activity `dsh.stream_page` on the workers' queue and returns its page
(deterministic; imports nothing of dsh but the page types). One short workflow per page, under its
own id (`pages.stream_workflow_id`), so the stream adds nothing to the root's history.
"""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from dsh.loader.engines.pages import PASS_END, Page, PageAsk

__all__ = ["PAGE_ACTIVITY", "StreamReader"]

PAGE_ACTIVITY = "dsh.stream_page"
# The page activity heartbeats per read while it waits; silence this long means its worker is gone.
PAGE_HEARTBEAT = timedelta(seconds=10)
# Past its wait, reading one page is quick; a page still unread after this is retried elsewhere.
PAGE_READ = timedelta(seconds=60)
PAGE_RETRY = RetryPolicy(maximum_attempts=5)
# A page on a home queue that no worker of that home takes within this long is skipped this round.
PAGE_WAIT_HOME = timedelta(seconds=10)


@workflow.defn(name="dsh.stream")
class StreamReader:
    @workflow.run
    async def run(self, ask: PageAsk) -> Page:
        if not ask.queues:  # one home (or a run before homes): the shared queue, as recorded
            return await _page(ask, None)
        page = await _round(ask)
        if any(index != PASS_END for index, _ in page.pieces) or ask.wait_seconds <= 0:
            return page
        await _news(ask)  # quiet on every home: wait on all of them at once for a line
        return await _round(dataclasses.replace(ask, wait_seconds=0.0))


async def _page(ask: PageAsk, queue: str | None) -> Page:
    page: Page = await workflow.execute_activity(
        PAGE_ACTIVITY, ask, result_type=Page,
        start_to_close_timeout=timedelta(seconds=ask.wait_seconds) + PAGE_READ,
        heartbeat_timeout=PAGE_HEARTBEAT, retry_policy=PAGE_RETRY, task_queue=queue,
        # A home whose workers are all gone does not hold the stream of the rest of the tree.
        schedule_to_start_timeout=None if queue is None else PAGE_WAIT_HOME,
    )
    return page


async def _round(ask: PageAsk) -> Page:
    """One page over the homes in turn from the cursor's (`Cursor.home`), one cursor passed along:
    each log is in one home, so a home reads its own sessions and finds none of the others'. The
    pass ends (PASS_END) only after the last home, so an edge waiting for a child read on a later
    home waits for it; the page's budget is shared by the homes it reads."""
    cursor = ask.cursor
    pieces: list[list[Any]] = []
    budget = [ask.max_bytes, ask.max_lines]
    for k in range(cursor.home, len(ask.queues)):
        one = dataclasses.replace(ask, cursor=dataclasses.replace(cursor, home=0), wait_seconds=0.0,
                                  max_bytes=budget[0], max_lines=budget[1], queues=[])
        try:
            page = await _page(one, ask.queues[k])
        except ActivityError as exc:  # no worker of that home took it: its logs wait in the cursor
            workflow.logger.info("no page from %s: %r", ask.queues[k], exc)
            continue
        pieces.extend(p for p in page.pieces if p[0] != PASS_END)
        budget = [budget[0] - page.spent[0], budget[1] - page.spent[1]]
        if page.cursor.at != 0:  # full inside this home's pass: the next page goes on here
            return Page(pieces, dataclasses.replace(page.cursor, home=k), spent=[ask.max_bytes, ask.max_lines])
        cursor = page.cursor
        if k + 1 < len(ask.queues) and (budget[0] <= 0 or budget[1] <= 0):
            return Page(pieces, dataclasses.replace(cursor, home=k + 1), spent=[ask.max_bytes, ask.max_lines])
    pieces.append([PASS_END, ""])
    return Page(pieces, dataclasses.replace(cursor, home=0), spent=[ask.max_bytes - budget[0], ask.max_lines - budget[1]])


async def _news(ask: PageAsk) -> None:
    """A long-poll on every home at once: a one-line page from each (read, then let go), until the
    first answers or the wait passed; the others are cancelled."""
    probes = [asyncio.ensure_future(_page(dataclasses.replace(ask, max_lines=1, queues=[]), q)) for q in ask.queues]
    done, pending = await workflow.wait(probes, return_when=asyncio.FIRST_COMPLETED)
    for probe in pending:
        probe.cancel()
    for probe in done:
        if probe.exception() is not None:
            workflow.logger.info("a page probe failed: %r", probe.exception())
