"""`dsh interrupt` and `dsh send` (SPEC §18.4, §19): route an address to its live run's socket.

Imports only the stdlib-only RPC client, so stopping a runaway child from another terminal is quick.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from cli.common import fail, resolve_home, say

HomeOption = Annotated[Optional[Path], typer.Option("--home", help="Storage root (default $DSH_HOME or ~/.dsh).")]


def interrupt(
    address: Annotated[str, typer.Argument(help="<parentSessionId>/<childSessionId>")],
    home: HomeOption = None,
) -> None:
    """Stop a background subagent's current turn; its queued messages are kept."""
    from loader.host.client import NoLiveRun, RouteError, RpcError, call_sync, parse_address, route
    from loader.texts import render

    root_dir = resolve_home(home)
    try:
        parent, child = parse_address(address)
        root_id = route(root_dir, parent, child)
        call_sync(root_dir, root_id, "subagent.interrupt", {"parentSessionId": parent, "childSessionId": child})
    except RouteError as exc:
        fail(exc.message, 2)
    except NoLiveRun:
        say(render("T-CLI-NO-RUN", child=child))
        return
    except RpcError as exc:
        if exc.data_code == "subagent-unauthorized":
            fail(render("T-CLI-UNAUTHORIZED", child=child, parent=parent), 1)
        fail(f"{exc.message} [{exc.data_code}]", 1)
    except Exception as exc:  # transport failures and the like: one line, exit 1
        fail(str(exc), 1)
    say(render("T-CLI-INTERRUPTED", child=child))


def send(
    address: Annotated[str, typer.Argument(help="<parentSessionId>/<childSessionId>")],
    message: Annotated[str, typer.Argument(help="The message for the subagent.")],
    home: HomeOption = None,
) -> None:
    """Queue a follow-up for a background subagent of a live run; prints the message id."""
    from loader.host.client import NoLiveRun, RouteError, RpcError, call_sync, parse_address, route
    from loader.texts import render

    root_dir = resolve_home(home)
    try:
        parent, child = parse_address(address)
        root_id = route(root_dir, parent, child)
        result = call_sync(
            root_dir, root_id, "subagent.prompt",
            {"parentSessionId": parent, "childSessionId": child, "message": message},
        )
    except RouteError as exc:
        fail(exc.message, 2)
    except NoLiveRun:
        fail(render("T-CLI-SEND-NO-RUN", child=child), 1)
    except RpcError as exc:
        if exc.data_code == "subagent-unauthorized":
            fail(render("T-CLI-UNAUTHORIZED", child=child, parent=parent), 1)
        fail(f"{exc.message} [{exc.data_code}]", 1)
    except Exception as exc:
        fail(str(exc), 1)
    say(str(result.get("messageId", "")))
