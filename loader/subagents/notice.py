"""The settlement notice (SPEC §9, as revised by §26 item 3): runtime-authored, delivered inside the
disposal transaction, exactly once per epoch that accepted work.

The notice is data first (`source.stopReason`, plus `source.error` / `source.outputTokens` when the
epoch's log holds the failure's details: issue 16 item 5), and its text is rendered from that data by
a pure function. Its id is `notice_id(child, epoch)` (epochs.py), and it is never inserted into a parent
whose log already holds that id. Delivery never blocks or fails teardown:
- a live parent gets it as §9.4 says (a closing parent by inject, which its disposal no longer
  clears: the notice stays pending for its next residency);
- a parent that is not live gets it durably: a task appends the insert splice to the parent's own
  file through the store, under the parent's child lock. If another process holds the file
  (SESSION_BUSY) the write is skipped: the parent's log still lacks the id, so the next resume pass
  (recovery.py) delivers it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NotRequired, Protocol, TypedDict

from dsh.loader.agent import Inbox, Message, text_block, user_message
from dsh.loader.agent.fold import STOP_REASONS
from dsh.loader.errors import SessionError, error_chain
from dsh.loader.subagents.epochs import holds_message, notice_id
from dsh.loader.texts import TEXTS, render

if TYPE_CHECKING:
    from dsh.loader.agent import Agent
    from dsh.loader.subagents.activation import Activation
    from dsh.loader.session import SessionStore
    from dsh.loader.subagents.lock import ChildLock

__all__ = [
    "SUMMARY_LIMIT",
    "NoticeDetail",
    "NoticeHost",
    "deliver_live",
    "deliver_offline",
    "notify_settlement",
    "render_settlement_notice",
    "settlement_detail",
    "settlement_message",
    "teardown_detail",
]

logger = logging.getLogger(__name__)

SUMMARY_LIMIT = 120
DETAIL_LIMIT = 160  # a notice names the failure; the child's session keeps the full message


class NoticeDetail(TypedDict):
    """What the epoch's log says about how it failed, when it says anything (issue 16 item 5).

    `error` is the `turn/end` error (`code`, message bounded to DETAIL_LIMIT on one line);
    `outputTokens` the output usage of the message that hit the token limit."""

    error: NotRequired[dict[str, str]]
    outputTokens: NotRequired[int]


def settlement_detail(stop_reason: str, events: list[dict[str, Any]]) -> NoticeDetail:
    """The details of an `error` or `max-tokens` epoch, read from its own events; `{}` otherwise.

    The last `turn/end` with an error names the failure; the last `assistant/message` that finished
    with `max-tokens` gives the token count. Refusals (`blocked`) carry no details in the log."""
    detail: NoticeDetail = {}
    for event in reversed(events):
        data = event.get("data") or {}
        if stop_reason == "error" and event.get("type") == "turn/end":
            error = (data.get("reason") or {}).get("error")
            if isinstance(error, dict) and isinstance(error.get("code"), str):
                detail["error"] = {"code": error["code"], "message": _short(str(error.get("message", "")))}
                return detail
        if stop_reason == "max-tokens" and event.get("type") == "assistant/message":
            tokens = (data.get("usage") or {}).get("outputTokens")
            if data.get("finish") == "max-tokens" and isinstance(tokens, int):
                detail["outputTokens"] = tokens
                return detail
    return detail


def teardown_detail(code: str, message: str) -> NoticeDetail:
    """A teardown failure turns the epoch into `error`; the notice names that failure."""
    return {"error": {"code": code, "message": _short(message)}}


def _short(message: str) -> str:
    line = " ".join(message.split())
    return line if len(line) <= DETAIL_LIMIT else line[: DETAIL_LIMIT - 1] + "…"


class NoticeHost(Protocol):
    """What delivering a notice reads of the continuation manager (facts about the parent) and the
    two things it may ask of it: a waking send into a resident parent, and tracking a durable write
    into a parent that is not live here."""

    @property
    def store(self) -> SessionStore: ...
    @property
    def locks(self) -> ChildLock: ...
    def live_agent(self, session_id: str) -> Agent | None: ...
    def own_activation(self, agent: Agent) -> Activation | None: ...
    def closing_for(self, agent: Agent) -> str | None: ...
    def admit_waking(self, a: Activation, message_id: str, send: Callable[[], object]) -> None: ...
    def track_offline(self, task: asyncio.Task[None]) -> None: ...


def render_settlement_notice(
    child_id: str, stop_reason: str, output: list[dict[str, Any]] | None, detail: NoticeDetail | None = None
) -> list[dict[str, Any]]:
    error = (detail or {}).get("error")
    tokens = (detail or {}).get("outputTokens")
    if stop_reason == "error" and error is not None:
        summary = render("T-NOTICE-error-detail", id=child_id, code=error["code"], message=error["message"])
    elif stop_reason == "max-tokens" and tokens is not None:
        summary = render("T-NOTICE-max-tokens-detail", id=child_id, tokens=tokens)
    elif stop_reason in STOP_REASONS:
        summary = render(f"T-NOTICE-{stop_reason}", id=child_id)
    else:
        summary = render("T-NOTICE-other", id=child_id, reason=stop_reason)
    blocks = [text_block(summary)]
    rendered: list[dict[str, Any]] = []
    for block in output or []:
        if block.get("type") == "text":
            rendered.append(text_block(block.get("text", "")))
        elif block.get("type") == "tool-call":
            rendered.append(
                text_block(render("T-NOTICE-TOOLCALL", name=block.get("name"), arguments=block.get("arguments")))
            )
        # reasoning blocks are dropped: the notice reports what the child said, not how it thought
    if rendered:
        blocks.append(text_block(TEXTS["T-NOTICE-OUTPUT"]))
        blocks.extend(rendered)
    else:
        blocks.append(text_block(TEXTS["T-NOTICE-NO-OUTPUT"]))
    return blocks


def _summary(text: str) -> str:
    return text if len(text) <= SUMMARY_LIMIT else text[: SUMMARY_LIMIT - 1] + "…"


def settlement_message(
    child_id: str,
    stop_reason: str,
    output: list[dict[str, Any]] | None,
    *,
    epoch: int | None = None,
    detail: NoticeDetail | None = None,
) -> Message:
    """With `epoch`, the message carries the epoch's one notice id (`notice_id`); `detail` (from
    `settlement_detail`) joins the source as data, and the text is rendered from it."""
    content = render_settlement_notice(child_id, stop_reason, output, detail)
    source: dict[str, Any] = {
        "kind": "subagent-settled",
        "form": "notice",
        "summary": _summary(content[0]["text"]),
        "senderSessionId": child_id,
        "stopReason": stop_reason,
    }
    if detail and stop_reason == "error" and "error" in detail:
        source["error"] = dict(detail["error"])
    if detail and stop_reason == "max-tokens" and "outputTokens" in detail:
        source["outputTokens"] = detail["outputTokens"]
    return user_message(content, source, id=notice_id(child_id, epoch) if epoch is not None else None)


def notify_settlement(
    manager: NoticeHost,
    a: Activation,
    stop_reason: str,
    output: list[dict[str, Any]] | None,
    detail: NoticeDetail | None = None,
) -> None:
    """Part of sync span S6; see §9.4 for what each parent state experiences."""
    if not a.announced:
        return  # a rolled-back materialization never accepted work
    try:
        message = settlement_message(a.child_id, stop_reason, output, epoch=a.epoch, detail=detail)
        parent = manager.live_agent(a.parent_session)
        if parent is None:
            deliver_offline(manager, a.parent_session, message)
            return
        deliver_live(manager, parent, message)
    except Exception as exc:
        logger.warning(TEXTS["T-LOG-NOTICE-FAILED"].format(id=a.child_id, detail=error_chain(exc)))


def deliver_live(manager: NoticeHost, parent: Agent, message: Message) -> None:
    """§9.2 steps 4–5; synchronous, so it can run inside span S6. Raises what the send raises."""
    if holds_message(parent.session.events, message["id"]):
        return  # delivered by an earlier process (a crash between the notice and the release)
    own = manager.own_activation(parent)
    if manager.closing_for(parent) is not None or (own is not None and own.disposal is not None):
        # A closing parent must not start a model turn for it (§24 item 3); its disposal keeps
        # the notice pending (Inbox.clear), so the next residency reads it.
        parent.inject(message)
        return
    # Steer, not inject, for a running parent: a parent whose turn was already cancelled only
    # picks the notice up through the latch a waking send sets. Status read and send share S6.
    send = parent.followup if parent.status == "idle" else parent.steer
    if own is not None:
        manager.admit_waking(own, message["id"], lambda: send(message))
    else:
        send(message)


def deliver_offline(manager: NoticeHost, parent_id: str, message: Message) -> None:
    """Start the durable write of a notice into a parent that is not live here (issue 9 item 4)."""
    task = asyncio.get_running_loop().create_task(
        _write_offline(manager, parent_id, message), name=f"notice-offline:{parent_id}"
    )
    manager.track_offline(task)
    task.add_done_callback(_log_failure)


async def _write_offline(manager: NoticeHost, parent_id: str, message: Message) -> None:
    async def op() -> None:
        # Under the parent's child lock: a cold resume of the parent waits for this write, and
        # then finds the notice pending in the rebuilt inbox.
        live = manager.live_agent(parent_id)
        if live is not None:  # it came back in this run meanwhile: deliver as to any live parent
            deliver_live(manager, live, message)
            return
        closing = manager.store.get_live(parent_id)
        if closing is not None:
            # Unregistered but still open here: its disposal is closing the file; share that close.
            await manager.store.close(closing)
        try:
            session = await manager.store.load(parent_id)
        except SessionError as exc:
            level = logging.INFO if exc.code == "SESSION_BUSY" else logging.WARNING
            logger.log(level, TEXTS["T-LOG-NOTICE-KEPT"].format(id=parent_id, detail=error_chain(exc)))
            return
        try:
            if not holds_message(session.events, message["id"]):
                Inbox(session).append("next-turn", message)
                await manager.store.flush(session)
        finally:
            await manager.store.close(session)

    await manager.locks.run(parent_id, op)


def _log_failure(task: asyncio.Task[None]) -> None:
    if task.cancelled():
        return
    exc = task.exception()
    if exc is not None:
        logger.warning(TEXTS["T-LOG-NOTICE-FAILED"].format(id=task.get_name(), detail=error_chain(exc)))
