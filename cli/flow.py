"""`dsh flow TRANSCRIPT` (SPEC §19, §20): the normalized settlement flow a snapshot stores."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from cli.common import fail, warn


def flow(
    transcript: Annotated[str, typer.Argument(help="Transcript name or path.")],
    overlay: Annotated[Optional[list[str]], typer.Option("--overlay", help="Overlay name or path (repeatable).")] = None,
    timeout: Annotated[float, typer.Option("--timeout", help="Give up after this many seconds.")] = 60,
) -> None:
    """Run TRANSCRIPT under the test profile in a temporary home; print its flow YAML."""
    import asyncio
    import tempfile
    from pathlib import Path

    from loader.errors import DshError
    from loader.testing import TranscriptViolation
    from loader.testing.runner import arun_flow

    with tempfile.TemporaryDirectory(prefix="dsh-flow-") as tmp:
        try:
            result = asyncio.run(arun_flow(transcript, home=Path(tmp), overlays=overlay or [], timeout=timeout))
        except TranscriptViolation as exc:
            typer.echo(exc.flow.yaml, nl=False)
            for v in exc.violations:
                warn(f"dsh: {v.get('code')}" + (f" [{v['agent']}]" if v.get("agent") else "") + f": {v.get('message', '')}")
            raise typer.Exit(1) from None
        except DshError as exc:
            fail(exc.message, 2)
        except TimeoutError as exc:
            fail(str(exc), 1)
    typer.echo(result.yaml, nl=False)
