"""The consumed-work fold and stop reasons (SPEC §7).

Turn events alone cannot tell "a turn stopped before its first step" from "a turn that had nothing to
do"; the inbox splices' `removedCount` / `outcome` supply the missing fact. That is why settlement
reads outcomes from the epoch's own log rather than from live state: any issuer of a cancel
(teardown, interrupt) reads the same.

Rule "a re-queued claim counts for nothing" (issue 9, agreeing with `loader.session.repair`): crash
repair puts messages a turn claimed but never entered back into the inbox with a `requeued` splice
inside that turn. They were not consumed, so that turn's claims stop counting, and so does a step
the crash left with nothing entered (a torn `step/start`): a repaired turn that entered no message
does not account (it does not read as `aborted`), and the work is accounted by the turn that later
runs it. A turn that entered a message still accounts: that message was consumed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from dsh.loader.session import REQUEUED, Event

__all__ = [
    "MISSING",
    "STOP_REASONS",
    "FoldResult",
    "RunOutcome",
    "StopReason",
    "epoch_stop_reason",
    "final_output",
    "fold_consumed_work",
    "one_shot_stop_reason",
    "run_outcome",
]

StopReason = Literal["completed", "aborted", "error", "max-tokens", "refusal"]
STOP_REASONS: tuple[str, ...] = ("completed", "aborted", "error", "max-tokens", "refusal")


class _Missing:
    """The fold's `end` when no turn accounts for work: absent, not `None`."""

    _instance: _Missing | None = None

    def __new__(cls) -> _Missing:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "MISSING"

    def __bool__(self) -> bool:
        return False


MISSING = _Missing()


@dataclass(frozen=True)
class FoldResult:
    end: Event | _Missing
    dropped_unrun: bool

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"dropped_unrun": self.dropped_unrun}
        if self.end is not MISSING:
            out["end"] = self.end
        return out

    @property
    def end_kind(self) -> str | None:
        if isinstance(self.end, _Missing):
            return None
        return str(self.end["data"]["reason"].get("kind"))


def _accounts_for_claim(kind: str | None) -> bool:
    # A completed turn whose claim was emptied ran nothing and dropped nothing; every other kind
    # (blocked, aborted, interrupted, error, unknown) consumed the claimed input.
    return kind != "completed"


def fold_consumed_work(events: list[Event]) -> FoldResult:
    stepped: set[int] = set()
    claimed: set[int] = set()
    entered: set[int] = set()  # turns with a user/message
    open_turn: int | None = None
    end: Event | _Missing = MISSING
    dropped = False
    for event in events:
        kind = event["type"]
        data = event["data"]
        if kind == "turn/start":
            open_turn = data["turn"]
        elif kind == "step/start":
            stepped.add(data["turn"])
        elif kind == "agent/inbox/spliced" and data.get("removedCount"):
            if data.get("outcome") == "canceled":
                dropped |= data.get("inserted") == []
            elif open_turn is not None:
                claimed.add(open_turn)
        elif kind == "user/message" and open_turn is not None:
            entered.add(open_turn)
        elif kind == "agent/inbox/spliced" and data.get("outcome") == REQUEUED and open_turn is not None:
            # Rule "a re-queued claim counts for nothing": repair put this turn's unentered claims back.
            claimed.discard(open_turn)
            if open_turn not in entered:
                stepped.discard(open_turn)
        elif kind == "turn/end":
            open_turn = None
            turn = data["turn"]
            reason_kind = (data.get("reason") or {}).get("kind")
            if turn in stepped or (turn in claimed and _accounts_for_claim(reason_kind)):
                end = event
                dropped = False
    return FoldResult(end=end, dropped_unrun=dropped)


def epoch_stop_reason(fold: FoldResult) -> StopReason:
    kind = fold.end_kind
    if kind == "max-tokens":
        return "max-tokens"
    if kind in ("aborted", "interrupted"):
        return "aborted"
    if kind == "error":
        return "error"
    if kind == "blocked":
        return "refusal"
    if kind in ("completed", None):
        return "aborted" if fold.dropped_unrun else "completed"
    return "error"


def one_shot_stop_reason(fold: FoldResult, *, owner_cancelled: bool = False) -> StopReason:
    kind = fold.end_kind
    reason: StopReason
    if kind == "completed":
        reason = "completed"
    elif kind == "max-tokens":
        reason = "max-tokens"
    elif kind == "aborted":
        reason = "aborted"
    elif kind == "blocked":
        reason = "refusal"
    else:
        reason = "error"
    if owner_cancelled and reason != "completed":
        return "aborted"
    return reason


def final_output(events: list[Event]) -> list[dict[str, Any]] | None:
    """Content of the last `assistant/message` with non-empty content; usage-only ones never count."""
    for event in reversed(events):
        if event["type"] == "assistant/message":
            content = event["data"]["message"].get("content") or []
            if content:
                return list(content)
    return None


@dataclass(frozen=True)
class RunOutcome:
    stop_reason: StopReason
    output: str
    usage: dict[str, int]
    end: Event | None


def run_outcome(events: list[Event]) -> RunOutcome:
    """The root's result over the events appended during this run (§7.4)."""
    fold = fold_consumed_work(events)
    stop = one_shot_stop_reason(fold)
    output = ""
    usage: dict[str, int] = {"inputTokens": 0, "outputTokens": 0}
    for event in events:
        if event["type"] != "assistant/message":
            continue
        u = event["data"].get("usage") or {}
        for key, value in u.items():
            if isinstance(value, int):
                usage[key] = usage.get(key, 0) + value
        text = "".join(
            b.get("text", "") for b in event["data"]["message"].get("content", []) if b.get("type") == "text"
        )
        if text:
            output = text
    end = None if isinstance(fold.end, _Missing) else fold.end
    return RunOutcome(stop_reason=stop, output=output, usage=usage, end=end)
