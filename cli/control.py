"""`dsh interrupt` and `dsh send` (SPEC §18.4, §19): route an address to its live run's socket.

Stdlib only, like the RPC client it drives: `cli.fastpath` calls these without typer, so stopping a
runaway child from another terminal is quick; `cli.app` wraps them as Typer commands (the help texts
and argument declarations live there).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dsh.cli.common import fail, resolve_home, say


def _call(address: str, home: Path | None, method: str, params: dict[str, Any]) -> tuple[str, dict[str, Any] | None]:
    """Route and call; returns `(child, result)`, with `result` None when no live run hosts the child.

    Exit codes (§19): 2 for a bad address, an unknown child or one the saved headers do not place
    under that parent; 1 for refusals and RPC failures."""
    from dsh.loader.host.client import NoLiveRun, RouteError, call_sync, check_address, parse_address, route
    from dsh.loader.host.protocol import RpcError
    from dsh.loader.texts import render

    root_dir = resolve_home(home)
    try:
        parent, child = parse_address(address)
        check_address(root_dir, parent, child)  # the saved headers answer first (issue 15 item 4)
        root_id = route(root_dir, parent, child)
        return child, call_sync(root_dir, root_id, method, {"parentSessionId": parent, "childSessionId": child, **params})
    except RouteError as exc:
        fail(exc.message, 2)
    except NoLiveRun:
        return child, None
    except RpcError as exc:
        if exc.data_code == "subagent-unauthorized":
            fail(render("T-CLI-UNAUTHORIZED", child=child, parent=parent), 1)
        fail(f"{exc.message} [{exc.data_code}]", 1)
    except Exception as exc:  # transport failures and the like: one line, exit 1
        fail(str(exc), 1)


def interrupt(address: str, home: Path | None) -> None:
    """Stop a background subagent's current turn; its queued messages are kept."""
    from dsh.loader.texts import render

    child, result = _call(address, home, "subagent.interrupt", {})
    # No live run: nothing is running there to stop, which is an accepted no-op (exit 0).
    say(render("T-CLI-INTERRUPTED" if result is not None else "T-CLI-NO-RUN", child=child))


def send(address: str, message: str, home: Path | None) -> None:
    """Queue a follow-up for a background subagent of a live run; prints the message id."""
    from dsh.loader.texts import render

    child, result = _call(address, home, "subagent.prompt", {"message": message})
    if result is None:
        fail(render("T-CLI-SEND-NO-RUN", child=child), 1)
    say(str(result.get("messageId", "")))
