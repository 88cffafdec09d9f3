"""Where `dsh run --engine temporal` reads its tree's logs from (loader/engines/README.md "The stream
over the server"): the home it shares with the workers, or the server.

A `Feed` reads the logs into a `TreeProjection` (projection.py) and answers the end-of-run
questions that need the logs: the REPLAY_UNCONSUMED check's sessions and the root's output when the
root's result left it in the log. `HomeFeed` reads the client's own `--home` (the workers write
there); `ServerFeed` asks the workers for pages through reader workflows (reader.py), long-polled,
and keeps the bytes it was given. `choose_feed` takes the home only when the client can see the
tree's root log under it.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

from temporalio.client import Client

from dsh.loader.agent import run_outcome
from dsh.loader.engines.pages import PAGE_BYTES, PAGE_LINES, Cursor, Page, PageAsk, stream_workflow_id
from dsh.loader.engines.projection import TreeProjection, TreeTail, has_lines
from dsh.loader.engines.reader import StreamReader
from dsh.loader.engines.settle import logged_output
from dsh.loader.session import ReadResult, SessionStore
from dsh.loader.session.repair import parse
from dsh.loader.sinks import RunSinks

__all__ = ["HOMES_RPC", "LONG_POLL", "Feed", "HomeFeed", "ServerFeed", "StreamMode", "choose_feed"]

logger = logging.getLogger(__name__)

StreamMode = Literal["auto", "home", "server"]
# How long one page waits on the workers for a new line before it answers empty (the idle cost of
# a quiet tree: one short reader workflow per this long).
LONG_POLL = 5.0
# A reader workflow that nobody answers (no worker at all) gives up after this.
PAGE_RUN = timedelta(minutes=10)
# The root's query `homes` (the tree's home queues) before a page; with no worker answering it
# the page goes to the shared queue.
HOMES_RPC = timedelta(seconds=10)


class Feed:
    """One way of reading the tree's logs into `projection`."""

    projection: TreeProjection

    async def step(self, run: asyncio.Future[Any], interval: float) -> None:
        """Read what is new; return after at most about `interval` (home) or a long-poll (server),
        or as soon as `run` is done."""
        raise NotImplementedError

    async def drain(self) -> None:
        """One complete pass now: after the root workflow returned, every turn has closed its log,
        so this holds every line."""
        raise NotImplementedError

    def logs(self) -> dict[str, ReadResult]:
        """The sessions to check for REPLAY_UNCONSUMED (a superset of the tree is fine)."""
        raise NotImplementedError

    def root_output(self) -> str:
        """The root's output read from its log (`TreeResult.output_in_log`), as `settle.logged_output`."""
        raise NotImplementedError


class HomeFeed(Feed):
    def __init__(self, home: Path, tail: TreeTail) -> None:
        self.home = home
        self.projection = self.tail = tail

    async def step(self, run: asyncio.Future[Any], interval: float) -> None:
        self.tail.poll()
        await asyncio.wait({run}, timeout=interval)  # a periodic read, not an ordering

    async def drain(self) -> None:
        self.tail.poll(full=True)

    def logs(self) -> dict[str, ReadResult]:
        store = SessionStore(self.home)
        return {sid: store.read(sid) for sid in sorted(p.parent.name for p in store.sessions_dir.glob("*/session.jsonl"))}

    def root_output(self) -> str:
        return logged_output(self.home, self.projection.root_id)


