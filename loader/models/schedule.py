"""The observed settlement order of a recorded run, as fences (issue 10, item 3).

A live run's interleaving is decided by the network: which child's reply came back first, whether a
notice reached its parent during a step or while it was idle. A replay serves every reply at once,
so without help it would follow its own default schedule. `observed_fences` reads the durable logs of
the recorded run and writes that order down as `hold` fences (SPEC §16), so the replay claims each
notice and report in the same turn and step, and inserts it in the same state of its recipient, as
the live run did.

For each message of kind `subagent-settled`, `subagent-report` or `coordinator` (a parent's
`send_message`: whether it reached a child during its turn decides whether that epoch goes on or
settles, so it is ordered as a notice is) inserted into a recipient R, the
*window* is R's state at the insert, read from R's log: inside step (T, S) (the last `step/start`
before the insert, or step 1 of a turn opened with no step yet; after `step/end` S, before step
S + 1, whose pre-step takes the message: a replayed run's notices land there), or idle after turn
T. Then:

- the sender X holds the pre-step that produces the message (the step of its `report` call, or of
  the `send_message` whose result names the message's id; for a notice, the last step X started
  before the epoch's `turn/end`) until R is in the window
  (`stepReached {R, T, S}` or `turnEnded {R, T}`) and every earlier such message to R has been
  inserted (`inboxAccepted` per kind), so messages to one recipient arrive in the recorded order;
- for an in-step window, R holds that pre-step until the message is inserted, so R cannot leave
  the window first.

A notice is matched to its epoch by time: the last `turn/end` of X at or before the insert's time.
An epoch that ended without a step (a failed pre-step checkpoint) gets no sender hold; neither does
a message whose sender the recording does not know, nor the notice of an epoch an interrupt ended
(the interrupt, pinned by `stop_fences.interrupt_fences`, decides when it leaves; the recipient's hold still
keeps its window). Those cases are logged, not guessed.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

__all__ = ["observed_fences"]

logger = logging.getLogger(__name__)

# The kinds whose order is read; a `coordinator` message is a parent's `send_message` (a relay).
_KINDS = ("subagent-settled", "subagent-report", "coordinator")


def _counts(seen: Mapping[str, int], agent: str) -> list[dict[str, Any]]:
    return [{"inboxAccepted": {"agent": agent, "kind": kind, "count": seen[kind]}} for kind in _KINDS if seen[kind]]


def _until(conds: list[dict[str, Any]]) -> dict[str, Any]:
    return conds[0] if len(conds) == 1 else {"all": conds}


def observed_fences(logs: Mapping[str, list[dict[str, Any]]], keys: Mapping[str, str]) -> list[dict[str, Any]]:
    """Fences reproducing the recorded insert order; `keys` maps session id -> transcript agent key."""
    fences: list[dict[str, Any]] = []
    reports_used: dict[str, int] = {}
    for recipient, events in logs.items():
        r_key = keys.get(recipient)
        if r_key is None:
            continue
        turn = step = 0
        open_turn = False
        seen = dict.fromkeys(_KINDS, 0)
        for event in events:
            kind_of_event = event["type"]
            if kind_of_event == "turn/start":
                turn, step, open_turn = int(event["data"]["turn"]), 0, True
            elif kind_of_event == "step/start":
                step = int(event["data"]["step"])
            elif kind_of_event == "step/end":
                step = int(event["data"]["step"]) + 1  # between steps: the next step's pre-step takes it
            elif kind_of_event == "turn/end":
                open_turn = False
            elif kind_of_event == "agent/inbox/spliced":
                for message in event["data"].get("inserted", []):
                    source = message.get("source", {})
                    kind = source.get("kind")
                    if kind not in _KINDS:
                        continue
                    before = dict(seen)
                    seen[kind] += 1
                    after = dict(seen)
                    if open_turn:
                        window: dict[str, Any] = {"stepReached": {"agent": r_key, "turn": turn, "step": max(step, 1)}}
                        fences.append({"hold": {"agent": r_key, "turn": turn, "step": max(step, 1),
                                                "until": _until(_counts(after, r_key))}})
                    elif turn:
                        window = {"turnEnded": {"agent": r_key, "turn": turn}}
                    else:
                        window = {}
                    sender = source.get("senderSessionId")
                    where = _sender_step(logs.get(sender, []), kind, int(event.get("time", 0)),
                                         reports_used, sender, str(message.get("id", "")))
                    s_key = keys.get(sender) if isinstance(sender, str) else None
                    if where is None or s_key is None:
                        logger.info("recorder: no sender hold for a %s from %s to %s", kind, sender, recipient)
                        continue
                    conds = ([window] if window else []) + _counts(before, r_key)
                    if conds:
                        fences.append({"hold": {"agent": s_key, "turn": where[0], "step": where[1],
                                                "until": _until(conds)}})
    return fences


def _sender_step(events: list[dict[str, Any]], kind: str, at: int, reports_used: dict[str, int],
                 sender: Any, message_id: str) -> tuple[int, int] | None:
    """The (turn, step) of the sender's pre-step that produced this message."""
    if not isinstance(sender, str):
        return None
    if kind == "coordinator":  # the `send_message` whose result names the message id (T-SEND)
        return next(((int(e["data"]["turn"]), int(e["data"]["step"])) for e in events if e["type"] == "tool/result"
                     and message_id and message_id in json.dumps(e["data"].get("message", {}))), None)
    if kind == "subagent-report":
        calls = [(int(e["data"]["turn"]), int(e["data"]["step"])) for e in events
                 if e["type"] == "tool/call" and e["data"].get("name") == "report"]
        k = reports_used.get(sender, 0)
        reports_used[sender] = k + 1
        return calls[k] if k < len(calls) else None
    last_step: tuple[int, int] | None = None
    found: tuple[int, int] | None = None
    for e in events:
        if e["type"] == "step/start":
            last_step = (int(e["data"]["turn"]), int(e["data"]["step"]))
        elif e["type"] == "turn/start":
            last_step = None
        elif e["type"] == "turn/end" and int(e.get("time", 0)) <= at:
            found = None if _interrupted(e) else last_step
    return found


def _interrupted(turn_end: dict[str, Any]) -> bool:
    """Whether an interrupt (an ancestor's or the user's) ended this turn: then its notice left when
    the interrupt landed, not when a pre-step of the sender passed, and holding that pre-step (which
    precedes the interrupted request) until the recipient's window would wait on itself."""
    reason = turn_end["data"].get("reason") or {}
    return reason.get("kind") == "aborted" and (reason.get("reason") or {}).get("kind") in ("parent", "user")
