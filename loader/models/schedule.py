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

The user's `dsh send` into a child (a message of kind `user` after the child's prompt, not a
resume's continue message) has no sender step to hold: `observed_user_sends` writes it as a
`user: [{send: {agent, text, when}}]` entry (done again by the replay's runner,
`loader/scripted_user.py`), `when` being what a sender hold would wait for (the window and the
earlier messages to R, the user's counted by `inboxAccepted {kind: user}`, which counts the prompt
too); an in-step window gets R's hold as above. Limit: a send into an idle child that settled
before the send is replayed only if the run is still going then (a replay ends at quiescence).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

__all__ = ["observed_fences", "observed_user_sends"]

logger = logging.getLogger(__name__)

# The kinds whose order is read; a `coordinator` message is a parent's `send_message` (a relay).
_KINDS = ("subagent-settled", "subagent-report", "coordinator")


def _counts(seen: Mapping[str, int], agent: str, users: int = 0) -> list[dict[str, Any]]:
    """`inboxAccepted` per kind seen; `users` counts the messages of kind user (prompt and sends)."""
    counts = [{"inboxAccepted": {"agent": agent, "kind": kind, "count": seen[kind]}} for kind in _KINDS if seen[kind]]
    if users:
        counts.append({"inboxAccepted": {"agent": agent, "kind": "user", "count": users}})
    return counts


def _until(conds: list[dict[str, Any]]) -> dict[str, Any]:
    return conds[0] if len(conds) == 1 else {"all": conds}


def observed_fences(logs: Mapping[str, list[dict[str, Any]]], keys: Mapping[str, str]) -> list[dict[str, Any]]:
    """Fences reproducing the recorded insert order; `keys` maps session id -> transcript agent key."""
    return _observe(logs, keys)[0]


def observed_user_sends(logs: Mapping[str, list[dict[str, Any]]], keys: Mapping[str, str]) -> list[dict[str, Any]]:
    """The user's `dsh send`s as `user` entries `{send: {agent, text, when}}` (`loader/scripted_user.py`):
    `when` is the recipient's window with every earlier message to it in (as a sender hold's
    condition), and `observed_fences` holds an in-step window until the message is in."""
    return _observe(logs, keys)[1]


def _user_send(message: dict[str, Any], r_key: str, user_seen: int) -> bool:
    """Whether a `user`-kind insert into a child is a `dsh send`: not the child's prompt (the first
    message of kind user in its log), not a resume's continue message (it has a `form`)."""
    source = message.get("source", {})
    return r_key != "root" and source.get("kind") == "user" and user_seen > 0 and "form" not in source


def _text_of(message: dict[str, Any]) -> str:
    return "".join(b.get("text", "") for b in message.get("content", []) if isinstance(b, dict) and b.get("type") == "text")


def _observe(logs: Mapping[str, list[dict[str, Any]]], keys: Mapping[str, str]
             ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    fences: list[dict[str, Any]] = []
    sends: list[dict[str, Any]] = []
    reports_used: dict[str, int] = {}
    for recipient, events in logs.items():
        r_key = keys.get(recipient)
        if r_key is None:
            continue
        turn = step = 0
        open_turn = False
        seen = dict.fromkeys(_KINDS, 0)
        # Messages of kind user: the prompt, then the user's sends. Counted into the conditions only
        # once the user has sent (a recording without sends keeps its fences).
        user_seen = user_sends = 0
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
                    is_send = _user_send(message, r_key, user_seen)
                    if kind == "user":
                        user_seen += 1
                    if is_send:
                        user_sends += 1
                    if kind not in _KINDS and not is_send:
                        continue
                    before = dict(seen)
                    if kind in _KINDS:
                        seen[kind] += 1
                    after = dict(seen)
                    users_before = user_seen - 1 if is_send else user_seen
                    users_after = user_seen if user_sends else 0
                    if open_turn:
                        window: dict[str, Any] = {"stepReached": {"agent": r_key, "turn": turn, "step": max(step, 1)}}
                        fences.append({"hold": {"agent": r_key, "turn": turn, "step": max(step, 1),
                                                "until": _until(_counts(after, r_key, users_after))}})
                    elif turn:
                        window = {"turnEnded": {"agent": r_key, "turn": turn}}
                    else:
                        window = {}
                    conds = ([window] if window else []) + _counts(before, r_key, users_before if user_sends else 0)
                    if is_send:
                        sends.append({"send": {"agent": r_key, "text": _text_of(message),
                                               "when": _until(conds)}})  # never empty: the prompt counts
                        continue
                    sender = source.get("senderSessionId")
                    where = _sender_step(logs.get(sender, []), kind, int(event.get("time", 0)),
                                         reports_used, sender, str(message.get("id", "")))
                    s_key = keys.get(sender) if isinstance(sender, str) else None
                    if where is None or s_key is None:
                        logger.info("recorder: no sender hold for a %s from %s to %s", kind, sender, recipient)
                        continue
                    if conds:
                        fences.append({"hold": {"agent": s_key, "turn": where[0], "step": where[1],
                                                "until": _until(conds)}})
    return fences, sends


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
