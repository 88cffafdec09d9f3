"""One turn of one agent on the Temporal engine (loader/engines/README.md), with the shared core.

`run_turn` rebuilds the agent from its JSONL log (the projection: this is what writes it), binds the
transcript at the cursor the log shows, installs the fences, sends the turn's deliveries, feeds it
whatever the workflow accepts meanwhile and returns once the agent is idle. It knows Temporal only
through `WorkflowLink` (backends.py; worker.py implements it), so it imports no temporalio.

Invariants:
- a delivery whose message id the log already holds is counted as taken and not sent again (a
  retried turn after a worker died), so each accepted message enters the inbox once;
- `taken` counts exactly the deliveries sent (or skipped as held): one the poll fetched but the turn
  never applied stays pending in the workflow for the next turn;
- an interrupt is applied once, between the deliveries it arrived between (`InterruptAt.at`), as
  the core's own `agent.cancel(cause, keep_inbox=True)` (SPEC §10);
- `parked` in the result lists the waking messages (this turn's or an earlier turn's) still queued
  when the agent went idle: the workflow keeps such a child resident and runs no turn for it.
- a retry finishes what the dead attempt left: restored inbox work, else the cut-off turn;
- an interrupt is applied once across attempts: the log says how many of this turn's interrupts
  a dead attempt applied (interrupts.py: an aborted `turn/end`, or the `engine/interrupt` note of
  one that reached the idle agent); a retry does not apply those again, and the work the last of
  them parked stays parked. One that the log does not show was not applied (the log is in order),
  so the retry applies it.
- without a transcript the provider is the worker's own live one (`LiveModel`: its `model.*`
  settings, the key from its environment): no key is in any input, result or heartbeat;
- every spawn, model request and reply's tokens are charged to the tree's budget in the root
  workflow (`TreeBudget`), so `limits.*` hold tree-wide as on the local engine.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from dsh.loader.abort import AbortSignal
from dsh.loader.agent import Agent, AgentOptions, epoch_stop_reason, final_output, fold_consumed_work, run_outcome
from dsh.loader.agent import Message
from dsh.loader.engines.backends import RunningRoom, WorkflowDelegation, WorkflowLink, plain
from dsh.loader.engines.failed_text import KeepFailedText
from dsh.loader.engines.interrupts import apply_interrupt, interrupts_in_log
from dsh.loader.engines.logs import Elsewhere, header_of, spawned
from dsh.loader.engines.settle import NOTICE_LIMIT, bounded_notice
from dsh.loader.engines.wire import (
    Charge,
    Delivery,
    InterruptAt,
    PollReply,
    RunSpec,
    TreeInput,
    TurnInput,
    TurnResult,
)
from dsh.loader.errors import ConfigError
from dsh.loader.fences import Fact, Fences
from dsh.loader.models import Chunk, ModelProvider, ModelRequest, OnRetry, ReplayProvider, Usage
from dsh.loader.models.budget import RunBudget, RunLimits
from dsh.loader.session import Session
from dsh.loader.subagents import EPOCH_EVENT, ManagerConfig
from dsh.loader.subagents.epochs import latest_epoch, session_holds_message
from dsh.loader.subagents.notice import settlement_detail
from dsh.loader.subagents.recovery import continuation_message, turn_cut_off
from dsh.loader.texts import render
from dsh.loader.transcripts import Transcript, load_transcript
from dsh.loader.tree import Tree

if TYPE_CHECKING:
    from dsh.loader.models.openai import ModelSettings


__all__ = ["NOTICE_LIMIT", "LiveModel", "TreeBudget", "WorkflowLink", "run_turn"]

logger = logging.getLogger(__name__)


class _Heartbeating:
    """The agent's provider, heartbeating per chunk: a turn is alive while its model streams."""

    def __init__(self, inner: ModelProvider, beat: Callable[[], None]) -> None:
        self.inner = inner
        self.name = inner.name
        self._beat = beat

    async def stream(self, request: ModelRequest, signal: AbortSignal, on_retry: OnRetry) -> AsyncGenerator[Chunk, None]:
        async for chunk in self.inner.stream(request, signal, on_retry):
            self._beat()
            yield chunk

    async def aclose(self) -> None:
        await self.inner.aclose()


