"""Command-line flags that override one configuration key each (issue 16), shared by `dsh run` and
`dsh config show`, so `dsh config show --model X` prints exactly what `dsh run --model X` would use,
with provenance `flag --model`.

The flags become the last configuration layer (`loader.config.compose(flags=…)`); the composed
config validates them like any other layer, so a bad value reads `flag --max-steps: agent.maxStepsPerTurn: …`
(exit 2). Flags that are not configuration (`--json`, `--output-last-message`, `--resume`) stay in
their commands.
"""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from dsh.cli.configflags import FLAG_KEYS, config_flags
from dsh.cli.helptext import default

__all__ = [
    "FLAG_KEYS",
    "AppendSystemPromptOption",
    "EngineOption",
    "MaxChildrenOption",
    "MaxRequestsOption",
    "MaxStepsOption",
    "MaxTokensOption",
    "ModelOption",
    "ParkedOption",
    "config_flags",
]

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

