"""Fixtures for the control socket: a home short enough for `home/run/<root>.sock` (pytest's tmp_path
can exceed the 100-byte limit and would silently exercise the fallback), a deliberately long one, and
a live run — a root with one background child hanging in its first model call — served by a real
`ControlServer` on the test's own loop."""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from home_kit import validate_home

from dsh.loader.agent import Agent, user_message
from dsh.loader.host import ControlServer, socket_path

SPAWN = {"toolCalls": [{"id": "sa", "name": "subagent", "arguments": {"label": "c", "prompt": "do it"}}]}


@pytest.fixture
def home(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Overrides the suite's `home`: "short" (default) binds `home/run/<root>.sock`; "long" (via
    `indirect=True`) forces the fallback, with XDG_RUNTIME_DIR pointed at a private short directory.
    Every log under the home passes validate_log at teardown, as in the suite's fixture."""
    kind = getattr(request, "param", "short")
    scratch = Path(tempfile.mkdtemp(prefix="dsh-", dir="/tmp"))
    if kind == "short":
        path = scratch / "h"
    else:
        path = tmp_path / ("deep-" * 16) / "home"
        monkeypatch.setenv("XDG_RUNTIME_DIR", str(scratch / "xdg"))
        (scratch / "xdg").mkdir(mode=0o700)
    try:
        yield path
        validate_home(path)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


@dataclass
class LiveRun:
    tree: Any
    root: Agent
    server: ControlServer
    child_id: str
    state: list[str]

    @property
    def child(self) -> Agent:
        return self.tree.manager.activations[self.child_id].agent


def hang_reached(tree: Any, key: str) -> Callable[[], Awaitable[None]]:
    """Subscribe now (before the run can reach the hang); await the returned call to wait for it."""
    reached = asyncio.Event()
    off = tree.provider.inner.add_hang_listener(lambda k: reached.set() if k == key else None)

    async def wait() -> None:
        try:
            await asyncio.wait_for(reached.wait(), 5)
        finally:
            off()

    return wait


@pytest.fixture
async def start_run(make_tree: Any) -> AsyncIterator[Any]:
    """`await start_run(agents=None, key="child")`: build the tree, send "go", wait until agent `key`
    hangs, then serve. The default script: root spawns `child` (label "c"), which hangs."""
    servers: list[ControlServer] = []

    async def factory(agents: dict[str, Any] | None = None, key: str = "child", **server_kw: Any) -> LiveRun:
        tree = await make_tree(agents or {
            "root": {"replies": [SPAWN, {"text": "STARTED"}, {"text": "NOTED"}]},
            "child": {"spawnedBy": "sa", "replies": [{"hang": {}}]},
        })
        root = await tree.create_root()
        hung = hang_reached(tree, key)
        root.followup(user_message("go"))
        await hung()
        state = ["running"]
        server_kw.setdefault("state", lambda: state[0])
        server = ControlServer(tree, root, **server_kw)
        servers.append(server)
        await server.start()
        (child_id,) = [a.child_id for a in tree.manager.activations.values() if a.parent_session == root.id]
        return LiveRun(tree, root, server, child_id, state)

    yield factory
    for server in servers:
        await server.close()


class RawConnection:
    """One socket connection for lines the real client would never send."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, path: Path) -> RawConnection:
        reader, writer = await asyncio.open_unix_connection(str(path), limit=4 << 20)
        return cls(reader, writer)

    async def send_line(self, line: bytes) -> None:
        self.writer.write(line + b"\n")
        await self.writer.drain()

    async def exchange(self, line: bytes) -> tuple[bytes, dict[str, Any]]:
        await self.send_line(line)
        raw = await asyncio.wait_for(self.reader.readline(), 5)
        return raw, json.loads(raw)

    async def request(self, method: str, params: Any = None, id: Any = 1) -> dict[str, Any]:
        body: dict[str, Any] = {"jsonrpc": "2.0", "id": id, "method": method}
        if params is not None:
            body["params"] = params
        return (await self.exchange(json.dumps(body).encode()))[1]

    async def close(self) -> None:
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except ConnectionError:
            pass


@pytest.fixture
async def connect() -> AsyncIterator[Any]:
    opened: list[RawConnection] = []

    async def factory(path: Path) -> RawConnection:
        conn = await RawConnection.open(path)
        opened.append(conn)
        return conn

    yield factory
    for conn in opened:
        await conn.close()


def expected_primary(home: Path, root_id: str) -> Path:
    return home.resolve() / "run" / f"{root_id}.sock"


__all__ = ["SPAWN", "LiveRun", "RawConnection", "expected_primary", "hang_reached", "socket_path"]
