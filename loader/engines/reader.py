"""The reader workflow: one page of a tree's logs for a client without the workers' `--home`
(loader/engines/README.md "The stream over the server").

Workflow code: it only runs activity `dsh.stream_page` on the workers' queue and returns its page
(deterministic; imports nothing of dsh but the page types). One short workflow per page, under its
own id (`pages.stream_workflow_id`), so the stream adds nothing to the root's history.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from dsh.loader.engines.pages import Page, PageAsk

__all__ = ["PAGE_ACTIVITY", "StreamReader"]

PAGE_ACTIVITY = "dsh.stream_page"
# The page activity heartbeats per read while it waits; silence this long means its worker is gone.
PAGE_HEARTBEAT = timedelta(seconds=10)
# Past its wait, reading one page is quick; a page still unread after this is retried elsewhere.
PAGE_READ = timedelta(seconds=60)
PAGE_RETRY = RetryPolicy(maximum_attempts=5)


@workflow.defn(name="dsh.stream")
class StreamReader:
    @workflow.run
    async def run(self, ask: PageAsk) -> Page:
        page: Page = await workflow.execute_activity(
            PAGE_ACTIVITY, ask, result_type=Page,
            start_to_close_timeout=timedelta(seconds=ask.wait_seconds) + PAGE_READ,
            heartbeat_timeout=PAGE_HEARTBEAT, retry_policy=PAGE_RETRY,
        )
        return page