class _Board:
    """This turn's half of the root's fence board: facts recorded here that a fence can read
    (`Fences.named`) are published, in batches (one signal in flight, the facts recorded meanwhile
    go in the next); the tree's facts are merged into the local fences as they arrive, for a turn a
    fence can hold (`Fences.may_wait`); any other turn needs none of them."""

    def __init__(self, fences: Fences, link: WorkflowLink) -> None:
        self.fences = fences
        self.link = link
        self.named = fences.named()
        self.queued: list[list[Any]] = []
        self.sending: asyncio.Task[None] | None = None
        fences.on_fact = self._publish

    def _publish(self, fact: Fact) -> None:
        if fact[1] not in self.named:
            return  # no fence reads this agent's facts
        self.queued.append(list(fact))
        if self.sending is None:
            self.sending = asyncio.ensure_future(self._send())

    async def _send(self) -> None:
        try:
            while self.queued:
                # --- S-board begin --- (take the batch: no await between the read and the reset)
                batch, self.queued = self.queued, []
                # --- S-board end ---
                try:
                    await self.link.publish_facts(batch)
                except Exception as exc:
                    logger.warning("publishing %d fence facts failed: %r", len(batch), exc)
        finally:
            self.sending = None

    async def mirror(self) -> None:
        seen = 0
        while True:
            facts = await self.link.facts_after(seen)
            seen += len(facts)
            self.fences.merge(tuple(f) for f in facts)

    async def flush(self) -> None:
        """Every fact of this turn is on the board before the turn returns."""
        if self.sending is not None:
            await asyncio.gather(self.sending, return_exceptions=True)


async def _abandon(task: asyncio.Task[None], agent_id: str) -> None:
    """Cancel a long-poll the turn no longer needs. The SDK turns a cancelled update call into its
    own error type, so whatever the poll raises now is the cancel, unless it had failed before."""
    failed = task.done() and not task.cancelled() and task.exception() is not None
    task.cancel()
    outcome = (await asyncio.gather(task, return_exceptions=True))[0]
    if failed:
        logger.warning("a long-poll of %s failed: %r", agent_id, outcome)


# Parsed transcripts of this worker process, by (path, mtime, size): every turn of a tree reads the
# same file, and parsing a 1,000-child fan-out's (~40 ms) was a fifth of each child's worker CPU
# (issue 12 item 7). The spec is read-only; each turn gets its own ReplayProvider (the cursors).
_SCRIPTS: dict[tuple[str, int, int], Transcript] = {}
_SCRIPTS_KEPT = 8


def _script(path: Path) -> Transcript:
    """The parsed transcript, from this process's cache while the file is unchanged."""
    try:
        stat = path.stat()
    except OSError:
        return load_transcript(path)  # its typed error
    key = (str(path), stat.st_mtime_ns, stat.st_size)
    script = _SCRIPTS.get(key)
    if script is None:
        script = load_transcript(path)
        if len(_SCRIPTS) >= _SCRIPTS_KEPT:
            del _SCRIPTS[next(iter(_SCRIPTS))]  # the oldest
        _SCRIPTS[key] = script
    return script


@dataclass(frozen=True)
class LiveModel:
    """The worker's own live provider: its `model.*` settings (endpoint, key variable, timeouts,
    retries) and its environment, where the key is read. The run names only the model."""

    settings: ModelSettings
    environ: Mapping[str, str]


class TreeBudget(RunBudget):
    """The tree's run budget on Temporal: one tree's turns run in many activities, so every charge
    goes to the one `RunBudget` the root workflow keeps (update `charge`), and a refusal raises
    here the error the local budget raises (same code and text)."""

    def __init__(self, link: WorkflowLink, limits: RunLimits) -> None:
        super().__init__(limits)
        self.link = link

    async def charge_child(self) -> None:
        await self._charge(Charge(kind="children"))

    async def charge_request(self) -> None:
        await self._charge(Charge(kind="requests"))

    async def charge_usage(self, usage: Usage) -> None:
        await self._charge(Charge(kind="tokens", tokens=usage.input_tokens + usage.output_tokens))

    async def _charge(self, charge: Charge) -> None:
        answer = await self.link.charge(charge)
        if answer.refused is not None:
            raise self.refusal(answer.refused)


def _provider(run: RunSpec, live: LiveModel | None) -> ModelProvider:
    """The transcript's replay provider, else the worker's live one (a missing key is the local
    engine's MISSING_API_KEY, named by variable, raised before the turn writes anything)."""
    if run.transcript is not None:
        return ReplayProvider(_script(Path(run.transcript)))
    if live is None:
        raise ConfigError(render("T-ENGINE-NO-LIVE"), code="CONFIG_INVALID")
    from dsh.loader.models import OpenAICompatibleProvider

    return OpenAICompatibleProvider.from_env(live.settings, live.environ)


