"""A Temporal tree's logs gathered from every home over the server, for `dsh sessions show/tree`
(loader/engines/README.md "Homes": the views read one home, the tree's logs may be on several).

The same page reader as the client's stream (stream.py `ServerFeed`: reader workflows `dsh.stream`
running `dsh.stream_page` on each home queue the root names in its query `homes`, one cursor per
session) drains the tree once, keeping each session's bytes; `write_home` lays them out as a home
(`sessions/<id>/session.jsonl`) so the views answer with the very code that reads a local home.

Invariants:
- the views still read the client's own home whenever it holds the whole tree (`whole_here`): the
  root log is there and every home queue the root heard of is this home's (none: one shared home);
- a gathered session id becomes a path only after `check_session_id` (the ids come from the
  workers' directory names, not from this machine);
- the bytes are complete lines only (the page reader never hands on a torn tail), so a gathered
  log reads as the local view would read it once its writer closed it.
"""

from __future__ import annotations

import logging
import os
from datetime import timedelta
from pathlib import Path

import temporalio.exceptions
from temporalio.client import Client, WorkflowFailureError
from temporalio.service import RPCError, RPCStatusCode

from dsh.loader.engines.homes import HOME_ID_FILE, home_queue
from dsh.loader.engines.projection import TreeProjection
from dsh.loader.engines.stream import HOMES_RPC, ServerFeed, root_log_visible
from dsh.loader.ids import check_session_id, is_valid_session_id
from dsh.loader.sinks import RunSinks
from dsh.loader.texts import render

__all__ = ["gather", "root_of", "roots_on", "whole_here", "write_home"]

logger = logging.getLogger(__name__)

# A page of a finished tree needs no wait: its reader workflow runs as soon as a worker takes it, a
# home with no worker is skipped after `reader.PAGE_WAIT_HOME` (10 s). With no worker at all it
# would wait the stream's `PAGE_RUN` (10 min); a view gives up after this instead and says why.
GATHER_PAGE_RUN = timedelta(minutes=2)


def _own_token(home: Path) -> str | None:
    """This home's id when a worker ever served it (`homes.home_id` makes it); never created here."""
    try:
        fd = os.open(home / HOME_ID_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return os.read(fd, 256).decode("ascii", "replace").strip() or None
    finally:
        os.close(fd)


async def whole_here(client: Client, task_queue: str, home: Path, root_id: str) -> bool:
    """Whether `home` holds every log of the tree: its root log is here and the root heard of no
    home but this one (a tree on one shared home, or workers without homes, names none)."""
    if not root_log_visible(home, root_id):
        return False
    feed = ServerFeed(client, task_queue, home, TreeProjection(root_id, RunSinks()))
    queues = await feed.homes()
    own = _own_token(home)
    return all(own is not None and q == home_queue(task_queue, own) for q in queues)


async def root_of(client: Client, session_id: str) -> str | None:
    """The root of the tree whose workflows hold `session_id`: itself when it is a root's
    workflow id, else the `<root>/<child>` workflow's root; None when the server has neither (a
    one-shot child has no workflow of its own)."""
    try:
        await client.get_workflow_handle(session_id).describe()
        return session_id
    except RPCError as exc:
        if exc.status != RPCStatusCode.NOT_FOUND:
            raise
    async for w in client.list_workflows('WorkflowType = "dsh.agent"'):
        if w.id.endswith(f"/{session_id}"):
            return w.id.split("/", 1)[0]
    return None


async def roots_on(client: Client, task_queue: str) -> list[str]:
    """The root sessions of the trees run on `task_queue`, by a visibility listing of dsh's
    workflows (a root's workflow id is its session id: no `/`), each once (its runs are one tree)."""
    if not task_queue or any(c in task_queue for c in "'\"\\"):
        raise ValueError(f"a task queue to list by: {task_queue!r}")  # it goes into the query's quotes
    found: dict[str, None] = {}
    async for w in client.list_workflows(f'WorkflowType = "dsh.agent" AND TaskQueue = "{task_queue}"'):
        if "/" not in w.id and is_valid_session_id(w.id):
            found[w.id] = None
    return sorted(found)


async def gather(client: Client, task_queue: str, home: Path, root_id: str,
                 page_run: timedelta = GATHER_PAGE_RUN) -> dict[str, bytes]:
    """Every session log of the tree, by session id, read over the server from each of its homes
    (complete passes until one brings nothing new, as the stream's final drain). A page no worker
    read within `page_run` raises TimeoutError (T-ENGINE-NO-PAGES) instead of waiting on."""
    # No worker answers the root's `homes` query either then: it waits no longer than a page would.
    feed = ServerFeed(client, task_queue, home, TreeProjection(root_id, RunSinks(), keep=True), page_run=page_run,
                      homes_rpc=min(HOMES_RPC, page_run))
    try:
        await feed.drain()
    except WorkflowFailureError as exc:
        if not isinstance(exc.cause, temporalio.exceptions.TimeoutError):
            raise
        raise TimeoutError(render("T-ENGINE-NO-PAGES", queue=task_queue, root=root_id,
                                  seconds=f"{page_run.total_seconds():g}")) from exc
    logs = {sid: bytes(data) for sid, data in (feed.projection.raw or {}).items()}
    logger.info("gathered %d logs of %s over the server", len(logs), root_id)
    return logs


def write_home(logs: dict[str, bytes], home: Path) -> None:
    """`logs` as a home's `sessions/` under `home` (a private directory the caller made and removes),
    directories 0700 and files 0600 as the store makes them."""
    for sid, data in logs.items():
        check_session_id(sid)
        directory = home / "sessions" / sid
        directory.mkdir(mode=0o700, parents=True)
        fd = os.open(directory / "session.jsonl", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
