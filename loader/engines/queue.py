"""An agent workflow's accepted deliveries, in arrival order (loader/engines/README.md, "Workflow
code"). Workflow-side state (deterministic, no I/O; it may import only `wire`).

Invariants:
- `deliveries` only grows, in arrival order (history order): it is the agent's inbox as accepted;
- every index is the agent's, counted across runs: `deliveries[0]` is index `base` (0 unless the
  run continued as new mid-turn, `TurnInFlight.base`), so a running turn's polls go on unchanged;
- `handed` counts the prefix some turn activity has taken (never below `base`); pending is from `handed`;
- `last_waking` is the index of the last waking delivery (-1: none), so `waking()` is O(1): the
  wait conditions ask it on every activation, and a fan-out root holds a delivery per child (a scan
  made each workflow task O(N), issue 12 item 7);
- the deliveries before `quiet` wake no one again: a turn that failed for good was handed them
  (they stay pending, for the next turn, which a later waking delivery starts);
- `sizes[i]` is delivery i's JSON size as a payload carries it: a page (`page`) holds deliveries
  up to PAGE_BYTES together (at least one, each under NOTICE_LIMIT), so no turn input or poll
  answer passes Temporal's 2 MB payload limit however many large notices are pending.
"""

from __future__ import annotations

import json

from dsh.loader.engines.wire import Delivery

__all__ = ["PAGE_BYTES", "DeliveryQueue"]

PAGE_BYTES = 1024 * 1024
"""Bytes of deliveries' JSON one payload carries (a turn's input, a poll's answer, a continue-as-new's
input); Temporal refuses a payload over 2 MB, and one delivery may take NOTICE_LIMIT (512 KiB)."""


class DeliveryQueue:
    """Every message accepted for one agent and how many a turn has taken."""

    def __init__(self, quiet: int = 0, base: int = 0) -> None:
        self.deliveries: list[Delivery] = []
        self.sizes: list[int] = []
        self.base = base
        self.last_waking = -1
        self.handed = base
        self.quiet = quiet

    def __len__(self) -> int:
        return self.base + len(self.deliveries)

    def accept(self, delivery: Delivery) -> None:
        self.deliveries.append(delivery)
        self.sizes.append(len(json.dumps(delivery.message)))
        if delivery.waking:
            self.last_waking = len(self) - 1

    def waking(self) -> bool:
        """A waking delivery is pending."""
        return self.last_waking >= max(self.handed, self.quiet)

    def hush(self) -> None:
        """What is pending now wakes no one again (a turn that failed for good had it)."""
        self.quiet = len(self)

    def has_pending(self) -> bool:
        return self.handed < len(self)

    def pending(self) -> list[Delivery]:
        return self.after(self.handed)

    def after(self, n: int) -> list[Delivery]:
        """The deliveries from index `n` (those before `base` are not held here)."""
        return self.deliveries[max(0, n - self.base):]

    def page(self, n: int) -> list[Delivery]:
        """The deliveries from index `n` up to PAGE_BYTES of JSON, at least one (when any)."""
        start = max(0, n - self.base)
        end, total = start, 0
        while end < len(self.deliveries) and (end == start or total + self.sizes[end] <= PAGE_BYTES):
            total += self.sizes[end]
            end += 1
        return self.deliveries[start:end]

    def pending_bytes(self) -> int:
        return self.bytes_from(self.handed)

    def bytes_from(self, n: int) -> int:
        return sum(self.sizes[max(0, n - self.base):])