class ServerFeed(Feed):
    """Pages from the workers: each a reader workflow `<root>/stream/<reader>/<n>` running
    `dsh.stream_page`. A page given up (the run ended while it waited) leaves the cursor where it
    was, so nothing is skipped or read twice."""

    def __init__(self, client: Client, task_queue: str, home: Path, projection: TreeProjection,
                 *, max_bytes: int = PAGE_BYTES, max_lines: int = PAGE_LINES, long_poll: float = LONG_POLL,
                 page_run: timedelta = PAGE_RUN, homes_rpc: timedelta = HOMES_RPC) -> None:
        self.client = client
        self.task_queue = task_queue
        self.home = str(home.resolve())
        self.projection = projection
        self.cursor = Cursor()
        self.reader = uuid.uuid4().hex[:12]
        self.pages = 0
        self.max_bytes, self.max_lines, self.long_poll = max_bytes, max_lines, long_poll
        self.page_run = page_run
        self.homes_rpc = homes_rpc  # the root's `homes` query waits this long for a worker

    async def homes(self) -> list[str]:
        """The home queues of the tree's sessions, as the root heard of them (README "Homes");
        [] before homes (or before the root's first activity): the shared queue."""
        try:
            found: list[str] = await self.client.get_workflow_handle(self.projection.root_id).query(
                "homes", result_type=list[str], rpc_timeout=self.homes_rpc)
        except Exception as exc:  # a root of a worker without homes, or not started yet
            logger.debug("no homes of %s: %r", self.projection.root_id, exc)
            return []
        return found

    async def page(self, wait: float, queues: list[str] | None = None) -> Page:
        """The next page from the current cursor (not yet fed), read on each of the tree's homes."""
        if queues is None:
            queues = await self.homes()
        self.pages += 1
        ask = PageAsk(home=self.home, root_id=self.projection.root_id, cursor=self.cursor, wait_seconds=wait,
                      max_bytes=self.max_bytes, max_lines=self.max_lines, queues=queues)
        return await self.client.execute_workflow(
            StreamReader.run, ask, id=stream_workflow_id(self.projection.root_id, self.reader, self.pages),
            task_queue=self.task_queue, execution_timeout=self.page_run)

    def feed(self, page: Page) -> None:
        self.cursor = page.cursor
        self.projection.feed(page)

    async def step(self, run: asyncio.Future[Any], interval: float) -> None:
        asked = asyncio.ensure_future(self.page(self.long_poll))
        try:
            await asyncio.wait({asked, run}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not asked.done():
                asked.cancel()  # the run ended: the drain reads from the same cursor
        if asked.done() and not asked.cancelled():
            self.feed(asked.result())

    async def drain(self) -> None:
        """Complete passes until one brings nothing new: on several homes a session read on a later
        home may have children on an earlier one, found the pass after (one pass on one home)."""
        queues = await self.homes()
        while True:
            fresh = False
            while True:
                page = await self.page(0.0, queues)
                self.feed(page)
                fresh = fresh or has_lines(page)
                if page.cursor.at == 0 and page.cursor.home == 0:
                    break
            if len(queues) <= 1 or not fresh:
                return

    def logs(self) -> dict[str, ReadResult]:
        raw = self.projection.raw or {}
        return {sid: parse(bytes(data), source=sid) for sid, data in raw.items()}

    def root_output(self) -> str:
        raw = (self.projection.raw or {}).get(self.projection.root_id, bytearray())
        return run_outcome(list(parse(bytes(raw), source=self.projection.root_id).events)).output


def root_log_visible(home: Path, root_id: str) -> bool:
    """The client sees the tree's root log (a complete header line) under its own `--home`."""
    try:
        with open(home / "sessions" / root_id / "session.jsonl", "rb") as f:
            return f.readline().endswith(b"\n")
    except (FileNotFoundError, NotADirectoryError):
        return False


async def choose_feed(mode: StreamMode, client: Client, task_queue: str, home: Path, root_id: str, sinks: RunSinks,
                      run: asyncio.Future[Any], interval: float, *, max_bytes: int = PAGE_BYTES,
                      max_lines: int = PAGE_LINES, long_poll: float = LONG_POLL) -> Feed:
    """`home` and `server` as asked; `auto`: the home when the tree's root log shows up under it,
    else the server, decided by whichever answers first (the workers' first page or the log),
    and the home once more after a page came, so a shared home always wins."""
    if mode == "home":
        return HomeFeed(home, TreeTail(home, root_id, sinks))
    feed = ServerFeed(client, task_queue, home, TreeProjection(root_id, sinks, keep=True),
                      max_bytes=max_bytes, max_lines=max_lines, long_poll=long_poll)
    if mode == "server":
        return feed
    first = asyncio.ensure_future(feed.page(feed.long_poll))
    try:
        while not root_log_visible(home, root_id):
            if first.done() or run.done():
                if root_log_visible(home, root_id):
                    break
                if first.done():
                    feed.feed(first.result())
                logger.info("the root log of %s is not under %s: streaming from the server", root_id, home)
                return feed
            await asyncio.wait({first, run}, timeout=interval)  # a periodic look, not an ordering
    finally:
        if not first.done():
            first.cancel()
    return HomeFeed(home, TreeTail(home, root_id, sinks))
