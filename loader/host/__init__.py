"""Host control RPC (SPEC §18): one Unix socket per run, so a human can interrupt, prompt and inspect
the run's subagents from another shell (`dsh interrupt`, `dsh send`, `dsh sessions`).

Layering inside the package: `protocol` and `paths` are stdlib-only; `client` builds on them and
stays stdlib-only (the CLI imports it at start-up); `methods` (pydantic, runtime) and `server` build
on all of them. `ControlServer` is therefore re-exported lazily: `import dsh.loader.host` or
`from dsh.loader.host import call_sync` must not pull in pydantic or the runtime.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dsh.loader.host.client import (
    BadAddress,
    NoLiveRun,
    RouteError,
    RpcTransportError,
    UnknownSession,
    UnroutableSession,
    call,
    call_sync,
    parse_address,
    route,
)
from dsh.loader.host.paths import socket_path
from dsh.loader.host.protocol import MAX_LINE_BYTES, RpcError

if TYPE_CHECKING:
    from dsh.loader.host.server import ControlServer as ControlServer

__all__ = [
    "MAX_LINE_BYTES",
    "BadAddress",
    "ControlServer",
    "NoLiveRun",
    "RouteError",
    "RpcError",
    "RpcTransportError",
    "UnknownSession",
    "UnroutableSession",
    "call",
    "call_sync",
    "parse_address",
    "route",
    "socket_path",
]


def __getattr__(name: str) -> Any:
    if name == "ControlServer":
        from dsh.loader.host.server import ControlServer

        return ControlServer
    raise AttributeError(f"module 'dsh.loader.host' has no attribute {name!r}")
