"""A session's log on this worker's home (loader/engines/README.md "Homes"): made by its own
create activity where the activity lands, with the header its parent's `subagent` made; and the
catalogue `list_agents` reads, which also names the children whose logs are on other homes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dsh.loader.engines.wire import ChildRef, TreeInput
from dsh.loader.errors import SessionError
from dsh.loader.session import SessionStore, make_header
from dsh.loader.subagents import Catalogue, CatalogueEntry

__all__ = ["Elsewhere", "create_log", "header_of"]


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


async def create_log(who: TreeInput) -> None:
    """Activity `dsh.create_session`'s body: the session's log on this home (header, then a
    child's descriptor, §8.2), unless it is here already (a retry; a turn appends a missing
    descriptor)."""
    store = SessionStore(Path(who.run.home), fsync=who.run.fsync)
    if store.exists(who.session_id):
        return
    try:
        session = await store.create(header_of(who))
    except SessionError as exc:
        if exc.code == "SESSION_EXISTS":
            return  # a parallel attempt made it
        raise
    try:
        if who.descriptor is not None:
            session.append("subagent/descriptor", who.descriptor)
    finally:
        await store.close(session)
