"""The live tree `dsh run` draws on a TTY (issue 11 item 2): one row per agent, and a line per
parked subagent while the run waits.

Rows: label (indented under its parent), the `<parent>/<child>` address `dsh interrupt` and
`dsh send` take (for the root's children that is `<root>/<child>`), state (`running`, `idle`,
`parked`, `settled: <stopReason>`), current turn, elapsed time and tokens (input + output).

Why it cannot change what the agents do: the model is updated only from the run's sinks (durable
events, lifecycle edges, the `waiting` entries of a stall), synchronously and without awaiting, and
nothing here schedules anything on the event loop. Elapsed time needs a periodic redraw; that runs
in rich's own refresh thread, which reads the model under `_lock` and writes only to stderr. So
under a transcript the order of agents stays the transcript's alone (SPEC §26 item 1), and stdout
(the answer, or `--json`'s NDJSON) is never written: the console is stderr's, and `Live` is told
not to redirect stdout.

Only `cli.run` imports this, inside the command, and only when stderr is a TTY: rich stays out of
start-up (tests/cli/test_startup.py).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from dsh.loader.texts import render

__all__ = ["LiveTree", "Row"]

STATE_STYLES = {"running": "green", "idle": "cyan", "parked": "yellow"}


@dataclass
class Row:
    session_id: str
    parent_id: str | None
    label: str
    created: float
    state: str = "idle"
    turn: int = 0
    tokens: int = 0
    ended: float | None = None  # set at settlement: elapsed stops there

    @property
    def address(self) -> str:
        return self.session_id if self.parent_id is None else f"{self.parent_id}/{self.session_id}"


class LiveTree:
    """The rows of one run, fed by `RunSinks` callbacks (`agent`, `event`, `lifecycle`, `waiting`)."""

    def __init__(self, console: Console, *, clock: Callable[[], float] = time.monotonic,
                 refresh_per_second: float = 2) -> None:
        self._console = console
        self._clock = clock
        self._lock = threading.Lock()
        self._rows: dict[str, Row] = {}
        self._waiting: list[dict[str, Any]] = []
        # redirect_stderr: warnings written while the tree is drawn go above it, not through it.
        self._live = Live(self, console=console, refresh_per_second=refresh_per_second,
                          redirect_stdout=False, redirect_stderr=True, transient=False)

    def __enter__(self) -> LiveTree:
        self._live.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._live.stop()

    def abandon(self) -> None:
        """Before `os._exit` (a second Ctrl-C): give the terminal its cursor back, since `stop()`
        will not run. Called on the loop's thread; writes to stderr only."""
        self._console.show_cursor(True)

    # --- sinks (called on the event loop's thread; each is synchronous) ---

    def agent(self, session_id: str, header: dict[str, Any]) -> None:
        parent = header.get("parentSession")
        with self._lock:
            row = self._rows.get(session_id)
            if row is None:
                self._rows[session_id] = Row(session_id, parent, "root" if parent is None else session_id[:8],
                                             created=self._clock())
            else:  # resumed in a new epoch: it runs again
                row.ended = None
        self._redraw()

    def event(self, session_id: str, event: dict[str, Any]) -> None:
        kind, data = event["type"], event["data"]
        with self._lock:
            row = self._rows.get(session_id)
            if row is None:
                return
            if kind == "subagent/descriptor":
                row.label = str(data.get("label") or row.label)
            elif kind == "turn/start":
                row.state, row.turn, row.ended = "running", int(data["turn"]), None
                self._waiting = [e for e in self._waiting if e["sessionId"] != session_id]
            elif kind == "turn/end":
                if row.state == "running":
                    row.state = "idle"
            elif kind == "assistant/message":
                usage = data.get("usage") or {}
                row.tokens += sum(int(usage.get(k) or 0) for k in ("inputTokens", "outputTokens"))
            else:
                return
        self._redraw()

    def lifecycle(self, edge: dict[str, Any]) -> None:
        with self._lock:
            row = self._rows.get(edge["sessionId"])
            if row is None:
                return
            if edge["name"] == "subagent/end":
                row.state, row.ended = f"settled: {edge.get('stopReason')}", self._clock()
                self._waiting = [e for e in self._waiting if e["sessionId"] != row.session_id]
            elif row.state.startswith("settled"):
                row.state = "idle"
        self._redraw()

    def waiting(self, entries: list[dict[str, Any]]) -> None:
        with self._lock:
            self._waiting = list(entries)
            for entry in entries:
                row = self._rows.get(entry["sessionId"])
                if row is not None:
                    row.state = "parked"
        self._redraw()

    def _redraw(self) -> None:
        if self._live.is_started:
            self._live.refresh()

    # --- rendering (the loop's thread or rich's refresh thread) ---

    def __rich__(self) -> RenderableType:
        now = self._clock()
        with self._lock:
            rows = [(depth, Row(**vars(row))) for depth, row in self._ordered()]
            waiting = list(self._waiting)
        table = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
        for column in ("agent", "address", "state", "turn", "elapsed", "tokens"):
            table.add_column(column, no_wrap=True, justify="right" if column in ("turn", "tokens") else "left")
        for depth, row in rows:
            state = Text(row.state, style=STATE_STYLES.get(row.state, "magenta"))
            elapsed = (row.ended if row.ended is not None else now) - row.created
            table.add_row("  " * depth + row.label, row.address, state, str(row.turn), _duration(elapsed),
                          str(row.tokens))
        lines = [Text(render("T-CLI-LIVE-WAITING", label=e.get("label") or e["sessionId"], send=e["send"]),
                      style="yellow") for e in waiting]
        return Group(table, *lines)

    def _ordered(self) -> list[tuple[int, Row]]:
        """Depth-first from the roots, children in creation order."""
        children: dict[str | None, list[Row]] = {}
        for row in self._rows.values():
            parent = row.parent_id if row.parent_id in self._rows else None
            children.setdefault(parent, []).append(row)
        out: list[tuple[int, Row]] = []

        def visit(parent: str | None, depth: int) -> None:
            for row in children.get(parent, []):
                out.append((depth, row))
                visit(row.session_id, depth + 1)

        visit(None, 0)
        return out


def _duration(seconds: float) -> str:
    total = max(0, int(seconds))
    minutes, secs = divmod(total, 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"
