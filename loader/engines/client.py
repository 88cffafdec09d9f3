"""`dsh run --engine temporal` (issue 12 item 3): submit a tree to workers and build its run result.

The result is built as `run_tree` builds it (§7.4, §17.3) from what the root workflow returns, plus
the end-of-run checks that need the whole tree: REPLAY_UNCONSUMED from the final logs (a fresh
replay provider resumed over every session of the tree) and FENCE_UNUSED from the fences the turn
activities report engaged. The run budget (`budget`, BUDGET_EXHAUSTED, exit 1) is the root
workflow's. Without a transcript the workers' live providers run the tree: this process reads no
key and sends none (loader/engines/README.md "Live providers").
"""

from __future__ import annotations

import asyncio
import logging
import os
from datetime import timedelta
from pathlib import Path
from typing import Any, get_args

from temporalio.client import Client, WorkflowFailureError, WorkflowQueryFailedError
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError

from dsh.loader.agent import user_message
from dsh.loader.config import TemporalConfig
from dsh.loader.engines.refusals import MESSAGE_LIMIT, oversize
from dsh.loader.engines.wire import Delivery, RunSpec, TreeInput, TreeResult, task_timeout
from dsh.loader.engines.workflow import AgentWorkflow
from dsh.loader.errors import ConfigCode, ConfigError
from dsh.loader.fences import named_agents, unused_fences, user_agents
from dsh.loader.engines.pages import PAGE_BYTES, PAGE_LINES
from dsh.loader.engines.logs import replay_over
from dsh.loader.engines.recording import LoggedRecording
from dsh.loader.engines.remote_user import RemoteUser
from dsh.loader.engines.stream import LONG_POLL, Feed, HomeFeed, StreamMode, choose_feed
from dsh.loader.headless import RunRequest, RunResult, exit_code_for, init_record, system_prompt
from dsh.loader.ids import new_root_id
from dsh.loader.models import FunctionInfo, FunctionProvider, FunctionReply, ModelProvider, ModelRequest, ReplayProvider
from dsh.loader.models.budget import RunBudget, RunLimits
from dsh.loader.models.recorder import secrets_from_env
from dsh.loader.ndjson import parked_entry, record
from dsh.loader.session import ReadResult
from dsh.loader.texts import render
from dsh.loader.tools import tools_for
from dsh.loader.transcripts import Transcript
from dsh.loader.tree import Tree

__all__ = ["STALL_EVERY", "TAIL_INTERVAL", "StallWatch", "connect", "root_tool_names", "run_tree_temporal", "submit"]

logger = logging.getLogger(__name__)

# How often the client reads the tree's logs while the run goes on (the stream's latency only:
# a last read after the root workflow returned sees every line).
TAIL_INTERVAL = 0.05
# Under `run.parked: wait`, every this many reads the client asks the root whether the tree is
# stalled (query `view`, no history): the latency of T-CLI-STALLED and the `waiting` record only.
STALL_EVERY = 5
# A query waits for a worker to answer it; with none (all died) the next question asks again.
QUERY_TIMEOUT = timedelta(seconds=10)


async def connect(address: str, namespace: str) -> Client:
    """The client, or a typed error naming the address (exit 2: the configuration points nowhere)."""
    try:
        return await Client.connect(address, namespace=namespace)
    except RuntimeError as exc:  # the SDK's "Failed client connect: …"
        raise ConfigError(render("T-ENGINE-UNREACHABLE", address=address, namespace=namespace, detail=exc),
                          code="CONFIG_INVALID") from exc


