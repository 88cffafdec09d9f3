"""Listing background subagents (SPEC §12.2 `list_agents`, reused by RPC `subagent.list`).

Reads session headers and descriptor lines under `$DSH_HOME/sessions` (cached by file size and
mtime, so repeated listings re-read only files that changed) and joins them with residency.

A session live in this process is read from memory, not from its file: appends are write-behind
(§5.4), so a child created a moment ago may not have its descriptor line on disk yet, and whether it
has would depend on when the store's write ran, i.e. on the machine's load. Rows are ordered by
`createdAt`; siblings this process built in the same millisecond keep their creation order
(`live_order`), never the order of their random ids, so a replay lists them the same way every run.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from dsh.loader.errors import SessionError
from dsh.loader.session import open_regular
from dsh.loader.subagents.activation import Activation

if TYPE_CHECKING:
    from dsh.loader.session import Session
    from dsh.loader.subagents.manager import ContinuationManager

__all__ = ["Catalogue", "CatalogueEntry", "list_agents", "status_of"]

_MAX_SCAN_LINES = 64


@dataclass(frozen=True)
class CatalogueEntry:
    id: str
    header: dict[str, Any] | None
    descriptor: dict[str, Any] | None
    live_order: int | None = None  # creation order among the sessions this process built

    @property
    def readable(self) -> bool:
        return self.header is not None


class Catalogue:
    def __init__(self, sessions_dir: Path, *, live: Callable[[str], Session | None] | None = None) -> None:
        self.sessions_dir = sessions_dir
        self._live = live  # the store's `get_live`: a live session is read from memory
        self._cache: dict[str, tuple[tuple[int, int], CatalogueEntry]] = {}
        self._live_order: dict[str, int] = {}

    def entries(self) -> list[CatalogueEntry]:
        out: list[CatalogueEntry] = []
        try:
            names = sorted(os.listdir(self.sessions_dir))
        except FileNotFoundError:
            return out
        for name in names:
            session = self._live(name) if self._live is not None else None
            if session is not None:
                out.append(self._from_memory(session))
                continue
            path = self.sessions_dir / name / "session.jsonl"
            try:
                st = path.stat()
            except OSError:
                continue
            key = (st.st_size, st.st_mtime_ns)
            cached = self._cache.get(name)
            if cached is None or cached[0] != key:
                cached = (key, _scan(name, path))
                self._cache[name] = cached
            order = self._live_order.get(name)
            out.append(cached[1] if order is None else replace(cached[1], live_order=order))
        return out

    def note_created(self, session_id: str) -> None:
        """Called as each agent of this process is built: the tie-break among same-millisecond rows."""
        self._live_order.setdefault(session_id, len(self._live_order))

    def _from_memory(self, session: Session) -> CatalogueEntry:
        order = self._live_order.get(session.id)
        descriptor = next(
            (e["data"] for e in session.events[:_MAX_SCAN_LINES] if e["type"] == "subagent/descriptor"), None
        )
        return CatalogueEntry(id=session.id, header=session.header, descriptor=descriptor, live_order=order)


def _scan(session_id: str, path: Path) -> CatalogueEntry:
    header: dict[str, Any] | None = None
    descriptor: dict[str, Any] | None = None
    try:
        with os.fdopen(open_regular(path, os.O_RDONLY), "rb") as f:  # no FIFO, no symlink (issue 15)
            for i, raw in enumerate(f):
                if i >= _MAX_SCAN_LINES or not raw.endswith(b"\n"):
                    break
                line = json.loads(raw)
                if i == 0:
                    if not isinstance(line, dict) or line.get("type") != "session":
                        break
                    header = line
                elif isinstance(line, dict) and line.get("type") == "subagent/descriptor":
                    descriptor = line.get("data")
                    break
    except (OSError, ValueError, SessionError):
        pass
    return CatalogueEntry(id=session_id, header=header, descriptor=descriptor)


Status = Literal["running", "parked", "idle", "ready"]


def status_of(manager: ContinuationManager, session_id: str) -> Status:
    a: Activation | None = manager.activations.get(session_id)
    if a is None:
        return "ready"
    if a.agent.status == "running":
        return "running"
    if a.parked:
        return "parked"
    return "idle"


def _listing_order(e: CatalogueEntry) -> tuple[int, int, str]:
    created = (e.header or {}).get("createdAt", 0)
    return (created if isinstance(created, int) else 0, e.live_order if e.live_order is not None else -1, e.id)


def list_agents(
    manager: ContinuationManager, catalogue: Catalogue, caller_id: str, scope: str = "children",
    extra: list[CatalogueEntry] | None = None,
) -> list[dict[str, Any]]:
    """`extra`: sessions known from elsewhere (the Temporal workflows of other homes' logs); the
    catalogue's own entry of a session wins."""
    entries = catalogue.entries()
    if extra:
        here = {e.id for e in entries}
        entries = entries + [e for e in extra if e.id not in here]
    by_parent: dict[str, list[CatalogueEntry]] = {}
    for e in entries:
        if e.header is None:
            continue  # without a header the parent is unknown: nothing to list it under
        parent = e.header.get("parentSession")
        if isinstance(parent, str) and e.header.get("origin") == "subagent":
            by_parent.setdefault(parent, []).append(e)
    for kids in by_parent.values():
        kids.sort(key=_listing_order)
    rows: list[dict[str, Any]] = []
    seen = {caller_id}

    def visit(parent_id: str, depth: int) -> None:
        for e in by_parent.get(parent_id, []):
            if e.id in seen:
                continue
            seen.add(e.id)
            mode = (e.descriptor or {}).get("mode")
            if e.descriptor is None:
                rows.append({"id": e.id, "diagnostic": "unreadable"})
            elif mode == "continuable":
                row: dict[str, Any] = {
                    "id": e.id,
                    "label": str(e.descriptor.get("label", "")),
                    "status": status_of(manager, e.id),
                }
                if scope == "descendants":
                    row["parent"] = parent_id
                    row["depth"] = depth
                rows.append(row)
            if scope == "descendants":
                visit(e.id, depth + 1)  # one-shot children are omitted but traversed

    visit(caller_id, 1)
    return rows
