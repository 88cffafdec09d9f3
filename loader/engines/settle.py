"""Settling a child whose workflow run failed (loader/engines/README.md, "Failed child runs").

A child's run can fail where no turn returns a notice: a non-retryable error in its turn activity
(a worker refusing the turn), a turn that failed all its attempts, a result over Temporal's 2 MB
payload limit (PayloadsTooLarge). The parent then holds a `ChildWorkflowError` and no notice, and
promise 1 (a parent always hears how a child ended) needs one: activity `dsh.settle_failed` reads
the child's durable log and returns the epoch's `error` notice, as a local teardown failure does.

Invariants:
- the child's log ends as the local engine's does for an error end: a turn closed `error` with the
  failure's code and message (`ENGINE_RUN_FAILED`), after crash repair closed any turn the failure
  cut off. Written once: a retried activity finds that end and appends nothing;
- the outcome, the detail and the last reply are read back from the log (the fold over the epoch's
  own events), and the notice carries the epoch's one id (`notice_id`), so a duplicated delivery
  is the same message and enters the parent once;
- a log that cannot be read or written (gone, locked by a worker still running the cut-off turn)
  still settles: the notice is built from the failure alone. The activity never leaves the parent
  waiting.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, cast

from dsh.loader.agent import Inbox, Message, epoch_stop_reason, final_output, fold_consumed_work, run_outcome
from dsh.loader.engines.refusals import json_bytes
from dsh.loader.engines.wire import FailedRun, Leftovers, TreeResult
from dsh.loader.errors import error_chain
from dsh.loader.session import Session, SessionStore
from dsh.loader.subagents import EPOCH_EVENT, settlement_message
from dsh.loader.subagents.epochs import latest_epoch, session_holds_message
from dsh.loader.subagents.notice import NoticeDetail, settlement_detail, teardown_detail
from dsh.loader.texts import render

__all__ = ["FAILED_CODE", "NOTICE_LIMIT", "bounded_notice", "bounded_report", "enter_leftovers", "logged_output",
           "settle_failed"]

logger = logging.getLogger(__name__)

NOTICE_LIMIT = 512 * 1024
"""Bytes of JSON a child's notice may take in an activity's result (Temporal's payload limit is 2
MB; the rest of the result, and the parent's next turn input that carries the notice, need room)."""

FAILED_CODE = "ENGINE_RUN_FAILED"


def bounded_notice(child_id: str, stop_reason: str, output: list[dict[str, Any]] | None, *,
                   epoch: int | None, detail: NoticeDetail, limit: int) -> Message:
    """The settlement notice; past `limit` bytes of JSON the reply is replaced by its size and
    where to read it (T-ENGINE-NOTICE-TOO-LARGE): Temporal refuses a payload over 2 MB, and the
    run carrying it would fail. The log keeps the whole reply."""
    notice = settlement_message(child_id, stop_reason, output, epoch=epoch, detail=detail)
    size = json_bytes(notice)
    if size <= limit:
        return notice
    text = render("T-ENGINE-NOTICE-TOO-LARGE", id=child_id, size=size)
    return settlement_message(child_id, stop_reason, [{"type": "text", "text": text}], epoch=epoch, detail=detail)


def bounded_report(message: Message, child_id: str, limit: int) -> Message:
    """A report relayed through workflow payloads: past `limit` bytes of JSON its words are
    replaced by their size and where to read them (T-ENGINE-REPORT-TOO-LARGE); the child's log
    keeps them whole (the `report` call's arguments). The message keeps its id."""
    size = json_bytes(message)
    if size <= limit:
        return message
    text = render("T-ENGINE-REPORT-TOO-LARGE", id=child_id, size=size)
    return cast(Message, {**message, "content": [*message["content"][:1], {"type": "text", "text": text}]})


def logged_output(home: Path, root_id: str) -> str:
    """The root's output read from its log, when the root's result could not carry it (over
    NOTICE_LIMIT; `TreeResult.output_in_log`): the same fold the turn made (`run_outcome`)."""
    return run_outcome(list(SessionStore(home).read(root_id).events)).output


async def settle_failed(failed: FailedRun) -> TreeResult:
    """The `dsh.settle_failed` activity's body: the failed epoch's `error` notice, from its log."""
    detail = teardown_detail(FAILED_CODE, render("T-ENGINE-RUN-FAILED", id=failed.child_id, detail=failed.failure))
    stop_reason, output = "error", None
    spawned: list[str] = []
    try:
        events = await _close_with_error(Path(failed.home), failed, detail)
        spawned = children_named(events)
        suffix = events[max((i for i, e in enumerate(events) if e["type"] == EPOCH_EVENT), default=0):]
        stop_reason = epoch_stop_reason(fold_consumed_work(suffix))
        output = final_output(suffix)
        detail = settlement_detail(stop_reason, suffix)
    except Exception as exc:  # the log is unreadable or busy: the failure alone still settles it
        logger.warning("settling the failed run of %s without its log: %s", failed.child_id, error_chain(exc))
    notice = bounded_notice(failed.child_id, stop_reason, output, epoch=failed.epoch, detail=detail, limit=NOTICE_LIMIT)
    return TreeResult(session_id=failed.child_id, stop_reason=stop_reason, notice=dict(notice), epoch=failed.epoch,
                      spawned=spawned)


def children_named(events: list[dict[str, Any]]) -> list[str]:
    """The children a log started (`subagent`'s result value) or messaged (`send_message`'s
    target), in first-seen order: those a run that ended without draining may leave resident."""
    found: dict[str, None] = {}
    for e in events:
        data = e["data"]
        if e["type"] == "tool/result" and (data.get("value") or {}).get("kind") == "continuable":
            found[str(data["value"]["sessionId"])] = None
        elif e["type"] == "tool/call" and data.get("name") == "send_message":
            try:
                target = json.loads(data.get("arguments") or "{}").get("agent_id")
            except (ValueError, AttributeError):
                target = None
            if isinstance(target, str):
                found[target] = None
    return list(found)


async def enter_leftovers(leftovers: Leftovers) -> int:
    """The `dsh.enter_leftovers` activity's body: a failing root's unread deliveries enter its log
    as injects (next-step inserts, read by no turn), as the local engine's closing root takes its
    drained children's notices. A message the log holds already is skipped, so a retried activity
    appends nothing twice; returns how many entered."""
    store = SessionStore(Path(leftovers.home))
    session = await store.load(leftovers.session_id)
    try:
        inbox = Inbox(session)
        fresh = [m for m in leftovers.messages if not session_holds_message(session, str(m["id"]))]
        for message in fresh:
            inbox.append("next-step", cast(Message, message))
        await store.flush(session)
        return len(fresh)
    finally:
        await store.close(session)


async def _close_with_error(home: Path, failed: FailedRun, detail: NoticeDetail) -> list[dict[str, Any]]:
    """Load the child's log (crash repair closes a cut-off turn), then end the epoch with an
    `error` turn unless a retried settlement already did; returns the log's events."""
    store = SessionStore(home)
    session = await store.load(failed.child_id)
    try:
        latest = latest_epoch(session.events)
        if failed.epoch is not None and (latest is None or latest.epoch < failed.epoch):
            session.append(EPOCH_EVENT, {"epoch": failed.epoch}, ignorable=True)  # it failed before its first turn
        if not _ends_failed(session):
            _error_turn(session, detail)
        await store.flush(session)
        return list(session.events)
    finally:
        await store.close(session)


def _ends_failed(session: Session) -> bool:
    last = next((e for e in reversed(session.events) if e["type"] == "turn/end"), None)
    reason = (last or {}).get("data", {}).get("reason") or {}
    return reason.get("kind") == "error" and (reason.get("error") or {}).get("code") == FAILED_CODE


def _error_turn(session: Session, detail: NoticeDetail) -> None:
    """The local engine's error end (`step/end`, then `turn/end` with the error), as one stepped
    turn, so the fold reads the epoch as ended `error` (a turn without a step counts for nothing)."""
    turn = 1 + max((int(e["data"]["turn"]) for e in session.events if e["type"] == "turn/start"), default=0)
    # --- S-fail begin --- (one turn, no await between its events)
    session.append("turn/start", {"turn": turn})
    session.append("step/start", {"turn": turn, "step": 1})
    session.append("step/end", {"turn": turn, "step": 1})
    session.append("turn/end", {"turn": turn, "reason": {"kind": "error", "error": dict(detail["error"])}})
    # --- S-fail end ---
