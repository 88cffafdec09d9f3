"""Where `dsh sessions show/tree` read a tree from: the client's home, or every home over the
server (issue 12, loader/engines/README.md "Homes").

On the Temporal engine (`--engine temporal`, or `engine: temporal` configured) a tree's logs may be
spread over the workers' homes (`dsh worker --home DIR`). When the client's home does not hold the
whole tree, `viewed_home` gathers it over the server with the stream's page reader
(`loader.engines.tree_logs`) into a private temporary home (0700, removed on exit) and the views
read that, with the same code and so the same answers as on a home holding every log. Otherwise,
and always on the local engine, it is the client's home itself, read as before: `show` of a log the
home holds never asks the server (a log is whole in the one home it is in).
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

from dsh.cli.common import fail, temporal_settings

__all__ = ["listed_homes", "viewed_home"]

logger = logging.getLogger(__name__)

View = Literal["show", "tree"]


@contextmanager
def viewed_home(home: Path, session_id: str, engine: str | None, view: View) -> Iterator[Path]:
    """The home the view of `session_id` reads: `home`, or a temporary one holding the tree's logs."""
    from dsh.loader.errors import DshError
    from dsh.loader.ids import check_session_id

    if engine not in (None, "local", "temporal"):
        fail(f"--engine: expected local or temporal, got {engine!r}", 2)
    try:
        check_session_id(session_id)  # before the id becomes a path or a query (issue 15 items 5, 6)
    except DshError as exc:
        fail(exc.message, 2)
    if engine == "local" or (view == "show" and (home / "sessions" / session_id).is_dir()):
        yield home
        return
    temporal: Any = None
    if engine is None:
        from dsh.cli.session_rows import configured_temporal

        temporal = configured_temporal()
        if temporal is None:  # local, or a configuration that does not compose: the home, as before
            yield home
            return
    logs = _gathered(home, session_id, temporal)
    if logs is None:
        yield home
        return
    from dsh.loader.engines.tree_logs import write_home

    private = Path(tempfile.mkdtemp(prefix="dsh-sessions-"))  # 0700, as mkdtemp makes it
    try:
        write_home(logs, private)
        yield private
    finally:
        shutil.rmtree(private, ignore_errors=True)


@contextmanager
def listed_homes(home: Path, engine: str | None) -> Iterator[list[Path]]:
    """The homes `dsh sessions list` reads: `home`, and on the Temporal engine a temporary one
    holding every tree of the task queue that `home` does not hold whole (gathered as `show` and
    `tree` gather one), so the list is the one a home holding every log would give."""
    if engine not in (None, "local", "temporal"):
        fail(f"--engine: expected local or temporal, got {engine!r}", 2)
    temporal: Any = None
    if engine is None:
        from dsh.cli.session_rows import configured_temporal

        temporal = configured_temporal()
    if engine == "local" or (engine is None and temporal is None):
        yield [home]
        return
    logs = _gathered_trees(home, temporal)
    if not logs:
        yield [home]
        return
    from dsh.loader.engines.tree_logs import write_home

    private = Path(tempfile.mkdtemp(prefix="dsh-sessions-"))  # 0700, as mkdtemp makes it
    try:
        write_home(logs, private)
        yield [home, private]
    finally:
        shutil.rmtree(private, ignore_errors=True)


def _gathered_trees(home: Path, temporal: Any) -> dict[str, bytes]:
    """The logs of each tree on the task queue that `home` does not hold whole. A tree no worker
    pages (`T-ENGINE-NO-PAGES`) is left out with a warning; a server that cannot be reached leaves
    the home's answer (logged)."""
    import asyncio

    from dsh.cli.common import warn
    from dsh.loader.errors import DshError

    temporal = temporal_settings(temporal)
    from dsh.loader.engines.client import connect
    from dsh.loader.engines.tree_logs import gather, roots_on, whole_here

    async def main() -> dict[str, bytes]:
        client = await connect(temporal.address, temporal.namespace)
        logs: dict[str, bytes] = {}
        for root in await roots_on(client, temporal.task_queue):
            if await whole_here(client, temporal.task_queue, home, root):
                continue
            try:
                logs.update(await gather(client, temporal.task_queue, home, root))
            except TimeoutError as exc:
                warn(f"dsh: {exc}")
        return logs

    try:
        return asyncio.run(main())
    except Exception as exc:  # the server unreachable, or refusing: the home answers what it holds
        message = exc.message if isinstance(exc, DshError) else str(exc)
        logger.info("listing %s only: %s", home, message)
        return {}


def _gathered(home: Path, session_id: str, temporal: Any) -> dict[str, bytes] | None:
    """The logs of the tree holding `session_id`, read from each of its homes; None when the
    client's home holds the whole tree, or the server knows no tree holding it (the home's answer
    stands, `T-CLI-UNKNOWN-SESSION` included). `temporal`: the settings, or None to compose them
    (`--engine temporal`: a configuration that does not compose is then an error, exit 2)."""
    import asyncio

    from dsh.loader.errors import DshError

    temporal = temporal_settings(temporal)
    from dsh.loader.engines.client import connect
    from dsh.loader.engines.tree_logs import gather, root_of, whole_here

    async def main() -> dict[str, bytes] | None:
        client = await connect(temporal.address, temporal.namespace)
        root = await root_of(client, session_id)
        if root is None or await whole_here(client, temporal.task_queue, home, root):
            return None
        return await gather(client, temporal.task_queue, home, root)

    try:
        return asyncio.run(main())
    except Exception as exc:  # the server unreachable, or refusing: the home answers what it holds
        message = exc.message if isinstance(exc, DshError) else str(exc)
        if (home / "sessions" / session_id).is_dir():
            logger.info("reading %s from %s only: %s", session_id, home, message)
            return None
        fail(message, 1)
