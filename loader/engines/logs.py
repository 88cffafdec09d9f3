"""A session's log on its home (loader/engines/README.md "Homes"): the header its first turn
writes there (`header_of`: the one its parent's `subagent` made, for a child), and the catalogue
`list_agents` reads, which also names the children whose logs are on other homes.
"""

from __future__ import annotations

from typing import Any

from dsh.loader.engines.wire import ChildRef, TreeInput
from dsh.loader.session import make_header
from dsh.loader.subagents import Catalogue, CatalogueEntry

__all__ = ["Elsewhere", "header_of"]


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