async def run_turn(spec: TurnInput, link: WorkflowLink, *, retry: bool = False, live: LiveModel | None = None) -> TurnResult:
    """The `dsh.turn` activity's body: run the agent from these deliveries until it is idle.

    `retry`: this is not the activity's first attempt (its worker died). Only then does work the
    log restored into the inbox wake the agent: on a first attempt the restored inbox holds the
    injects of earlier turns, which wake no one (SPEC §6.2; a released child's notice enters its
    closing parent so)."""
    who = spec.agent
    run = who.run
    provider = _provider(run, live)
    replay = provider if isinstance(provider, ReplayProvider) else None
    manager_config = ManagerConfig(max_depth=run.max_depth, report_delivery=run.report_delivery,  # type: ignore[arg-type]
                                   model=run.model)
    tree = Tree(
        home=Path(run.home),
        provider=provider,
        options=AgentOptions(
            model=run.model, system_prompt=run.system_prompt, max_parallel_tool_calls=run.max_parallel_tool_calls,
            max_steps_per_turn=run.max_steps_per_turn, max_tokens=run.max_tokens, temperature=run.temperature,
        ),
        manager_config=manager_config,
        batch_delay_ms=run.batch_delay_ms,
        fsync=run.fsync,
        inline_io=replay is not None,  # replay: the order is the transcript's alone (SPEC §26 item 1)
        budget=TreeBudget(link, RunLimits(run.max_children, run.max_requests, run.max_tokens_total)),
    )
    # Before any agent is made (tools_for reads it): the backend creates child sessions in this store,
    # or (homes, README "Homes") leaves each child's log to its own create activity on its own home
    # and lists it from the header it made.
    elsewhere = Elsewhere(tree.catalogue, spec.children) if spec.children_elsewhere else None
    if elsewhere is not None:
        tree.catalogue = elsewhere
    tree.delegation = WorkflowDelegation(link, manager_config, run.root_id, tree.store,
                                         bind=replay.bind_child if replay is not None else None,
                                         listed=elsewhere.add if elsewhere is not None else None,
                                         room=RunningRoom(run.max_running_children - spec.own_workflow, spec.running))
    fences: Fences | None = None
    script = replay.transcript.spec if replay is not None else None
    if replay is not None and script is not None and ((script.fences and run.fences_allowed) or script.user):
        # Also for the transcript's user alone: its conditions' facts go on the board (remote_user.py).
        fences = Fences(list(script.fences) if run.fences_allowed else [], tree=tree, replay=replay,
                        timeout=run.fence_timeout)
        fences.install()
    # Heartbeat per chunk; and a failed request's streamed text into the log, for `--record`.
    tree.agent_hooks.append(lambda agent: setattr(
        agent, "provider", _Heartbeating(KeepFailedText(agent.provider, agent.session), link.heartbeat)))
    try:
        agent = await _open_agent(tree, replay, who)
    except BaseException:
        await provider.aclose()
        raise
    if replay is not None:  # `{{child:...}}`: every child the agent's log shows it spawned, any resident one
        for child_id, call_id in spawned(agent.session.events):
            replay.bind_child(child_id, {"mode": "continuable", "spawnCallId": call_id})  # binding reads the call id
        for child in spec.children:
            replay.bind_child(child.child_id, child.descriptor)
    taken = 0
    applied = 0  # interrupts of this turn applied (Poll.interrupts)
    waking = set(spec.parked)

    def deliver(d: Delivery) -> None:
        nonlocal taken
        taken += 1
        link.heartbeat()
        if d.waking:
            waking.add(str(d.message["id"]))
        if session_holds_message(agent.session, str(d.message["id"])):
            return  # a retried turn: this one is in the log already
        # A notice is steered into a running agent and wakes an idle one (notice.deliver_live).
        message = cast(Message, d.message)  # one this runtime made: user_message / settlement_message
        if d.send == "steer" or (d.send == "notice" and agent.status != "idle"):
            agent.steer(message)
        elif d.send == "inject":
            agent.inject(message)
        else:
            agent.followup(message)

    def cancel(at: InterruptAt) -> None:
        nonlocal applied
        applied += 1
        apply_interrupt(agent, at.cause, spec.seq, applied)  # §10.3: queued work stays, parked

    def apply(reply: PollReply) -> None:
        nonlocal taken
        if reply.base > spec.offset + taken:
            # A retried turn whose run moved mid-turn: the deliveries before `base` are in the log
            # (the dead attempt flushed them before it said so, `Poll.durable`).
            taken = reply.base - spec.offset
        base = spec.offset + taken
        interrupts = list(reply.interrupts)
        for k, d in enumerate(reply.deliveries):
            while interrupts and interrupts[0].at <= base + k:
                cancel(interrupts.pop(0))
            deliver(d)
        for at in interrupts:
            cancel(at)

    async def poll() -> None:
        durable = False
        while True:
            reply = await link.poll(spec.offset + taken, applied, durable=durable)
            apply(reply)
            durable = reply.moved
            if durable:
                # Its run continues as new mid-turn (README "A turn across runs"): what this turn
                # took goes to disk before the next poll says so, and the new run holds only the rest.
                await agent.store.flush(agent.session)

    handed = list(spec.deliveries)
    skipped = 0  # pending pages a moved run no longer holds: in the log already (`apply`)
    while skipped + len(handed) < len(spec.deliveries) + spec.more:  # the rest of the pending pages, by index
        page = await link.poll(spec.offset + skipped + len(handed), 0, pages=True)  # its interrupts: the main poll's
        skipped = max(skipped, page.base - spec.offset - len(handed))
        handed += page.deliveries
    board = _Board(fences, link) if fences is not None and run.fences else None
    pollers: list[asyncio.Task[None]] = []
    try:
        if board is not None and replay is not None and board.fences.may_wait(replay.agent_key_of(agent.id)):
            pollers.append(asyncio.create_task(board.mirror(), name=f"board:{agent.id}"))
        if spec.release:
            # The tree releases this child (drain, §17.2): the disposal's cancel first, clearing its
            # queue as canceled splices; what arrives after it (notices) is injected, unread.
            agent.cancel({"kind": "parent"})
        # A release turn continues nothing; a retried one may (below).
        retried = retry and not spec.release
        cut_off = retried and turn_cut_off(agent.session.events)
        interrupted = False
        if retried:
            applied, interrupted = interrupts_in_log(agent.session.events, {str(d.message["id"]) for d in handed},
                                                     spec.seq)
        taken = skipped
        for d in handed:
            deliver(d)
        # A retried turn (its worker died): work the log restored into the inbox runs; else a turn
        # the death cut off is continued, as `dsh run --resume` continues one (tree.py). Not when
        # the dead attempt's last turn ended by an interrupt: its queue is parked (§10.3).
        if retried and not interrupted and not agent.resume_pending() and cut_off:
            agent.followup(continuation_message())
        pollers.append(asyncio.create_task(poll(), name=f"poll:{agent.id}"))
        await agent.when_idle()
        parked = [str(m["id"]) for items in agent.inbox.lists.values() for m in items if str(m["id"]) in waking]
        if parked and fences is not None and not spec.release:
            fences.note_parked(agent.id)
    finally:
        try:
            for poller in pollers:
                await _abandon(poller, agent.id)
            if board is not None:
                await board.flush()
            if fences is not None:
                fences.release()
        finally:
            try:
                await agent.dispose(keep_inbox=True)  # queued (parked) work stays for the next turn
            finally:
                await provider.aclose()
    result = _result(agent.session, who, taken)
    result.parked = [] if spec.release else parked
    if replay is not None:
        result.agent_key = replay.agent_key_of(agent.id)
        result.violations = [dict(v) for v in replay.violations]
    if fences is not None:
        result.violations += fences.violations
        result.fences_engaged = list(fences.engaged)
    return result