def run_spec(request: RunRequest, root_id: str, task_queue: str, heartbeat_seconds: float = 60.0) -> RunSpec:
    config = request.config
    script = refuse(request)
    limits = config.limits
    return RunSpec(
        home=str(Path(request.home).resolve()), root_id=root_id,
        transcript=str(script.path) if script is not None else None,
        # The board is kept for the fences and for the transcript's user (remote_user.py: its
        # conditions are read from the board), each agent they name publishing its facts.
        fences_allowed=request.fences_allowed,
        fences=script is not None and ((request.fences_allowed and bool(script.spec.fences)) or bool(script.spec.user)),
        fence_agents=sorted(named_agents(script.spec.fences) | user_agents(script.spec.user)) if script is not None else [],
        fence_timeout=config.testing.fence_timeout_seconds,
        model="replay" if script is not None else config.model.model, system_prompt=system_prompt(config),
        max_parallel_tool_calls=config.agent.max_parallel_tool_calls,
        max_steps_per_turn=config.agent.max_steps_per_turn, max_tokens=config.model.max_tokens,
        temperature=config.model.temperature, max_depth=config.subagents.max_depth,
        report_delivery=config.subagents.report_delivery, batch_delay_ms=config.persistence.batch_delay_ms,
        fsync=config.persistence.fsync, task_queue=task_queue, parked=config.run.parked,
        continue_as_new_after=config.temporal.continue_as_new_after, heartbeat_seconds=heartbeat_seconds,
        continue_as_new_updates=config.temporal.continue_as_new_updates,
        max_running_children=config.temporal.max_running_children,
        turn_workflows=config.temporal.turn_workflows,
        workflow_task_timeout=config.temporal.workflow_task_timeout_seconds,
        max_children=limits.max_children, max_requests=limits.max_requests, max_tokens_total=limits.max_tokens,
    )


def refuse(request: RunRequest) -> Transcript | None:
    """What this engine cannot run, refused before anything starts (not ignored); the script, or
    None for a live run (the workers' providers)."""
    for given, flag in ((request.resume, "--resume"), (request.timeout, "--timeout")):
        if given is not None:  # refused, not ignored: each is a later slice
            raise ConfigError(render("T-ENGINE-UNSUPPORTED", what=flag), code="USAGE")
    script = request.transcript
    if request.provider is not None:  # an in-process object cannot cross to a worker
        raise ConfigError(render("T-ENGINE-REPLAY-ONLY"), code="CONFIG_INVALID")
    if script is None:
        if request.config.model.provider == "replay":  # as run_tree says it
            raise ConfigError("model.provider is replay, which needs --transcript", code="CONFIG_INVALID")
        return None
    if script.spec.fences and not request.fences_allowed:
        raise ConfigError(render("T-CLI-FENCES", file=script.path), code="FENCES_REFUSED")
    return script


async def submit(client: Client, request: RunRequest, task_queue: str, root_id: str | None = None) -> TreeResult:
    """Start the root workflow (id = root session id) with the task and wait for its result."""
    script = refuse(request)
    task = request.task if request.task is not None or script is None else script.task
    if task is None:
        raise ConfigError("a task or a transcript with a task is required", code="USAGE")
    message = dict(user_message(task, {"kind": "user"}))
    if (size := oversize(message)) is not None:  # the server would refuse the root's start
        raise ConfigError(render("T-ENGINE-MESSAGE-TOO-LARGE", what="the task", size=size, limit=MESSAGE_LIMIT),
                          code="USAGE")
    root_id = root_id or new_root_id()
    spec = run_spec(request, root_id, task_queue, request.config.temporal.heartbeat_timeout_seconds)
    tree = TreeInput(run=spec, session_id=root_id, deliveries=[Delivery(message)], cwd=os.getcwd())
    handle = await client.start_workflow(AgentWorkflow.run, tree, id=root_id, task_queue=task_queue,
                                         task_timeout=task_timeout(spec))
    if request.sinks.on_started is not None:
        request.sinks.on_started(root_id)  # as run_tree: who waits for the run learns its root
    try:
        return await handle.result()
    except WorkflowFailureError as exc:
        raise _config_failure(exc) or exc


def _scripted_user(request: RunRequest, script: Transcript | None, client: Client, root_id: str) -> RemoteUser | None:
    """The transcript's user (remote_user.py), its actions started once the root workflow is."""
    if script is None or not script.spec.user:
        return None
    user = RemoteUser(script, client, root_id, lambda: {}, request.config.testing.fence_timeout_seconds)
    started = request.sinks.on_started

    def on_started(root: str) -> None:
        if started is not None:
            started(root)
        user.install()

    request.sinks.on_started = on_started
    return user


