"""`dsh interrupt` and `dsh send` (SPEC §18.4, §19): route an address to its live run's socket.

Stdlib only, like the RPC client it drives: `cli.fastpath` calls these without typer, so stopping a
runaway child from another terminal is quick; `cli.app` wraps them as Typer commands (the help texts
and argument declarations live there).

A run on the Temporal engine (issue 12 item 3) serves no socket: with `--engine temporal`, or when no
socket answers and the configuration says `engine: temporal`, the same call goes to the tree's
workflows through the Temporal client (`loader.engines.control.user_call`), with the same results,
errors and exit codes. Only that path imports temporalio; a live local run never composes the
configuration at all.
"""

from __future__ import annotations

import os
from pathlib import Path
from collections.abc import Callable
from typing import Any

from dsh.cli.common import fail, resolve_home, say, temporal_settings


def _call(address: str, home: Path | None, method: str, params: dict[str, Any],
          engine: str | None = None) -> tuple[str, dict[str, Any] | None]:
    """Route and call; returns `(child, result)`, with `result` None when no live run hosts the child.

    Exit codes (§19): 2 for a bad address, an unknown child or one the saved headers do not place
    under that parent; 1 for refusals and RPC failures."""
    from dsh.loader.host.client import (
        NoLiveRun, RouteError, UnknownSession, call_sync, check_address, parse_address, route,
    )

    if engine not in (None, "local", "temporal"):
        fail(f"--engine: expected local or temporal, got {engine!r}", 2)
    root_dir = resolve_home(home)
    try:
        parent, child = parse_address(address)
    except RouteError as exc:
        fail(exc.message, 2)
    request = {"parentSessionId": parent, "childSessionId": child, **params}
    try:
        check_address(root_dir, parent, child)  # the saved headers answer first (issue 15 item 4)
        root_id = route(root_dir, parent, child)
    except UnknownSession as exc:
        # No log of the child here: a Temporal tree's workers may keep their logs on another
        # home, and the server holds the tree, so it is asked instead (issue 12 item 3).
        if engine == "local" or (engine is None and _configured_engine() != "temporal"):
            fail(exc.message, 2)
        return child, _answered(parent, child, lambda: _temporal_call(None, method, request, root_dir))
    except RouteError as exc:
        fail(exc.message, 2)
    except Exception as exc:  # an unreadable home and the like: one line, exit 1
        fail(str(exc), 1)
    if engine != "temporal":
        try:
            return child, _answered(parent, child, lambda: call_sync(root_dir, root_id, method, request))
        except NoLiveRun:
            if engine == "local" or _configured_engine() != "temporal":
                return child, None
    return child, _answered(parent, child, lambda: _temporal_call(root_id, method, request, root_dir))


def _answered(parent: str, child: str, call: Callable[[], dict[str, Any] | None]) -> dict[str, Any] | None:
    """`call()`, its refusals as one line and exit 1 (NoLiveRun and exits pass through)."""
    from dsh.loader.host.client import NoLiveRun
    from dsh.loader.host.protocol import RpcError
    from dsh.loader.texts import render

    try:
        return call()
    except NoLiveRun:
        raise
    except RpcError as exc:
        if exc.data_code == "subagent-unauthorized":
            fail(render("T-CLI-UNAUTHORIZED", child=child, parent=parent), 1)
        fail(f"{exc.message} [{exc.data_code}]", 1)
    except Exception as exc:  # transport failures and the like: one line, exit 1
        from typer import Exit

        if isinstance(exc, Exit):  # `fail` inside the call: its line and code stand
            raise
        fail(str(exc), 1)


def _configured_engine() -> str:
    """`engine` of the composed configuration; without a `DSH_*` variable it is the default
    profile's (local), which is answered without composing."""
    if not any(name.startswith("DSH_") for name in os.environ):
        return "local"
    from dsh.loader.config import compose
    from dsh.loader.errors import DshError

    try:
        return compose().config.engine
    except DshError as exc:
        fail(exc.message, 2)


def _temporal_call(root_id: str | None, method: str, request: dict[str, Any], home: Path) -> dict[str, Any] | None:
    """The call answered by the tree's workflows (None: no live run hosts it). Without `root_id`
    (no log of the child in this home) the server locates the child's tree and checks the
    presented parent against it first: `locate`'s refusals exit 2, as the saved headers' do."""
    import asyncio

    from dsh.loader.errors import DshError
    from dsh.loader.host.client import RouteError

    temporal = temporal_settings()
    from dsh.loader.engines.client import connect
    from dsh.loader.engines.control import user_call

    async def main() -> dict[str, Any] | None:
        from dsh.loader.engines.control import locate

        client = await connect(temporal.address, temporal.namespace)
        root = root_id or await locate(client, request["parentSessionId"], request["childSessionId"], home)
        return await user_call(client, root, method, request)

    try:
        return asyncio.run(main())
    except RouteError as exc:  # not a child of that parent, or no such child in any tree: usage
        fail(exc.message, 2)
    except DshError as exc:  # the server is unreachable: a transport failure, one line, exit 1
        fail(exc.message, 1)


def interrupt(address: str, home: Path | None, engine: str | None = None) -> None:
    """Stop a background subagent's current turn; its queued messages are kept."""
    from dsh.loader.texts import render

    child, result = _call(address, home, "subagent.interrupt", {}, engine)
    # No live run: nothing is running there to stop, which is an accepted no-op (exit 0).
    say(render("T-CLI-INTERRUPTED" if result is not None else "T-CLI-NO-RUN", child=child))


def send(address: str, message: str, home: Path | None, engine: str | None = None) -> None:
    """Queue a follow-up for a background subagent of a live run; prints the message id."""
    from dsh.loader.texts import render

    child, result = _call(address, home, "subagent.prompt", {"message": message}, engine)
    if result is None:
        fail(render("T-CLI-SEND-NO-RUN", child=child), 1)
    say(str(result.get("messageId", "")))
