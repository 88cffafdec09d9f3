"""Turn ends no model said, in a recorded run, as fences (issue 12 "Not yet" item 4).

Two things end a turn from outside the model: an interrupt and a failed checkpoint. A replay
must meet each at the same point, and only a fence can put it there (SPEC §16).

**Interrupts.** A live interrupt lands wherever the network put its target: an ancestor's `interrupt_agent` call
usually stops a child in the middle of a slow model request, whose partial answer the recording
writes as a `hang` (recorder.py, engines/recording.py). A replay serves every reply at once, so
without help the ancestor's call runs before the child reached its hang; the hang then waits for
an interrupt that has passed and the run never ends. `interrupt_fences` reads the durable logs and
writes the interrupt's position down as a `hold` fence (SPEC §16), beside
`schedule.observed_fences`' notice and report order: for each turn of Y that ended `aborted` by an
ancestor (`reason.kind == "parent"`) inside a model request (its last step logged an `interrupted`
answer, or none), the `interrupt_agent` call naming Y logged while that turn was open (the last
such, by log time) is held at its caller's pre-step until Y reached that step and its hang
(`all: [stepReached {Y, turn, step}, hangReached {Y}]`).

The message that later wakes the parked child needs no fence: one that reaches it while the
interrupted turn is still converging latches and wakes it at convergence (§6.3), as one that
arrives after it parked does, so both give the same flow; messages queued before the interrupt are
ordered by the interrupter's own earlier steps.

Limits, logged and not guessed: `hangReached` is latched per agent, so only an agent's first
interrupt is pinned exactly; a later one is held only by its `stepReached` part. An interrupt that
found its target outside a model request (a tool call, a held pre-step) has no hang to wait for and
gets no fence, nor does a user's interrupt (`dsh interrupt`, `reason.kind == "user"`): no fence may
cancel a turn (§16). The recording writes such an interrupt as the transcript's `user` entry
`{interrupt: {agent, when}}` instead (`observed_user_interrupts`), which the replay's runner does as
the user did.

**Failed checkpoints.** A turn that ended `error` with code CHECKPOINT_FAILED (the pre-step
checkpoint could not be flushed: a disk fault live, a `failCheckpoint` fence in a test) asked the
model nothing, so no reply records it; `failCheckpoint {agent, turn, step, message}` at the step
whose pre-step failed (one past the turn's last `step/start`) makes the replay fail there with the
same message. The fence fails the real checkpoint after flushing it (§16.2), as the fault did.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

__all__ = ["checkpoint_fences", "interrupt_fences", "observed_user_interrupts", "stop_fences"]

logger = logging.getLogger(__name__)


def stop_fences(logs: Mapping[str, list[dict[str, Any]]], keys: Mapping[str, str]) -> list[dict[str, Any]]:
    """Both kinds, interrupts first; `keys` maps session id -> transcript agent key."""
    return interrupt_fences(logs, keys) + checkpoint_fences(logs, keys)


def checkpoint_fences(logs: Mapping[str, list[dict[str, Any]]], keys: Mapping[str, str]) -> list[dict[str, Any]]:
    """A `failCheckpoint` per turn that ended CHECKPOINT_FAILED."""
    fences: list[dict[str, Any]] = []
    for session_id, events in logs.items():
        key = keys.get(session_id)
        if key is None:
            continue
        step = 0
        for e in events:
            kind, data = e["type"], e["data"]
            if kind == "turn/start":
                step = 0
            elif kind == "step/start":
                step = int(data["step"])
            elif kind == "turn/end":
                reason = data.get("reason") or {}
                error = reason.get("error") or {}
                if reason.get("kind") == "error" and error.get("code") == "CHECKPOINT_FAILED":
                    fences.append({"failCheckpoint": {"agent": key, "turn": int(data["turn"]), "step": step + 1,
                                                      "message": str(error.get("message", ""))}})
    return fences


def interrupt_fences(logs: Mapping[str, list[dict[str, Any]]], keys: Mapping[str, str]) -> list[dict[str, Any]]:
    """A hold per ancestor interrupt that stopped its target inside a model request."""
    calls = _interrupt_calls(logs)
    fences: list[dict[str, Any]] = []
    for target, events in logs.items():
        t_key = keys.get(target)
        if t_key is None:
            continue
        for turn, step, opened, ended in _interrupted_turns(events):
            caller = _last_call_between(calls.get(target, []), opened, ended)
            if caller is None or keys.get(caller[0]) is None:
                logger.info("recorder: no interrupt hold for turn %d of %s", turn, target)
                continue
            fences.append({"hold": {"agent": keys[caller[0]], "turn": caller[1], "step": caller[2], "until": {
                "all": [{"stepReached": {"agent": t_key, "turn": turn, "step": step}},
                        {"hangReached": {"agent": t_key}}]}}})
    return fences


def _interrupt_calls(logs: Mapping[str, list[dict[str, Any]]]) -> dict[str, list[tuple[int, str, int, int]]]:
    """Target session id -> its `interrupt_agent` calls as (time, caller, turn, step), in time order."""
    found: dict[str, list[tuple[int, str, int, int]]] = {}
    for caller, events in logs.items():
        for e in events:
            data = e["data"]
            if e["type"] != "tool/call" or data.get("name") != "interrupt_agent":
                continue
            target = _argument(data.get("arguments"), "agent_id")
            if target is not None:
                found.setdefault(target, []).append((int(e.get("time", 0)), caller, int(data["turn"]), int(data["step"])))
    for calls in found.values():
        calls.sort(key=lambda c: c[0])
    return found


def _interrupted_turns(events: list[dict[str, Any]]) -> list[tuple[int, int, int, int]]:
    """(turn, step, opened at, ended at) of each turn an ancestor aborted inside a model request."""
    out: list[tuple[int, int, int, int]] = []
    opened = step = 0
    in_request = False
    for e in events:
        kind, data = e["type"], e["data"]
        if kind == "turn/start":
            opened, step, in_request = int(e.get("time", 0)), 0, False
        elif kind == "step/start":
            step, in_request = int(data["step"]), False
        elif kind == "llm/request":
            in_request = True
        elif kind == "assistant/message":
            in_request = bool(data.get("interrupted"))
        elif kind in ("tool/call", "tool/result"):
            in_request = False
        elif kind == "turn/end":
            reason = data.get("reason") or {}
            cause = reason.get("reason") or {}
            if reason.get("kind") == "aborted" and cause.get("kind") == "user":
                pass  # the recording's `user` entry (`observed_user_interrupts`)
            elif reason.get("kind") == "aborted" and cause.get("kind") == "parent":
                if in_request and step:
                    out.append((int(data["turn"]), step, opened, int(e.get("time", 0))))
                else:
                    logger.info("recorder: turn %s was interrupted outside a model request", data.get("turn"))
    return out


def observed_user_interrupts(logs: Mapping[str, list[dict[str, Any]]], keys: Mapping[str, str]) -> list[dict[str, Any]]:
    """The user's `dsh interrupt`s that ended a hang, as `user` entries `{interrupt: {agent, when}}`
    (`loader/scripted_user.py`): per turn of Y that ended `aborted` with cause `user` inside a model
    request, `when` = Y reached that step and its hang, and Y's parent was where it was when the
    interrupt ended the turn (in its step, or idle after its turn: where the interrupted epoch's
    notice then lands). A user's interrupt that found Y outside a model request is logged, not
    written: its replay has no hang to meet it at."""
    out: list[dict[str, Any]] = []
    for target, events in logs.items():
        t_key = keys.get(target)
        if t_key is None:
            continue
        parent = _parent_of(target, logs)
        for turn, step, at in _user_interrupted_turns(events):
            conds: list[dict[str, Any]] = [{"stepReached": {"agent": t_key, "turn": turn, "step": step}},
                                           {"hangReached": {"agent": t_key}}]
            p_key = keys.get(parent) if parent is not None else None
            window = _window_at(logs[parent], p_key, at) if parent is not None and p_key is not None else None
            if window is not None:
                conds.append(window)
            out.append({"interrupt": {"agent": t_key, "when": {"all": conds}}})
    return out


def _user_interrupted_turns(events: list[dict[str, Any]]) -> list[tuple[int, int, int]]:
    """(turn, step, ended at) of each turn the user's interrupt ended inside a model request."""
    out: list[tuple[int, int, int]] = []
    step = 0
    in_request = False
    for e in events:
        kind, data = e["type"], e["data"]
        if kind == "turn/start":
            step, in_request = 0, False
        elif kind == "step/start":
            step, in_request = int(data["step"]), False
        elif kind in ("tool/call", "tool/result"):
            in_request = False
        elif kind == "llm/request":
            in_request = True
        elif kind == "assistant/message":
            in_request = bool(data.get("interrupted"))
        elif kind == "turn/end":
            reason = data.get("reason") or {}
            if reason.get("kind") == "aborted" and (reason.get("reason") or {}).get("kind") == "user":
                if in_request and step:
                    out.append((int(data["turn"]), step, int(e.get("time", 0))))
                else:
                    logger.warning("recorder: turn %s was interrupted by the user outside a model request; "
                                   "the replay cannot interrupt it there", data.get("turn"))
    return out


