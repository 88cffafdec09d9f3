"""Command-line flags that override one configuration key each (issue 16), shared by `dsh run` and
`dsh config show`, so `dsh config show --model X` prints exactly what `dsh run --model X` would use,
with provenance `flag --model`.

The flags become the last configuration layer (`loader.config.compose(flags=…)`); the composed
config validates them like any other layer, so a bad value reads `flag --max-steps: agent.maxStepsPerTurn: …`
(exit 2). Flags that are not configuration (`--json`, `--output-last-message`, `--resume`) stay in
their commands.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Optional

import typer

from dsh.cli.helptext import default

if TYPE_CHECKING:
    from dsh.loader.config import Layer

__all__ = [
    "AppendSystemPromptOption",
    "MaxChildrenOption",
    "MaxRequestsOption",
    "MaxStepsOption",
    "MaxTokensOption",
    "ModelOption",
    "ParkedOption",
    "config_flags",
]

# flag -> the dotted YAML key it overrides
FLAG_KEYS: dict[str, str] = {
    "--model": "model.model",
    "--append-system-prompt": "agent.appendSystemPrompt",
    "--max-steps": "agent.maxStepsPerTurn",
    "--parked": "run.parked",
    "--max-children": "limits.maxChildren",
    "--max-requests": "limits.maxRequests",
    "--max-tokens": "limits.maxTokens",
    "--engine": "engine",
}

_CONFIG = default("the composed configuration's value")
ModelOption = Annotated[Optional[str], typer.Option(
    "--model", metavar="NAME", help="The model name to request (model.model)." + _CONFIG)]
AppendSystemPromptOption = Annotated[Optional[str], typer.Option(
    "--append-system-prompt", metavar="TEXT",
    help="Text added after the system prompt of every agent (agent.appendSystemPrompt)." + _CONFIG)]
MaxStepsOption = Annotated[Optional[int], typer.Option(
    "--max-steps", metavar="N",
    help="Model steps per turn before the turn fails STEP_LIMIT (agent.maxStepsPerTurn)." + _CONFIG)]
ParkedOption = Annotated[Optional[str], typer.Option(
    "--parked", metavar="wait|release",
    help="What a run does when only parked subagents are left: wait for `dsh send`, or release them "
    "(run.parked)." + default("'release' under a transcript, else run.parked, 'wait'"))]
MaxChildrenOption = Annotated[Optional[int], typer.Option(
    "--max-children", metavar="N", help="Children spawned per run (limits.maxChildren)." + default("200, or the config's limits"))]
MaxRequestsOption = Annotated[Optional[int], typer.Option(
    "--max-requests", metavar="N", help="Model requests per run (limits.maxRequests)." + default("2000, or the config's limits"))]
MaxTokensOption = Annotated[Optional[int], typer.Option(
    "--max-tokens", metavar="N", help="Tokens per run, input + output (limits.maxTokens)." + default("2000000, or the config's limits"))]

EngineOption = Annotated[Optional[str], typer.Option(
    "--engine", metavar="NAME", help="Who runs the tree: local (this process) or temporal (workers started "
    "with `dsh worker`; needs the temporal extra) (engine)." + default("local, or the config's engine"))]


def config_flags(
    *,
    model: str | None = None,
    append_system_prompt: str | None = None,
    max_steps: int | None = None,
    parked: str | None = None,
    max_children: int | None = None,
    max_requests: int | None = None,
    max_tokens: int | None = None,
    engine: str | None = None,
) -> list[Layer]:
    """One `flag_layer` per flag given, for `compose(flags=…)`, in a fixed order."""
    from dsh.loader.config import flag_layer  # config (pydantic) only once a command composes one
    given: dict[str, object | None] = {
        "--model": model,
        "--append-system-prompt": append_system_prompt,
        "--max-steps": max_steps,
        "--parked": parked,
        "--max-children": max_children,
        "--max-requests": max_requests,
        "--max-tokens": max_tokens,
        "--engine": engine,
    }
    return [flag_layer(flag, FLAG_KEYS[flag], value) for flag, value in given.items() if value is not None]
