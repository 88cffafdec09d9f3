"""`dsh worker` (issue 12 item 3): serve `engine: temporal` trees from this machine.

Reads `temporal.address`, `temporal.namespace` and `temporal.taskQueue` from the composed
configuration (profile, overlays, `DSH_TEMPORAL__*`), and `model.*` for live (untranscribed) runs:
the worker reads the key from its own environment (the variable `model.apiKeyEnv` names). Runs until SIGINT or SIGTERM, then lets the
SDK finish in-flight tasks. Needs the `temporal` extra; temporalio is imported here, never by
`dsh run` on the local engine.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from dsh.cli.common import fail
from dsh.cli.helptext import PROFILE_DEFAULT, default


def worker(
    profile: Annotated[Optional[str], typer.Option(
        "--profile", metavar="NAME", help="Profile name or path (its temporal.* keys)." + default(PROFILE_DEFAULT))] = None,
    overlay: Annotated[Optional[list[str]], typer.Option(
        "--overlay", metavar="NAME", help="Overlay name or path (repeatable).")] = None,
    home: Annotated[Optional[Path], typer.Option(
        "--home", metavar="DIR",
        help="The trees' storage root on this machine, shared by the workers on it; they also serve its home queue (default: each run's --home).")] = None,
) -> None:
    """Run a Temporal worker for dsh agent trees (engine: temporal) until Ctrl-C."""
    import asyncio
    import signal

    from dsh.loader.config import compose
    from dsh.loader.errors import DshError
    from dsh.loader.texts import render

    try:
        config = compose(profile=profile, overlays=overlay or []).config
    except DshError as exc:
        fail(exc.message, 2)
    try:
        from dsh.loader.engines.worker import connect, run_worker
    except ImportError:
        fail(render("T-ENGINE-NOT-INSTALLED"), 2)
    temporal = config.temporal

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        client = await connect(temporal.address, temporal.namespace)
        await run_worker(client, [temporal.task_queue], stop, model=config.model, home=home)  # its own model and key

    try:
        asyncio.run(main())
    except DshError as exc:
        fail(exc.message, 2)