async def _open_agent(tree: Tree, replay: ReplayProvider | None, who: TreeInput) -> Agent:
    """The session as the local engine would have made it (Tree.create_root, ChildAgents.create)."""
    store = tree.store
    if not store.exists(who.session_id):
        session = await store.create(header_of(who))
    else:
        session = await store.load(who.session_id)
    if replay is not None:
        replay.resume_session(who.session_id, who.descriptor, session.events)
    agent = tree.make_agent(session, "root" if who.parent_id is None else "continuable")
    # Descriptor first (§8.2); also when a worker died between creating the log and this append.
    if who.descriptor is not None and not any(e["type"] == "subagent/descriptor" for e in session.events):
        session.append("subagent/descriptor", who.descriptor)
    latest = latest_epoch(session.events)
    if who.epoch is not None and (latest is None or latest.epoch < who.epoch):
        session.append(EPOCH_EVENT, {"epoch": who.epoch}, ignorable=True)
    assert tree.registry is not None
    tree.registry.register(agent)
    return agent


def _result(session: Session, who: TreeInput, taken: int) -> TurnResult:
    events = session.events
    if who.parent_id is None:
        outcome = run_outcome(list(events))
        error = None
        if outcome.end is not None and outcome.end["data"]["reason"].get("kind") == "error":
            error = outcome.end["data"]["reason"].get("error")
        if len(outcome.output.encode("utf-8")) > NOTICE_LIMIT:  # by reference: the client reads the log
            return TurnResult(taken=taken, stop_reason=outcome.stop_reason, error=error, output_in_log=True)
        return TurnResult(taken=taken, stop_reason=outcome.stop_reason, output=outcome.output, error=error)
    start = max((i for i, e in enumerate(events) if e["type"] == EPOCH_EVENT), default=0)
    suffix = list(events[start:])
    stop_reason = epoch_stop_reason(fold_consumed_work(suffix))
    output = final_output(suffix)
    detail = settlement_detail(stop_reason, suffix)
    # The notice is this turn's result, and Temporal refuses a payload over 2 MB (NOTICE_LIMIT).
    notice = bounded_notice(who.session_id, stop_reason, output, epoch=who.epoch, detail=detail, limit=NOTICE_LIMIT)
    return TurnResult(taken=taken, stop_reason=stop_reason, notice=plain(notice))
