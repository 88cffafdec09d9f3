"""`dsh config show` (SPEC §19): the composed configuration with a provenance comment per leaf."""

from __future__ import annotations

import json
from typing import Annotated, Optional

import typer

from dsh.cli.common import fail, say

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

app = typer.Typer(help="Inspect the composed configuration.", epilog=ENVIRONMENT_HELP, no_args_is_help=True)


@app.command("show", epilog=ENVIRONMENT_HELP)
def show(
    profile: Annotated[Optional[str], typer.Option("--profile", help="Profile name or path.")] = None,
    overlay: Annotated[Optional[list[str]], typer.Option("--overlay", help="Overlay name or path (repeatable).")] = None,
    transcript: Annotated[Optional[str], typer.Option("--transcript", help="Transcript whose overlays apply.")] = None,
    json_output: Annotated[bool, typer.Option("--json", help="Values and provenance as JSON.")] = False,
) -> None:
    """Print the configuration a run would use, and where each value came from."""
    from dsh.loader.config import compose
    from dsh.loader.errors import DshError
    from dsh.loader.transcripts import load_transcript

    try:
        script = load_transcript(transcript) if transcript is not None else None
        composed = compose(profile=profile, overlays=overlay or [], transcript=script)
    except DshError as exc:
        fail(exc.message, 2)
    if json_output:
        say(json.dumps(composed.to_json(), indent=2))
    else:
        typer.echo(composed.to_yaml(), nl=False)
