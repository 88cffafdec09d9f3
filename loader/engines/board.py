"""The fence board the root workflow keeps (loader/engines/README.md, "Fences across processes").

Workflow-side state (deterministic, no I/O; it may import only `wire`): every fence fact of the
tree, each once, in arrival order. Turns publish their facts (signal `fence_facts`) and mirror the
board through a long-poll (update `fence_facts_after`); `RootHandlers` (root_handlers.py) keeps
the handlers and this class the facts.

Invariants:
- `facts` only grows and holds no fact twice (`_seen` is its set of tuples);
- `last[source]` is the index of the last fact `source` published that was new (None: a workflow).
"""

from __future__ import annotations

from typing import Any

__all__ = ["FenceBoard"]


class FenceBoard:
    """The tree's fence facts, carried across continue-as-new (`Carried.facts`, `fact_last`)."""

    def __init__(self, facts: list[list[Any]], last: list[list[Any]]) -> None:
        self.facts: list[list[Any]] = list(facts)
        self.last: dict[str | None, int] = {k: i for k, i in last}
        self._seen: set[tuple[Any, ...]] = {tuple(f) for f in self.facts}

    def add(self, facts: list[list[Any]], source: str | None) -> None:
        """Facts a turn (`source`) or a workflow (None) recorded; a fact learnt twice counts once."""
        for fact in facts:
            if tuple(fact) not in self._seen:
                self._seen.add(tuple(fact))
                self.facts.append(fact)
                self.last[source] = len(self.facts) - 1

    def news_for(self, after: int, source: str | None) -> bool:
        """A fact past `after` from elsewhere than the polling turn `source` (its own facts are in
        its fences already; echoing each back would cost an update per fact)."""
        return any(i >= after for s, i in self.last.items() if s is None or s != source)

    def carried_last(self) -> list[list[Any]]:
        return [[k, i] for k, i in self.last.items()]