def _parent_of(child: str, logs: Mapping[str, list[dict[str, Any]]]) -> str | None:
    """The session whose `subagent` call spawned `child` (its descriptor's `spawnCallId`)."""
    call_id = next((e["data"].get("spawnCallId") for e in logs[child] if e["type"] == "subagent/descriptor"), None)
    if not isinstance(call_id, str):
        return None
    return next((sid for sid, events in logs.items() if sid != child and any(
        e["type"] == "tool/call" and e["data"].get("callId") == call_id for e in events)), None)


def _window_at(events: list[dict[str, Any]], key: str, at: int) -> dict[str, Any] | None:
    """Where the agent of `events` was at time `at`: in step (T, S) → `stepReached`, idle after turn
    T → `turnEnded` (as `schedule.observed_fences` reads a recipient's window); None before its first turn."""
    turn = step = 0
    open_turn = False
    for e in events:
        if int(e.get("time", 0)) > at:
            break
        kind, data = e["type"], e["data"]
        if kind == "turn/start":
            turn, step, open_turn = int(data["turn"]), 0, True
        elif kind == "step/start":
            step = int(data["step"])
        elif kind == "step/end":
            step = int(data["step"]) + 1
        elif kind == "turn/end":
            open_turn = False
    if open_turn:
        return {"stepReached": {"agent": key, "turn": turn, "step": max(step, 1)}}
    return {"turnEnded": {"agent": key, "turn": turn}} if turn else None


def _last_call_between(calls: list[tuple[int, str, int, int]], opened: int, ended: int) -> tuple[str, int, int] | None:
    found = None
    for at, caller, turn, step in calls:
        if opened <= at <= ended:
            found = (caller, turn, step)
    return found


def _argument(raw: Any, name: str) -> str | None:
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            return None
    value = raw.get(name) if isinstance(raw, dict) else None
    return value if isinstance(value, str) else None