def _config_failure(exc: WorkflowFailureError) -> ConfigError | None:
    """A worker's configuration refused a turn (worker.py: MISSING_API_KEY, non-retryable): the
    local engine's typed error (exit 2), with the worker's message."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, ApplicationError) and cause.type in get_args(ConfigCode):
            return ConfigError(cause.message, code=cause.type)  # type: ignore[arg-type]
        cause = cause.__cause__ or getattr(cause, "cause", None)
    return None


async def run_tree_temporal(request: RunRequest, temporal: TemporalConfig, client: Client | None = None,
                            *, tail_interval: float = TAIL_INTERVAL, stream: StreamMode = "auto",
                            page_bytes: int = PAGE_BYTES, page_lines: int = PAGE_LINES,
                            long_poll: float = LONG_POLL) -> RunResult:
    """`run_tree` on the Temporal engine: same request, same sinks, same result shape.

    The sinks are fed by reading the tree's logs (stream.py: from the home when this process shares
    it with the workers, else from the server; `stream` forces one) while the root workflow runs,
    and once more after it returned, when every turn activity has closed its log: so the stream
    and the result's ledgers hold every line, whatever the passes' timing."""
    started = request.clock()
    script = refuse(request)
    if client is None:
        client = await connect(temporal.address, temporal.namespace)
    root_id = new_root_id()
    sinks = request.sinks
    if sinks.records is not None:
        shown = ReplayProvider(script) if script is not None else _NOT_HERE
        model = "replay" if script is not None else request.config.model.model
        sinks.records.init(init_record(request, shown, model, root_id, root_tool_names(request, shown)))
    on_started = request.sinks.on_started  # `_scripted_user` chains its start to it, restored below
    user = _scripted_user(request, script, client, root_id)
    run = asyncio.ensure_future(submit(client, request, temporal.task_queue, root_id))
    waits = request.config.run.parked == "wait"
    try:
        # Under `run.parked: wait` a page waits at most a second, so the stall question is asked.
        feed = await choose_feed(stream, client, temporal.task_queue, Path(request.home), root_id, sinks, run,
                                 tail_interval, max_bytes=page_bytes, max_lines=page_lines,
                                 long_poll=min(long_poll, 1.0) if waits else long_poll)
        stall = StallWatch(client, request, root_id, feed) if waits else None
        every = STALL_EVERY if isinstance(feed, HomeFeed) else 1
        passes = 0
        if user is not None:
            user.logs = feed.logs
        while not run.done():
            await feed.step(run, tail_interval)
            passes += 1
            if user is not None:
                user.stepped()
            if stall is not None and passes % every == 0:
                await stall.check()
        result = run.result()
    finally:
        run.cancel()
        if user is not None:  # its waits end with the run, a failed one too; `finish` reports them
            user.stop()
            request.sinks.on_started = on_started
    await feed.drain()
    if request.record is not None:
        task = request.task if request.task is not None or script is None else script.task
        await asyncio.to_thread(_write_recording, request, script, task or "", feed, result.session_id)
    violations = list(result.violations)
    if user is not None:
        violations += user.finish()
    if script is not None:
        violations += await asyncio.to_thread(lambda: _unconsumed(script, feed.logs(), result.session_id))
        violations += unused_fences(list(script.spec.fences), result.fences_engaged)
    error = result.error
    exhausted = result.budget.get("exhausted")
    if exhausted is not None:  # as run_tree: warned, the error when none other, exit 1
        _warn(request, render("T-CLI-BUDGET", kind=exhausted))
        if error is None:
            limits = request.config.limits
            message = RunBudget(RunLimits(limits.max_children, limits.max_requests, limits.max_tokens)).refusal(exhausted)
            error = {"code": "BUDGET_EXHAUSTED", "message": message.message}
    if error is None and violations:
        error = {"code": violations[0]["code"], "message": violations[0].get("message", "")}
    tree = feed.projection
    return RunResult(
        root_session_id=result.session_id,
        stop_reason=result.stop_reason,
        exit_code=exit_code_for(result.stop_reason, violations, exhausted is not None),
        output=await asyncio.to_thread(feed.root_output) if result.output_in_log else result.output,
        usage=tree.total_usage(),
        violations=violations,
        error=error,
        subagents=tree.subagents(),
        model="replay" if script is not None else request.config.model.model,
        released=list(result.released),
        budget=dict(result.budget),
        num_turns=tree.root_turns(),
        duration_ms=max(0, round((request.clock() - started) * 1000)),
    )


class StallWatch:
    """`run.parked: wait` on Temporal (SPEC §17.2): when the root says its tree is stalled (every
    agent idle, a child parked), say so once per stall as `run_tree` does — T-CLI-STALLED as a
    warning, the `waiting` record, the live tree's `on_waiting` — after a read of the logs, so the
    record follows the events that parked the child. The run keeps waiting for a waking message.
    A stall is seen by asking (every STALL_EVERY reads): one that ends before the next question
    goes unreported, and a person cannot end one that fast."""

    def __init__(self, client: Client, request: RunRequest, root_id: str, feed: Feed) -> None:
        self.client = client
        self.request = request
        self.root_id = root_id
        self.feed = feed
        self.reported = False

    async def check(self) -> None:
        try:
            view = await self.client.get_workflow_handle_for(AgentWorkflow.run, self.root_id).query(
                AgentWorkflow.view, rpc_timeout=QUERY_TIMEOUT)
        except (RPCError, WorkflowQueryFailedError) as exc:  # not started yet, a worker restarting
            logger.debug("the stall query of %s failed: %r", self.root_id, exc)
            return
        if not view.stalled or not view.parked:
            self.reported = False
            return
        if self.reported:
            return
        self.reported = True
        await self.feed.drain()
        sinks, home = self.request.sinks, Path(self.request.home)
        entries = []
        for sid in view.parked:
            known = self.feed.projection.tails.get(sid)
            entries.append(parked_entry(sid, known.parent_id or "" if known else "", known.label if known else "",
                                        home, engine="temporal"))
        text = render("T-CLI-STALLED", ids=", ".join(e["address"] for e in entries))
        if sinks.on_warning is not None:
            sinks.on_warning(text)
        else:
            logger.warning("%s", text)
        if sinks.records is not None:
            sinks.records.emit(record("waiting", rootSessionId=self.root_id, parked=entries))
        if sinks.on_waiting is not None:
            sinks.on_waiting(entries)


def _write_recording(request: RunRequest, script: Transcript | None, task: str, feed: Feed, root_id: str) -> None:
    """`--record` on Temporal (recording.py): rebuilt from the tree's logs, redacted as `run_tree`
    redacts (this process's `*_KEY`/`*_TOKEN`/`*_SECRET` values and its model key, if any)."""
    assert request.record is not None
    recording = LoggedRecording(ReplayProvider(script) if script is not None else _NOT_HERE, root_id, feed.logs())
    secrets = secrets_from_env(os.environ)
    variable = request.config.model.api_key_env
    key = os.environ.get(variable) if variable is not None else None
    if key:
        secrets.append(key)
    overlays = request.overlays or (list(script.spec.overlays) if script is not None else [])
    try:
        recording.write(request.record, task=task, overlays=overlays or None, redact=secrets, logs=recording.events)
    except OSError as exc:
        _warn(request, f"dsh: could not write the recording {request.record}: {exc}")


def _warn(request: RunRequest, text: str) -> None:
    if request.sinks.on_warning is not None:
        request.sinks.on_warning(text)
    else:
        logger.warning("%s", text)


def _not_here(request: ModelRequest, info: FunctionInfo) -> FunctionReply:
    raise AssertionError("the client runs no model: the workers' providers do")


# The submitter's stand-in for the workers' live providers: `init` and the root's tool names only.
_NOT_HERE = FunctionProvider(_not_here, name="openai-compatible")


def root_tool_names(request: RunRequest, provider: ModelProvider) -> list[str]:
    """The root's tools as the local engine lists them in `init` (the same names on both engines)."""
    tree = Tree(home=Path(request.home), provider=provider)
    return [t.name for t in tools_for("root", tree.manager, tree.catalogue)]


def _unconsumed(script: Transcript, logs: dict[str, ReadResult], root_id: str) -> list[dict[str, Any]]:
    """REPLAY_UNCONSUMED over the whole tree: bind every session in creation order (as a resumed
    run does, tree.py) so each script's cursor is what its log shows served. `logs`: the home's
    sessions, or the bytes the server's pages carried (stream.py)."""
    return [dict(v) for v in replay_over(script, logs, root_id).finish_checks()]
