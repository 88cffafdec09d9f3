"""`dsh config show` (SPEC §19): the composed configuration with a provenance comment per leaf."""

from __future__ import annotations

import json
from typing import Annotated, Optional

import typer

from dsh.cli.common import fail, say
from dsh.cli.helptext import EPILOGS, PROFILE_DEFAULT, default
from dsh.cli.flags import (
    AppendSystemPromptOption,
    MaxChildrenOption,
    MaxRequestsOption,
    MaxStepsOption,
    MaxTokensOption,
    ModelOption,
    ParkedOption,
    config_flags,
)

# Issue 16 item 6: the variables dsh reads, where a user looks first. (README "Environment".)
ENVIRONMENT_HELP = (
    "Environment: DSH_HOME is the storage root (default ~/.dsh; --home wins). "
    "DSH_PROFILE names the profile when --profile is not given. "
    "DSH_DEBUG=1 prints an internal error's traceback instead of saving it to a file. "
    "DSH_<SECTION>__<KEY> sets one key, in snake_case: DSH_MODEL__BASE_URL=http://localhost:11434/v1, "
    "DSH_SUBAGENTS__REPORT_DELIVERY=quiet; DSH_<SECTION> takes a JSON object, and null sets null. "
    "A variable that starts with a section name must name a key (else exit 2, with a did-you-mean); "
    "other DSH_* variables are ignored."
)

app = typer.Typer(help="Inspect the composed configuration.", epilog=ENVIRONMENT_HELP, no_args_is_help=True,
                  rich_markup_mode=None)


@app.command("show", epilog=EPILOGS["config show"] + "\n\n" + ENVIRONMENT_HELP)
def show(
    profile: Annotated[Optional[str], typer.Option(
        "--profile", metavar="NAME", help="Profile name or path." + default(PROFILE_DEFAULT))] = None,
    overlay: Annotated[Optional[list[str]], typer.Option(
        "--overlay", metavar="NAME", help="Overlay name or path (repeatable)." + default("none"))] = None,
    transcript: Annotated[Optional[str], typer.Option(
        "--transcript", metavar="NAME", help="Transcript whose overlays (and parked rule) apply.")] = None,
    json_output: Annotated[bool, typer.Option("--json", help="Values and provenance as JSON.")] = False,
    model: ModelOption = None,
    append_system_prompt: AppendSystemPromptOption = None,
    max_steps: MaxStepsOption = None,
    parked: ParkedOption = None,
    max_children: MaxChildrenOption = None,
    max_requests: MaxRequestsOption = None,
    max_tokens: MaxTokensOption = None,
) -> None:
    """Print the configuration a run would use, and where each value came from (the run flags
    show as `flag --model` etc.)."""
    from dsh.loader.config import compose
    from dsh.loader.errors import DshError
    from dsh.loader.transcripts import load_transcript

    try:
        script = load_transcript(transcript) if transcript is not None else None
        flags = config_flags(model=model, append_system_prompt=append_system_prompt, max_steps=max_steps,
                             parked=parked, max_children=max_children, max_requests=max_requests,
                             max_tokens=max_tokens)
        composed = compose(profile=profile, overlays=overlay or [], transcript=script, flags=flags)
    except DshError as exc:
        fail(exc.message, 2)
    if json_output:
        say(json.dumps(composed.to_json(), indent=2))
    else:
        typer.echo(composed.to_yaml(), nl=False)
