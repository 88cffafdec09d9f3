"""The headless runner (SPEC §17): one agent tree per process, the entry point the CLI and tests share.

This first cut runs the root alone: it builds the root on the replay provider (or a given provider),
sends the task, waits until the root is idle, shuts down and builds the run result (§7.4) with the
transcript's violations. Quiescence over continuable children arrives with the continuation manager.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loader.agent import Agent, AgentOptions, AgentRegistry, run_outcome, user_message
from loader.ids import new_root_id
from loader.models import ModelProvider, ReplayProvider
from loader.session import SessionStore, make_header
from loader.transcripts import Transcript, load_transcript

__all__ = ["EXIT_CODES", "RunResult", "exit_code_for", "run_tree"]

logger = logging.getLogger(__name__)

EXIT_CODES: dict[str, int] = {"completed": 0, "error": 1, "max-tokens": 3, "aborted": 4, "refusal": 5}


def exit_code_for(stop_reason: str, violations: list[dict[str, Any]]) -> int:
    """§17.3: violations (1) outrank the stop reason; unknown reasons count as errors."""
    if violations:
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
    timed_out: bool = False
    interrupted: bool = False


async def run_tree(
    *,
    task: str | None = None,
    transcript: str | Path | Transcript | None = None,
    home: Path,
    provider: ModelProvider | None = None,
    options: AgentOptions | None = None,
    batch_delay_ms: int = 0,
    fsync: bool = False,
) -> RunResult:
    script: Transcript | None = None
    if transcript is not None:
        script = transcript if isinstance(transcript, Transcript) else load_transcript(transcript)
        if task is None:
            task = script.task
    if task is None:
        raise ValueError("a task or a transcript with a task is required")
    if provider is None:
        if script is None:
            raise ValueError("a transcript is required without a provider")
        provider = ReplayProvider(script)
    store = SessionStore(home, batch_delay_ms=batch_delay_ms, fsync=fsync)
    registry = AgentRegistry()
    root_id = new_root_id()
    if isinstance(provider, ReplayProvider):
        provider.bind_root(root_id)
    session = await store.create(make_header(root_id, cwd=os.getcwd()))
    root = Agent(session, store=store, provider=provider, options=options or AgentOptions(), registry=registry)
    registry.register(root)
    boundary = len(session.events)
    try:
        root.followup(user_message(task, {"kind": "user"}))
        await root.when_idle()
    finally:
        events = list(session.events[boundary:])
        await root.dispose()
        await provider.aclose()
    violations: list[dict[str, Any]] = []
    if isinstance(provider, ReplayProvider):
        provider.finish_checks()
        violations = list(provider.violations)
    outcome = run_outcome(events)
    error = None
    if outcome.end is not None and outcome.end["data"]["reason"].get("kind") == "error":
        error = outcome.end["data"]["reason"].get("error")
    return RunResult(
        root_session_id=root_id,
        stop_reason=outcome.stop_reason,
        exit_code=exit_code_for(outcome.stop_reason, violations),
        output=outcome.output,
        usage=outcome.usage,
        violations=violations,
        error=error,
    )
