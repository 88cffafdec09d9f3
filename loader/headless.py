"""The headless runner (SPEC §17): one agent tree per process; the entry point the CLI and tests share.

`run_tree` builds a `Tree` (loader/tree.py) from the composed configuration, sends the task, waits
for quiescence (span S11: root idle and no continuable descendant resident), a timeout or a stop
request, shuts down within `run.shutdownGraceSeconds` and builds the run result (§7.4).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from dsh.loader.abort import AbortController
from dsh.loader.agent import Agent, AgentOptions, run_outcome, user_message
from dsh.loader.errors import ConfigError, DshError
from dsh.loader.fences import Fences
from dsh.loader.models import ModelProvider, ReplayProvider
from dsh.loader.models.budget import RunBudget, RunLimits
from dsh.loader.subagents import ManagerConfig
from dsh.loader.texts import render
from dsh.loader.ndjson import base_url_host, dsh_version, record
from dsh.loader.session import SessionStore
from dsh.loader.sinks import ChildLedger, RunSinks, UsageLedger, attach_sinks, waiting_entries
from dsh.loader.tree import Quiescence, Tree, quiescence, refuse_child_resume
from dsh.loader.transcripts import Transcript

if TYPE_CHECKING:
    from dsh.loader.config import Config
    from dsh.loader.scripted_user import ScriptedUser

__all__ = [
    "EXIT_CODES",
    "Quiescence",
    "RunRequest",
    "RunResult",
    "RunSinks",
    "Tree",
    "exit_code_for",
    "init_record",
    "quiescence",
    "run_tree",
    "system_prompt",
]

logger = logging.getLogger(__name__)

EXIT_CODES: dict[str, int] = {"completed": 0, "error": 1, "max-tokens": 3, "aborted": 4, "refusal": 5}


def exit_code_for(stop_reason: str, violations: list[dict[str, Any]], budget_exhausted: bool = False) -> int:
    """§17.3: violations (1) outrank the stop reason; unknown reasons count as errors. An exhausted
    run budget (issue 15 finding 9) is an error too (1), whatever the root made of it."""
    if violations or budget_exhausted:
        return 1
    return EXIT_CODES.get(stop_reason, 1)


@dataclass
class RunResult:
    root_session_id: str
    stop_reason: str
    exit_code: int
    output: str
    usage: dict[str, int]
    violations: list[dict[str, Any]] = field(default_factory=list)
    error: dict[str, Any] | None = None
    subagents: list[dict[str, Any]] = field(default_factory=list)
    timed_out: bool = False
    interrupted: bool = False
    released: list[str] = field(default_factory=list)
    budget: dict[str, Any] = field(default_factory=dict)  # RunBudget.summary() (issue 15 finding 9)
    model: str = ""
    num_turns: int = 0  # root turns started in this run
    duration_ms: int = 0

    def to_json(self) -> dict[str, Any]:
        """The `--json` final record (§17.3, issue 16 item 2; schema in loader/schemas/)."""
        return record(
            "result",
            rootSessionId=self.root_session_id,
            stopReason=self.stop_reason,
            exitCode=self.exit_code,
            output=self.output,
            error=({"code": str(self.error.get("code")), "message": str(self.error.get("message", ""))}
                   if self.error is not None else None),
            usage=self.usage,
            model=self.model,
            numTurns=self.num_turns,
            durationMs=self.duration_ms,
            subagents=self.subagents,
            violations=self.violations,
            timedOut=self.timed_out,
            interrupted=self.interrupted,
            released=self.released,
            budget=self.budget,
        )


@dataclass
class RunRequest:
    """Everything one `dsh run` needs; `config` is the composed configuration (§14)."""

    home: Path
    config: Config = field(default_factory=lambda: _default_config())
    task: str | None = None
    transcript: Transcript | None = None
    provider: ModelProvider | None = None
    fences_allowed: bool = False
    timeout: float | None = None
    resume: str | None = None
    stop: asyncio.Event | None = None  # set by the CLI on the first SIGINT / SIGTERM
    serve_control: bool = False
    sinks: RunSinks = field(default_factory=RunSinks)
    record: Path | None = None  # wrap the live provider in a Recorder and write a transcript (§15.5)
    overlays: list[str] = field(default_factory=list)  # as given on the command line, for the recording
    profile: str | None = None  # how the profile was named, for the `init` record
    clock: Callable[[], float] = time.monotonic  # `durationMs`; tests inject a fixed clock
    # Called with every agent the tree creates, root included, before it runs (after the sinks'
    # own hooks): the seam for gating or observing agents that a transcript cannot express, such as
    # a pre-step hook that rejects (a `refusal`, exit 5).
    agent_hooks: list[Callable[[Agent], None]] = field(default_factory=list)


def _build_provider(request: RunRequest) -> ModelProvider:
    if request.provider is not None:
        return request.provider
    if request.transcript is not None:
        return ReplayProvider(request.transcript)
    model = request.config.model
    if model.provider == "replay":
        raise ConfigError("model.provider is replay, which needs --transcript", code="CONFIG_INVALID")
    from dsh.loader.models import OpenAICompatibleProvider, Recorder

    live: ModelProvider = OpenAICompatibleProvider.from_env(model, os.environ)
    return Recorder(live) if request.record is not None else live


def _write_recording(request: RunRequest, provider: ModelProvider, task: str | None, tree: Tree) -> None:
    if request.record is None or task is None:
        return  # before the imports: a run that records nothing does not load the recorder
    from dsh.loader.models import Recorder
    from dsh.loader.models.recorder import secrets_from_env

    if not isinstance(provider, Recorder):
        return
    logs = {}  # the observed settlement order becomes fences (issue 10): read the durable logs
    for session_id in provider.agent_keys():
        try:
            logs[session_id] = tree.store.read(session_id).events
        except DshError:
            logger.warning("recording: could not read session %s", session_id)
    secrets = secrets_from_env(os.environ)
    variable = request.config.model.api_key_env
    key = os.environ.get(variable) if variable is not None else None  # None: a keyless endpoint
    if key:
        secrets.append(key)
    try:
        provider.write(request.record, task=task, overlays=request.overlays or None, redact=secrets, logs=logs)
    except OSError as exc:
        _warn(request.sinks, f"dsh: could not write the recording {request.record}: {exc}")


async def run_tree(request: RunRequest) -> RunResult:
    """Run one tree to quiescence (§17.1): the one entry point the CLI and tests share."""
    started = request.clock()
    config = request.config
    script = request.transcript
    task = request.task
    if task is None and script is not None and request.resume is None:
        task = script.task  # a resumed run finishes its tree; the transcript's task was sent already
    if task is None and request.resume is None:
        raise ConfigError("a task or a transcript with a task is required", code="USAGE")
    if script is not None and script.spec.fences and not request.fences_allowed:
        raise ConfigError(render("T-CLI-FENCES", file=script.path), code="FENCES_REFUSED")
    if request.resume is not None:  # before the provider: a refused resume needs no key
        await asyncio.to_thread(refuse_child_resume, SessionStore(request.home), request.resume)
    provider = _build_provider(request)
    options = AgentOptions(
        model=config.model.model if script is None else "replay",
        system_prompt=system_prompt(config),
        max_parallel_tool_calls=config.agent.max_parallel_tool_calls,
        max_steps_per_turn=config.agent.max_steps_per_turn,
        max_tokens=config.model.max_tokens,
        temperature=config.model.temperature,
    )
    tree = Tree(
        home=request.home,
        provider=provider,
        options=options,
        manager_config=ManagerConfig(
            max_depth=config.subagents.max_depth,
            report_delivery=config.subagents.report_delivery,
            model=options.model,
        ),
        batch_delay_ms=config.persistence.batch_delay_ms,
        fsync=config.persistence.fsync,
        # SPEC §26 item 1: under a transcript the order is the transcript's alone, so no I/O thread.
        inline_io=isinstance(provider, ReplayProvider),
        budget=RunBudget(RunLimits(max_children=config.limits.max_children,
                                   max_requests=config.limits.max_requests,
                                   max_tokens=config.limits.max_tokens)),
    )
    sinks = request.sinks
    usage = UsageLedger(tree)
    attach_sinks(tree, sinks)
    tree.agent_hooks.extend(request.agent_hooks)
    children = ChildLedger(tree)
    fences: Fences | None = None
    if script is not None and script.spec.fences and isinstance(provider, ReplayProvider):
        fences = Fences(list(script.spec.fences), tree=tree, replay=provider,
                        timeout=config.testing.fence_timeout_seconds)
        fences.install()
    user: ScriptedUser | None = None
    user_stop = AbortController()  # aborted at teardown: a scripted user's send in flight gives up
    scripts_user = script is not None and isinstance(provider, ReplayProvider) and script.spec.scripts_user()
    if scripts_user and fences is None and isinstance(provider, ReplayProvider):
        # the user's actions wait on fence conditions, read from the fences' facts
        fences = Fences([], tree=tree, replay=provider, timeout=config.testing.fence_timeout_seconds)
        fences.install()
    root = await tree.create_root(resume=request.resume, continue_cut_off=task is None)
    if scripts_user:
        assert script is not None and fences is not None and isinstance(provider, ReplayProvider)
        from dsh.loader.scripted_user import ScriptedUser  # deferred: only a transcript that scripts the user

        user = ScriptedUser(script.spec, tree=tree, root=root, replay=provider, fences=fences,
                            signal=user_stop.signal)
        user.install()
    boundary = tree.resumed_at.get(root.id, len(root.session.events))
    if task is None and script is not None and not _accepted_input(root.session.events):
        # The run that created this root was cut off before its task was durable: nothing of it
        # was accepted, so the resumed run sends the transcript's task as the first run would have.
        task = script.task
    state = _RunState()
    server = None
    if request.serve_control:
        from dsh.loader.host.server import ControlServer

        server = ControlServer(tree, root, state=lambda: state.public(tree, root))
        try:
            await server.start()
        except BaseException:
            await tree.shutdown(root)
            raise
    if sinks.records is not None:
        sinks.records.init(init_record(request, provider, options.model, root.id, [tool.name for tool in root.tools]))
    if sinks.on_started is not None:
        sinks.on_started(root.id)
    timed_out = interrupted = False
    try:
        if task is not None:
            root.followup(user_message(task, {"kind": "user"}))
        outcome_wait = asyncio.ensure_future(
            tree.wait_quiet(root, release_parked=config.run.parked == "release",
                            on_stall=lambda ids: _on_stall(request, tree, root, ids),
                            released=children.released)
        )
        waits: set[asyncio.Future[Any]] = {outcome_wait}
        stop_wait = asyncio.ensure_future(request.stop.wait()) if request.stop is not None else None
        if stop_wait is not None:
            waits.add(stop_wait)
        done, _ = await asyncio.wait(waits, timeout=request.timeout, return_when=asyncio.FIRST_COMPLETED)
        if outcome_wait in done:
            outcome_wait.result()
        else:
            outcome_wait.cancel()
            if stop_wait is not None and stop_wait in done:
                interrupted = True
            else:
                timed_out = True
                _warn(sinks, render("T-CLI-TIMEOUT", seconds=_seconds(request.timeout)))
            root.cancel({"kind": "user"})
        if stop_wait is not None and not stop_wait.done():
            stop_wait.cancel()
    finally:
        state.shutting_down = True
        if fences is not None:
            fences.release()
        user_stop.abort({"kind": "disposed"})  # as the control server's close aborts its deliveries
        try:
            await asyncio.wait_for(tree.shutdown(root), config.run.shutdown_grace_seconds)
        except TimeoutError:
            logger.warning("shutdown exceeded %ss; remaining work was abandoned", config.run.shutdown_grace_seconds)
            await tree.close_sessions()
        finally:
            if server is not None:
                await server.close()
            _write_recording(request, provider, task, tree)
    violations: list[dict[str, Any]] = []
    if isinstance(provider, ReplayProvider):
        provider.finish_checks()
        violations = list(provider.violations)
    if fences is not None:
        violations.extend(fences.finish())
    if user is not None:
        violations.extend(user.finish())
    # Read after shutdown: a turn cancelled by a timeout or signal converges during it, and its
    # interrupted partial message and `turn/end` belong to this run's output (§7.4).
    outcome = run_outcome(list(root.session.events[boundary:]))
    stop_reason = outcome.stop_reason
    if timed_out or interrupted:
        stop_reason = "aborted"
    error = None
    if outcome.end is not None and outcome.end["data"]["reason"].get("kind") == "error":
        error = outcome.end["data"]["reason"].get("error")
    budget = tree.budget
    assert budget is not None
    if budget.exhausted is not None:
        _warn(sinks, render("T-CLI-BUDGET", kind=budget.exhausted))
        if error is None:
            limit = budget.summary()["max" + budget.exhausted.capitalize()]
            error = {"code": "BUDGET_EXHAUSTED", "message": render("T-ERR-BUDGET", kind=budget.exhausted, limit=limit)}
    if error is None and violations:
        error = {"code": violations[0]["code"], "message": violations[0].get("message", "")}
    return RunResult(
        root_session_id=root.id,
        stop_reason=stop_reason,
        exit_code=exit_code_for(stop_reason, violations, budget.exhausted is not None),
        output=outcome.output,
        usage=usage.total(),  # the whole tree (issue 16): every session's own usage, this run only
        violations=violations,
        error=error,
        subagents=children.summary(usage),
        timed_out=timed_out,
        interrupted=interrupted,
        released=sorted(children.released),
        budget=budget.summary(),
        model=options.model,
        num_turns=usage.turns.get(root.id, 0),
        duration_ms=max(0, round((request.clock() - started) * 1000)),
    )


def init_record(request: RunRequest, provider: ModelProvider, model: str, root_id: str, tools: list[str]) -> dict[str, Any]:
    """The first `--json` record: what this run is (issue 16 item 2). No secret: the host only.
    Shared with the Temporal engine (engines/client.py), which has no root agent in its process."""
    script = request.transcript
    replay = isinstance(provider, ReplayProvider)
    kind = "replay" if replay else ("custom" if request.provider is not None else request.config.model.provider)
    return record(
        "init",
        dshVersion=dsh_version(),
        rootSessionId=root_id,
        resumed=request.resume is not None,
        provider=kind,
        model=model,
        baseUrlHost=None if replay else base_url_host(request.config.model.base_url),
        tools=tools,
        profile=request.profile or ("test" if script is not None else "default"),
        overlays=[*(script.spec.overlays if script is not None else []), *request.overlays],
        transcript=script.spec.name if script is not None else None,
    )


def _on_stall(request: RunRequest, tree: Tree, root: Agent, parked_ids: list[str]) -> None:
    """`run.parked: wait` found only parked work: say so once, with the addresses `dsh send` takes."""
    entries = waiting_entries(tree, parked_ids, request.home)
    _warn(request.sinks, render("T-CLI-STALLED", ids=", ".join(e["address"] for e in entries)))
    if request.sinks.records is not None:
        request.sinks.records.emit(record("waiting", rootSessionId=root.id, parked=entries))
    if request.sinks.on_waiting is not None:
        request.sinks.on_waiting(entries)


def _default_config() -> Config:
    from dsh.loader.config import Config  # pydantic: only for a request that brings no config

    return Config()


def system_prompt(config: Config) -> str:
    """`agent.appendSystemPrompt` (issue 16) follows `agent.systemPrompt` as its own paragraph."""
    extra = config.agent.append_system_prompt
    return config.agent.system_prompt if not extra else f"{config.agent.system_prompt}\n\n{extra}"


def _accepted_input(events: list[dict[str, Any]]) -> bool:
    return any(e["type"] == "agent/inbox/spliced" and e["data"].get("inserted") for e in events)


def _seconds(value: float | None) -> str:
    return f"{value:g}" if value is not None else "?"


def _warn(sinks: RunSinks, text: str) -> None:
    if sinks.on_warning is not None:
        sinks.on_warning(text)
    else:
        logger.warning("%s", text)


@dataclass
class _RunState:
    shutting_down: bool = False

    def public(self, tree: Tree, root: Agent) -> Literal["running", "stalled", "shutting-down"]:
        if self.shutting_down:
            return "shutting-down"
        return "stalled" if tree.quiescence(root) == "STALLED" else "running"
