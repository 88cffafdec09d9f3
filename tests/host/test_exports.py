"""`loader.host` public surface (STYLE §2) and its import weight: `dsh interrupt` imports the client
at start-up, so neither the package nor the client may pull in pydantic, httpx or the runtime."""

from __future__ import annotations

import subprocess
import sys

import dsh.loader.host

from dsh import loader


def test_host_exports_exactly_the_pinned_names() -> None:
    assert sorted(loader.host.__all__) == sorted(
        [
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
    )
    assert all(hasattr(loader.host, name) for name in loader.host.__all__)


def test_client_imports_only_the_stdlib() -> None:
    code = (
        "import sys\n"
        "from dsh.loader.host import call_sync, parse_address, route, RpcError, NoLiveRun\n"
        "heavy = ('pydantic', 'httpx', 'ruamel', 'asyncio', 'dsh.loader.agent', 'dsh.loader.session',\n"
        "         'dsh.loader.subagents', 'dsh.loader.headless', 'dsh.loader.host.server', 'dsh.loader.host.methods')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy or m in heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
