"""The consumed-work fold and stop-reason mappings (SPEC §7), table-driven over synthetic logs."""

from __future__ import annotations

from typing import Any

import pytest

from dsh.loader.agent import MISSING, epoch_stop_reason, final_output, fold_consumed_work, one_shot_stop_reason
from dsh.loader.agent.fold import FoldResult


class Log:
    """Builds event lists in the §5.2 shapes."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def add(self, type: str, **data: Any) -> Log:
        self.events.append({"type": type, "seq": len(self.events), "time": 0, "data": data})
        return self

    def accept(self, target: str = "next-turn") -> Log:
        return self.add("agent/inbox/spliced", target=target, start=0, inserted=[{"id": f"m{len(self.events)}"}])

    def claim(self, target: str = "next-turn") -> Log:
        return self.add("agent/inbox/spliced", target=target, start=0, inserted=[], removedCount=1)

    def cancel_pending(self) -> Log:
        return self.add("agent/inbox/spliced", target="next-turn", start=0, inserted=[], removedCount=1, outcome="canceled")

    def turn(self, n: int, kind: str, *, claim: bool = False, step: bool = False) -> Log:
        self.add("turn/start", turn=n)
        if claim:
            self.claim()
        if step:
            self.add("step/start", turn=n, step=1).add("step/end", turn=n, step=1)
        reason: dict[str, Any] = {"kind": kind}
        return self.add("turn/end", turn=n, reason=reason)


def end_turn(result: FoldResult) -> int | None:
    return None if result.end is MISSING else result.end["data"]["turn"]


def test_accept_only_has_no_end_key():
    """Matrix 31 (first half)."""
    result = fold_consumed_work(Log().accept().events)
    assert result.end is MISSING and not result.dropped_unrun
    assert result.to_json() == {"dropped_unrun": False}


def test_latest_stepped_turn_wins():
    """Matrix 31 (second half)."""
    log = Log().turn(1, "completed", claim=True, step=True).turn(2, "max-tokens", claim=True, step=True)
    result = fold_consumed_work(log.events)
    assert end_turn(result) == 2 and result.end_kind == "max-tokens"
    assert epoch_stop_reason(result) == "max-tokens"


@pytest.mark.parametrize(
    ("kind", "stop"),
    [
        pytest.param("error", "error", id="m32-error"),
        pytest.param("aborted", "aborted", id="m32-aborted"),
        pytest.param("blocked", "refusal", id="m32-blocked"),
    ],
)
def test_claim_without_step_accounts_unless_completed(kind, stop):
    """Matrix 32."""
    log = Log().turn(1, "completed", claim=True, step=True).turn(2, kind, claim=True)
    result = fold_consumed_work(log.events)
    assert end_turn(result) == 2
    assert epoch_stop_reason(result) == stop


@pytest.mark.parametrize("kind", ["aborted", "error", "blocked"], ids=lambda k: f"m33-{k}")
def test_turns_without_claim_or_step_never_account(kind):
    """Matrix 33 (first half)."""
    log = Log().turn(1, "completed", claim=True, step=True)
    for n in (2, 3, 4):
        log.turn(n, kind)
    assert end_turn(fold_consumed_work(log.events)) == 1


def test_completed_turn_with_an_emptied_claim_does_not_account():
    """Matrix 33 (second half)."""
    log = Log().turn(1, "completed", claim=True, step=True).turn(2, "completed", claim=True)
    assert end_turn(fold_consumed_work(log.events)) == 1


def test_canceled_pending_work_reads_as_dropped_until_a_later_stepped_turn():
    """Matrix 34."""
    log = Log().turn(1, "completed", claim=True, step=True).accept().cancel_pending()
    result = fold_consumed_work(log.events)
    assert end_turn(result) == 1 and result.dropped_unrun
    assert epoch_stop_reason(result) == "aborted"
    log.turn(2, "completed", claim=True, step=True)
    result = fold_consumed_work(log.events)
    assert end_turn(result) == 2 and not result.dropped_unrun
    assert epoch_stop_reason(result) == "completed"


def test_claim_outside_an_open_turn_counts_for_nothing():
    log = Log().claim().turn(1, "error")
    assert fold_consumed_work(log.events).end is MISSING


def fold_of(kind: str | None, dropped: bool = False) -> FoldResult:
    if kind is None:
        return FoldResult(end=MISSING, dropped_unrun=dropped)
    event = {"type": "turn/end", "seq": 0, "time": 0, "data": {"turn": 1, "reason": {"kind": kind}}}
    return FoldResult(end=event, dropped_unrun=dropped)


@pytest.mark.parametrize(
    ("kind", "dropped", "epoch", "one_shot"),
    [
        pytest.param("completed", False, "completed", "completed", id="m35-completed"),
        pytest.param("completed", True, "aborted", "completed", id="m35-completed-dropped"),
        pytest.param(None, False, "completed", "error", id="m35-no-end"),
        pytest.param(None, True, "aborted", "error", id="m35-no-end-dropped"),
        pytest.param("max-tokens", False, "max-tokens", "max-tokens", id="m35-max-tokens"),
        pytest.param("aborted", False, "aborted", "aborted", id="m35-aborted"),
        pytest.param("interrupted", False, "aborted", "error", id="m35-interrupted"),
        pytest.param("error", False, "error", "error", id="m35-error"),
        pytest.param("blocked", False, "refusal", "refusal", id="m35-blocked"),
        pytest.param("mystery", False, "error", "error", id="m35-unknown"),
    ],
)
def test_epoch_and_one_shot_mappings(kind, dropped, epoch, one_shot):
    """Matrix 35."""
    result = fold_of(kind, dropped)
    assert epoch_stop_reason(result) == epoch
    assert one_shot_stop_reason(result) == one_shot


@pytest.mark.parametrize(
    ("kind", "expected"),
    [("completed", "completed"), ("error", "aborted"), ("max-tokens", "aborted"), (None, "aborted")],
    ids=lambda v: f"m35-owner-{v}",
)
def test_owner_cancelled_one_shot_reads_aborted_unless_completed(kind, expected):
    """Matrix 35 (owner-cancelled one-shot)."""
    assert one_shot_stop_reason(fold_of(kind), owner_cancelled=True) == expected


def test_final_output_skips_usage_only_empty_messages():
    log = Log()
    log.add("assistant/message", turn=1, step=1, message={"content": [{"type": "text", "text": "answer"}]})
    log.add("assistant/message", turn=1, step=2, message={"content": []}, usage={"inputTokens": 1})
    assert final_output(log.events) == [{"type": "text", "text": "answer"}]
    assert final_output([]) is None
