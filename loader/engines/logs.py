"""A session's log on its home (loader/engines/README.md "Homes"): the header its first turn
writes there (`header_of`: the one its parent's `subagent` made, for a child), the catalogue
`list_agents` reads, which also names the children whose logs are on other homes, the children
a log shows its agent spawned (`spawned`), and the client's replay cursors rebuilt from a tree's
logs (`replay_over`).
"""

from __future__ import annotations

from typing import Any

from dsh.loader.engines.wire import ChildRef, TreeInput
from dsh.loader.models import ReplayProvider
from dsh.loader.session import ReadResult, make_header
from dsh.loader.subagents import Catalogue, CatalogueEntry
from dsh.loader.transcripts import Transcript

__all__ = ["Elsewhere", "header_of", "replay_over", "spawned"]


def replay_over(script: Transcript, logs: dict[str, ReadResult], root_id: str) -> ReplayProvider:
    """A replay of `script` bound over the tree of `root_id` in `logs` (the sessions whose parent is
    in it), in creation order as a resumed run binds them (tree.py), each cursor where its log
    shows it served: the client's REPLAY_UNCONSUMED check and its user's agent lookup. A child
    whose descriptor is not in its log yet is not bound (it would bind as a root)."""
    wanted = {root_id}
    changed = True
    while changed:  # the tree: sessions whose parent is in it
        changed = False
        for sid, log in logs.items():
            if sid not in wanted and log.header.get("parentSession") in wanted:
                wanted.add(sid)
                changed = True
    sessions: list[tuple[int, str, dict[str, Any] | None, list[dict[str, Any]]]] = []
    for sid in wanted & logs.keys():
        log = logs[sid]
        descriptor = next((e["data"] for e in log.events if e["type"] == "subagent/descriptor"), None)
        sessions.append((int(log.header.get("createdAt") or 0), sid, descriptor, log.events))
    replay = ReplayProvider(script)
    for _, sid, descriptor, events in sorted(sessions, key=lambda s: (s[0], s[1])):
        if sid == root_id or descriptor is not None:
            replay.resume_session(sid, None if sid == root_id else descriptor, events)
    return replay


class Elsewhere(Catalogue):
    """This home's catalogue, plus the children this run started whose logs may be on another
    home (README "Homes"): `list_agents` lists them from the header and descriptor their parent
    made, as it lists them from their logs when they are here."""

    def __init__(self, inner: Catalogue, children: list[ChildRef]) -> None:
        super().__init__(inner.sessions_dir, live=inner._live)
        self._made: dict[str, CatalogueEntry] = {}
        for child in children:
            if child.header is not None:
                self.add(child.header, child.descriptor)

    def add(self, header: dict[str, Any], descriptor: dict[str, Any]) -> None:
        self._made[str(header["id"])] = CatalogueEntry(str(header["id"]), header, descriptor)

    def entries(self) -> list[CatalogueEntry]:
        here = super().entries()
        seen = {e.id for e in here}
        return here + [e for sid, e in self._made.items() if sid not in seen]


def header_of(who: TreeInput) -> dict[str, Any]:
    """The session's header as the local engine makes it (its parent's `subagent` made a child's)."""
    if who.header is not None:
        return dict(who.header)
    return make_header(who.session_id, parent_session=who.parent_id, origin="subagent" if who.parent_id else None,
                       delegation_depth=who.depth, cwd=who.cwd)


def spawned(events: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(child session id, `subagent` call id) of each background child the log's agent started, in
    order: a `subagent` result's value names it. A turn binds `{{child:<callId>}}` from these, so
    its input need not carry every child the agent ever started (README "Large payloads")."""
    found: list[tuple[str, str]] = []
    for event in events:
        if event["type"] != "tool/result":
            continue
        data = event["data"]
        value = data.get("value")
        if isinstance(value, dict) and value.get("kind") == "continuable" and isinstance(data.get("callId"), str):
            found.append((str(value["sessionId"]), data["callId"]))
    return found
