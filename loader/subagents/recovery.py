"""Resume finishes the tree (issue 9 item 3, SPEC §26 item 3): after a crash, every descendant that
still owes its parent something becomes resident again and runs to settlement.

Found through the durable headers (`parentSession` chains under `home/sessions`), a descendant is
*owed work* when its log shows one of:
- an epoch that accepted work whose notice (`notice_id(child, epoch)`) is not in its parent's log:
  the crash came before the teardown's notice, whether or not the child had finished;
- pending inbox items after the rebuild (unclaimed work, or notices kept for its next residency);
- a turn cut off by the crash (still open in the file, or closed `interrupted` by repair).

Rule "parents first": each such descendant and every ancestor between it and the root is loaded, and
all of them are installed as resident Activations in one synchronous pass, parent before child, each
child owned by its parent, before any watcher or driver runs. A parent therefore reads `waiting`
until its children's notices arrive live, exactly as in the run the crash cut short.

Rule "a recovered epoch continues": a descendant that owes a notice continues that epoch (same
number, terminal facts from its marker), so the epoch sends exactly one notice; one that owes none
starts a new epoch (a new marker). A turn cut off by the crash, with nothing else pending, gets one
runtime continuation message (T-RESUME-CONTINUE), so its unfinished work is taken up again rather
than silently reported as aborted.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dsh.loader.agent import Inbox, Message, user_message
from dsh.loader.errors import DshError, SessionError, error_chain
from dsh.loader.session import Event, Session
from dsh.loader.subagents.activation import Activation, Ancestry
from dsh.loader.subagents.epochs import (
    CONTINUE_FORM,
    EPOCH_EVENT,
    EpochFacts,
    holds_message,
    latest_epoch,
    next_epoch,
    notice_id,
)
from dsh.loader.texts import TEXTS

if TYPE_CHECKING:
    from dsh.loader.agent import Agent
    from dsh.loader.session import SessionStore
    from dsh.loader.subagents.listing import Catalogue
    from dsh.loader.subagents.manager import ContinuationManager

__all__ = [
    "FoundSession",
    "install_recovered",
    "RecoveryItem",
    "continuation_message",
    "plan_recovery",
    "recover",
    "scan_tree",
    "turn_cut_off",
    "wake_restored",
]

logger = logging.getLogger(__name__)


@dataclass
class FoundSession:
    id: str
    header: dict[str, Any]
    descriptor: dict[str, Any] | None
    events: list[Event]
    children: list[FoundSession] = field(default_factory=list)

    @property
    def parent_id(self) -> str:
        return str(self.header.get("parentSession"))


@dataclass(frozen=True)
class RecoveryItem:
    session: FoundSession
    owed: EpochFacts | None  # the epoch this residency continues; None opens a new epoch


def scan_tree(store: SessionStore, catalogue: Catalogue, root_id: str) -> list[FoundSession]:
    """Every readable descendant of `root_id`, parents before children (blocking: run in a thread).

    Read-only (§5.6 `read`): nothing is locked, truncated or repaired here.
    """
    by_parent: dict[str, list[str]] = {}
    headers: dict[str, dict[str, Any]] = {}
    descriptors: dict[str, dict[str, Any] | None] = {}
    for entry in catalogue.entries():
        if entry.header is None:
            continue
        parent = entry.header.get("parentSession")
        if isinstance(parent, str):
            by_parent.setdefault(parent, []).append(entry.id)
            headers[entry.id] = entry.header
            descriptors[entry.id] = entry.descriptor
    out: list[FoundSession] = []
    seen = {root_id}
    frontier = [root_id]
    while frontier:
        nxt: list[str] = []
        for parent_id in frontier:
            kids = sorted(by_parent.get(parent_id, []), key=lambda i: (headers[i].get("createdAt", 0), i))
            for child_id in kids:
                if child_id in seen:
                    continue
                seen.add(child_id)
                try:
                    read = store.read(child_id)
                except SessionError as exc:
                    logger.warning("resume: skipping unreadable session %s: %s", child_id, error_chain(exc))
                    continue
                out.append(FoundSession(child_id, read.header, descriptors[child_id], read.events))
                nxt.append(child_id)
        frontier = nxt
    return out


def turn_cut_off(events: list[Event]) -> bool:
    """The last turn was cut off by a crash (still open in the file, or closed `interrupted` by
    repair, which only crash repair writes, §5.6) before the model gave its final answer: the turn
    has no assistant message yet, or its last one asked for tools. A turn whose final answer is in
    the log lost only its `turn/end`; continuing it would ask the model a question it answered."""
    last_answer: dict[str, Any] | None = None
    for event in reversed(events):
        kind = event["type"]
        if kind == "assistant/message" and last_answer is None:
            last_answer = event["data"]
        elif kind == "turn/end":
            if (event["data"].get("reason") or {}).get("kind") != "interrupted":
                return False
        elif kind == "turn/start":
            break
    else:
        return False
    if last_answer is None:
        return True
    content = (last_answer.get("message") or {}).get("content") or []
    return last_answer.get("finish") == "tool-calls" and any(b.get("type") == "tool-call" for b in content)


def _pending(f: FoundSession) -> bool:
    try:
        return Inbox(Session(f.header, f.events)).has_pending
    except DshError:
        return False  # an invalid splice history: load would refuse it too


def plan_recovery(root_id: str, root_events: list[Event], found: list[FoundSession]) -> list[RecoveryItem]:
    """Which descendants to make resident, parents first (see the module docstring)."""
    events_of: dict[str, list[Event]] = {root_id: root_events, **{f.id: f.events for f in found}}
    by_id = {f.id: f for f in found}
    owed: dict[str, EpochFacts | None] = {}
    needed: set[str] = set()
    for f in found:
        if (f.descriptor or {}).get("mode") != "continuable":
            continue  # one-shot children belong to their (repaired) tool call; they never resume
        latest = latest_epoch(f.events)
        parent_events = events_of.get(f.parent_id, [])
        if latest is not None and latest.accepted and not holds_message(parent_events, notice_id(f.id, latest.epoch)):
            owed[f.id] = latest
        if f.id in owed or _pending(f) or turn_cut_off(f.events):
            needed.add(f.id)
    chosen: set[str] = set()
    for child_id in needed:
        current: str | None = child_id
        while current is not None and current != root_id and current not in chosen:
            link = by_id.get(current)
            if link is None or (link.descriptor or {}).get("mode") != "continuable":
                break  # a broken chain: nothing below it can reach a live parent
            chosen.add(current)
            current = link.parent_id
    # A chain that does not reach the root cannot be made live under it.
    def reaches_root(cid: str) -> bool:
        seen: set[str] = set()
        while cid != root_id:
            if cid in seen or cid not in chosen:
                return False
            seen.add(cid)
            cid = by_id[cid].parent_id
        return True

    return [RecoveryItem(f, owed.get(f.id)) for f in found if f.id in chosen and reaches_root(f.id)]


def continuation_message() -> Message:
    return user_message(TEXTS["T-RESUME-CONTINUE"], {"kind": "user", "form": CONTINUE_FORM})


async def recover(manager: ContinuationManager, root: Agent, plan: list[RecoveryItem]) -> list[Activation]:
    """Load, install (one sync pass, parents first) and wake every planned descendant."""
    if not plan:
        return []
    installed: list[Activation] = []
    with manager.pending(root):
        loaded: list[tuple[RecoveryItem, Session]] = []
        ok = {root.id}
        for item in plan:
            if item.session.parent_id not in ok:
                continue  # its parent could not be loaded: leave the subtree for a later resume
            try:
                session = await manager.store.load(item.session.id)
            except DshError as exc:
                logger.warning("resume: could not load %s: %s", item.session.id, error_chain(exc))
                continue
            ok.add(item.session.id)
            loaded.append((item, session))
        leftovers: list[Session] = []
        # --- recovery install begin: parents own their children before anything runs ---
        for item, session in loaded:
            parent = manager.live_agent(item.session.parent_id)
            if parent is None:
                leftovers.append(session)
                continue
            try:
                installed.append(
                    install_recovered(manager, parent, session, item.session.descriptor or {}, item.owed)
                )
            except DshError as exc:
                logger.warning("resume: could not install %s: %s", session.id, error_chain(exc))
                leftovers.append(session)
        for a in installed:
            wake_restored(manager, a)
        for a in installed:
            manager.start_watcher(a)
        # --- recovery install end ---
        for session in leftovers:
            await manager.store.close(session)
    return installed


def install_recovered(
    m: ContinuationManager, parent: Agent, session: Session, descriptor: dict[str, Any], owed: EpochFacts | None
) -> Activation:
    """A resumed descendant becomes resident under its live parent (recovery.py); synchronous,
    so a whole tree is installed before any of it runs. With `owed`, the residency continues that
    epoch (same number, terminal facts from its marker), so it sends that epoch's one notice."""
    agent = m.agents.adopt(session, descriptor)
    events = agent.session.events
    if owed is not None:
        epoch, boundary = owed.epoch, owed.start
    else:
        epoch, boundary = next_epoch(events), len(events)
        agent.session.append_owned(EPOCH_EVENT, {"epoch": epoch}, ignorable=True)
    a = Activation(
        child_id=agent.id,
        parent_session=parent.id,
        agent=agent,
        ancestry=Ancestry([agent, *m.live_lineage(parent)]),
        boundary=boundary,
        epoch=epoch,
        announced=True,  # it continues accepted work, holds restored work, or owns children that do
    )
    m.install_activation(a)
    m.acquire_ownership(parent, agent.id)
    m.watch_inbox(a)
    m.events.emit("subagent/start", {"sessionId": agent.id, "parentSessionId": parent.id, "epoch": epoch})
    m.pulse()
    return a



def wake_restored(manager: ContinuationManager, a: Activation) -> None:
    """Restored pending items count as accepted waking work; a cut-off turn gets a continuation."""
    agent = a.agent
    pending = [m["id"] for m in (*agent.inbox.next_step, *agent.inbox.next_turn)]
    if pending:
        manager.admit_restored(a, pending, agent.resume_pending)
    elif turn_cut_off(agent.session.events):
        message = continuation_message()
        manager.admit_waking(a, message["id"], lambda: agent.followup(message))
