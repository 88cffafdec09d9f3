"""What crosses the server for a client that cannot read the workers' `--home`: pages of the tree's
logs (loader/engines/README.md "The stream over the server").

Plain dataclasses of JSON values, so the reader workflow (reader.py) imports nothing else. The
page carries the logs' bytes as they are (base64), not parsed records: the client turns them into
records with the same code that reads a shared home (projection.py), so both paths emit the same
NDJSON for the same bytes read in the same passes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["PAGE_BYTES", "PAGE_LINES", "PASS_END", "Cursor", "Page", "PageAsk", "stream_workflow_id"]

# One page's log bytes and complete lines; a single line longer than PAGE_BYTES goes in pieces.
# Base64 adds a third: ~350 kB, under the SDK's 512 KiB payload warning and far under Temporal's
# 2 MB limit even with the cursor of a 1,000-agent tree (~60 kB).
PAGE_BYTES = 256 * 1024
PAGE_LINES = 5_000
# A piece whose session index is this marks the end of one pass over the tree's logs.
PASS_END = -1


def stream_workflow_id(root_id: str, reader: str, number: int) -> str:
    """A page's reader workflow: its own id, not on the root's history (a long stream would grow it),
    unique per client (`reader`) and page, so two clients of one tree never meet."""
    return f"{root_id}/stream/{reader}/{number}"


@dataclass
class Cursor:
    """Where a reader of one tree's logs stands.

    `sessions`: `[session_id, parent index or -1 for the root, byte offset]` in reading order (the
    order sessions joined the tree); an offset is at a line boundary except inside a line longer
    than a page. `at`: 0 when the next page starts a new pass (with a scan for new sessions), else
    one more than the index of the session where a pass cut short by a full page goes on.
    `home`: with several homes (`PageAsk.queues`), the one the next page starts on; a pass goes
    over every home in turn with this one cursor (each log is in one home, the others have none)."""

    sessions: list[list[Any]] = field(default_factory=list)
    at: int = 0
    home: int = 0


@dataclass
class PageAsk:
    """One page, asked of activity `dsh.stream_page` on the workers' queue."""

    home: str  # the submitter's `--home` (a worker started with its own home reads that instead)
    root_id: str
    cursor: Cursor
    wait_seconds: float = 0.0  # with nothing new, wait up to this long for a line (a long-poll)
    max_bytes: int = PAGE_BYTES
    max_lines: int = PAGE_LINES
    # The home queues of the tree's sessions (the root's query `homes`): the reader reads a page on
    # each in turn (README "Homes"). Empty: one page on the workers' shared queue, as before.
    queues: list[str] = field(default_factory=list)


@dataclass
class Page:
    """`pieces`: `[session index, base64 bytes]` in reading order, or `[PASS_END, ""]` after a
    complete pass; `cursor`: where the next page starts (its `sessions` name every index used)."""

    pieces: list[list[Any]]
    cursor: Cursor
    spent: list[int] = field(default_factory=lambda: [0, 0])  # [log bytes, lines] of the page's budget
