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

from dsh.cli.common import fail, resolve_home, say


def _call(address: str, home: Path | None, method: str, params: dict[str, Any],
          engine: str | None = None) -> tuple[str, dict[str, Any] | None]:
    """Route and call; returns `(child, result)`, with `result` None when no live run hosts the child.

    Exit codes (§19): 2 for a bad address, an unknown child or one the saved headers do not place
    under that parent; 1 for refusals and RPC failures."""
    from dsh.loader.host.client import NoLiveRun, RouteError, call_sync, check_address, parse_address, route

    if engine not in (None, "local", "temporal"):
        fail(f"--engine: expected local or temporal, got {engine!r}", 2)
    root_dir = resolve_home(home)
    try:
        parent, child = parse_address(address)
        check_address(root_dir, parent, child)  # the saved headers answer first (issue 15 item 4)
        root_id = route(root_dir, parent, child)
    except RouteError as exc:
        fail(exc.message, 2)
    except Exception as exc:  # an unreadable home and the like: one line, exit 1
        fail(str(exc), 1)
    request = {"parentSessionId": parent, "childSessionId": child, **params}
    if engine != "temporal":
        try:
            return child, _answered(parent, child, lambda: call_sync(root_dir, root_id, method, request))
        except NoLiveRun:
            if engine == "local" or _configured_engine() != "temporal":
                return child, None
    return child, _answered(parent, child, lambda: _temporal_call(root_id, method, request))


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


def _temporal_call(root_id: str, method: str, request: dict[str, Any]) -> dict[str, Any] | None:
    """The call answered by the tree's workflows (None: no live run hosts it)."""
    import asyncio

    from dsh.loader.config import compose
    from dsh.loader.errors import DshError

    try:
        temporal = compose().config.temporal
        from dsh.loader.engines.client import connect
        from dsh.loader.engines.control import user_call
    except DshError as exc:
        fail(exc.message, 2)
    except ImportError:
        from dsh.loader.texts import render

        fail(render("T-ENGINE-NOT-INSTALLED"), 2)

    async def main() -> dict[str, Any] | None:
        client = await connect(temporal.address, temporal.namespace)
        return await user_call(client, root_id, method, request)

    try:
        return asyncio.run(main())
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
