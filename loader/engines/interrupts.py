"""Interrupts applied once across a dead worker's retry (loader/engines/README.md, "Faults").

The log is the checkpoint a retried turn rebuilds from, so what a dead attempt applied must be
readable there. An interrupt that ended a turn left its `aborted` `turn/end`. One that reached an
idle agent ends nothing (SPEC §10: a cancel of an idle agent does nothing), so the turn writes
`engine/interrupt` (ignorable: other readers skip it, §5.1) for it, in the same sync span as the
cancel: without it a retry applied it again and stopped the retry's own turn, which the local
engine never ran into (the same sequence there ends nothing).

Invariants:
- one `engine/interrupt` per idle application, naming its turn activity (`seq`) and its place
  among that turn's interrupts (`index`); never one for an interrupt that aborts a turn (that one
  is the `turn/end`), so no application is counted twice;
- the marker is not a record of the run: the client's stream skips it (projection.py), so the
  NDJSON is the local engine's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from dsh.loader.subagents.epochs import holds_message

if TYPE_CHECKING:
    from dsh.loader.agent import Agent

__all__ = ["INTERRUPT_EVENT", "apply_interrupt", "interrupts_in_log"]

INTERRUPT_EVENT = "engine/interrupt"


def apply_interrupt(agent: Agent, cause: dict[str, Any], seq: int, index: int) -> None:
    """The core's `agent.cancel(cause, keep_inbox=True)` (§10.3: queued work stays, parked), and
    the marker when it reaches an idle agent."""
    # --- S-int begin: the idle check, the note and the cancel (no await: no turn starts between) ---
    if agent.status == "idle":
        agent.session.append_owned(INTERRUPT_EVENT, {"seq": seq, "index": index, "cause": dict(cause)},
                                   ignorable=True)
    agent.cancel(cast(Any, cause), keep_inbox=True)
    # --- S-int end ---


def interrupts_in_log(events: list[Any], slice_ids: set[str], seq: int) -> tuple[int, bool]:
    """A retried turn's interrupts that its dead attempt applied, read from the log: each one
    applied either ended a turn `aborted` by its cause (`user` or `parent`), after the first event
    that holds one of this turn's deliveries (what came before belongs to earlier turns), or
    reached the idle agent (an `engine/interrupt` of turn `seq`). Returns how many, and whether
    the last turn of this slice ended so (its queued work is parked)."""
    idle = sum(1 for e in events if e["type"] == INTERRUPT_EVENT and e["data"].get("seq") == seq)
    start = next((i for i, e in enumerate(events) if any(holds_message([e], m) for m in slice_ids)), None)
    if start is None:
        return idle, False
    held, last = 0, False
    for event in events[start:]:
        if event["type"] == "turn/start":
            last = False
        elif event["type"] == "turn/end":
            reason = event["data"].get("reason") or {}
            last = reason.get("kind") == "aborted" and (reason.get("reason") or {}).get("kind") in ("user", "parent")
            held += last
    return held + idle, last
