"""Shared fixtures: a network-free world, a temporary home whose logs are validated at teardown, and a
small runtime builder that drives the real `Agent` over the JSONL store with `ReplayProvider` at the
model seam."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import respx
from home_kit import validate_home

from dsh.loader.agent import Agent, AgentOptions, AgentRegistry
from dsh.loader.models import ModelRequest, ReplayProvider
from dsh.loader.session import SessionStore, make_header
from dsh.loader.transcripts import load_transcript


# The suite's long poles, longest first (`CI=true pytest --durations=0`, 2026-12-05, three workers).
# With `--maxschedchunk 1` (pyproject's addopts) xdist hands tests out one at a time as workers free
# up, so the long ones start first and the short ones fill in behind them; collected in file order,
# the pytester tests (tests/testing) came last and kept one worker busy alone for about a sixth of
# the run. The first tests go out two to a worker, so test_stall's one test comes first: the two
# longest tests (test_homes_sessions' first two) then go to two workers. Only the order changes;
# each file keeps its own test order. Quiet-machine seconds of each file's longest tests:
LONG_POLES = (
    "tests/temporal/test_stall.py",  # 13 (its fixture: three stalled runs)
    "tests/temporal/test_homes_sessions.py",  # 19, 19, 6 (a `dsh` process per view)
    "tests/temporal/test_root_continue.py",  # 13, 8
    "tests/temporal/test_turn_across_runs.py",  # 15, 8, 4
    "tests/temporal/test_failed_child.py",  # 15, 6, 3
    "tests/temporal/test_failed_root.py",  # 11
    "tests/subagents/test_stateful.py",  # 10
    "tests/temporal/test_quiet_settle.py",  # 8
    "tests/temporal/test_live.py",  # 7, 6, 3, 3
    "tests/temporal/test_homeless_control.py",  # 6
    "tests/temporal/test_homes_carried.py",  # 6
    "tests/temporal/test_server_stream.py",  # eight of 4-6
    "tests/temporal/test_interrupt_retry.py",  # 6
    "tests/temporal/test_faults.py",  # 6, 2
    "tests/headless/test_kill.py",  # 6
    "tests/temporal/test_homes.py",  # 6, 4, 4, 3
    "tests/temporal/test_homes_gaps.py",  # 6, 5, 4, 3
    "tests/test_replay_properties.py",  # 5, 5, 4, 3
    "tests/temporal/test_temporal_engine.py",  # 5, 3, 3, and many of 1-2
    "tests/temporal/test_temporal_control.py",  # 4, 3
    "tests/temporal/test_projection_cli.py",  # 4
    "tests/temporal/test_large_payloads.py",  # 4
    "tests/temporal/test_seam.py",  # 4
    "tests/cli/test_fuzz_yaml.py",  # 4, 3
    "tests/temporal/test_record_live.py",  # 4
    "tests/testing/test_plugin.py",
    "tests/testing/test_readme_example.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = {path: i for i, path in enumerate(LONG_POLES)}
    root = config.rootpath

    def key(item: pytest.Item) -> int:
        return rank.get(item.path.relative_to(root).as_posix(), len(LONG_POLES))

    items.sort(key=key)  # stable: every other test keeps its collected place


@pytest.fixture(autouse=True)
def _no_network() -> Iterator[respx.MockRouter]:
    """Every test runs with the network mocked and no routes: a stray request fails the test."""
    with respx.mock(assert_all_mocked=True) as router:
        yield router


@pytest.fixture
def llm(_no_network: respx.MockRouter) -> respx.MockRouter:
    """The active router, for tests that serve a model over respx (`llm.post(url).mock(...)`);
    routes added to the global `respx` router would not be consulted by this local mock."""
    return _no_network


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    """A fresh $DSH_HOME; every event log written under it must pass validate_log at teardown."""
    root = tmp_path / "home"
    yield root
    validate_home(root)


class CountingProvider:
    """Test double at the model seam: forwards to a provider and records each request it serves."""

    def __init__(self, inner: ReplayProvider) -> None:
        self.inner = inner
        self.name = inner.name
        self.requests: list[ModelRequest] = []
        self.gate: asyncio.Event | None = None

    def bind_root(self, session_id: str) -> None:
        self.inner.bind_root(session_id)

    def bind_child(self, session_id: str, descriptor: dict[str, Any]) -> None:
        self.inner.bind_child(session_id, descriptor)

    def resume_session(self, session_id: str, descriptor: dict[str, Any] | None, events: list[Any]) -> None:
        self.inner.resume_session(session_id, descriptor, events)

    def add_hang_listener(self, fn: Any) -> Any:
        return self.inner.add_hang_listener(fn)

    def stream(self, request: ModelRequest, signal: Any, on_retry: Any) -> AsyncIterator[Any]:
        self.requests.append(request)
        return self.inner.stream(request, signal, on_retry)

    async def aclose(self) -> None:
        await self.inner.aclose()


def write_transcript(directory: Path, agents: dict[str, Any], **extra: Any) -> Path:
    doc = {"version": 1, "name": extra.pop("name", "inline"), "task": extra.pop("task", "go"), **extra}
    doc["agents"] = agents
    path = directory / f"{doc['name']}.yaml"
    path.write_text(json.dumps(doc, indent=1))  # JSON is YAML
    return path


@dataclass
class Runtime:
    """A root agent on the real loop and store, scripted by replay replies."""

    home: Path
    store: SessionStore
    registry: AgentRegistry
    provider: CountingProvider
    replay: ReplayProvider
    agents: list[Agent] = field(default_factory=list)

    async def new_agent(self, key: str = "root", **options: Any) -> Agent:
        session = await self.store.create(make_header(f"session-test-{len(self.agents)}-{key}"))
        if key == "root":
            self.replay.bind_root(session.id)
        agent = Agent(
            session,
            store=self.store,
            provider=self.provider,
            options=AgentOptions(**options),
            registry=self.registry,
        )
        self.registry.register(agent)
        self.agents.append(agent)
        return agent

    def forget(self, agent: Agent) -> None:
        """Drop a handle whose session the test closed by hand (a simulated process exit)."""
        self.agents.remove(agent)
        self.registry.unregister(agent)

    async def close(self) -> None:
        for agent in self.agents:
            await agent.dispose()


@pytest.fixture
async def make_runtime(home: Path, tmp_path: Path) -> AsyncIterator[Any]:
    runtimes: list[Runtime] = []

    async def factory(
        replies: list[dict[str, Any]] | None = None,
        *,
        agents: dict[str, Any] | None = None,
        batch_delay_ms: int = 0,
        io: Any = None,
    ) -> Runtime:
        spec = agents or {"root": {"replies": replies or []}}
        script = load_transcript(write_transcript(tmp_path, spec, name=f"inline-{len(runtimes)}"))
        replay = ReplayProvider(script)
        store = SessionStore(home, batch_delay_ms=batch_delay_ms, fsync=False, io=io)
        rt = Runtime(home=home, store=store, registry=AgentRegistry(), provider=CountingProvider(replay), replay=replay)
        runtimes.append(rt)
        return rt

    yield factory
    for rt in runtimes:
        await rt.close()


@pytest.fixture
async def make_tree(home: Path, tmp_path: Path) -> AsyncIterator[Any]:
    """Build a `Tree` (the runner's own runtime objects) over a replay script given as a dict of
    transcript agents. `tree.provider` is a `CountingProvider`; `tree.provider.inner` the replay.
    Every tree is shut down at teardown (drains included), then the home's logs are validated."""
    from dsh.loader.headless import Tree
    from dsh.loader.subagents import ManagerConfig

    trees: list[Any] = []

    async def factory(
        agents: dict[str, Any],
        *,
        max_depth: int = 3,
        report_delivery: str = "wakeup",
        batch_delay_ms: int = 0,
        agent_class: type[Agent] = Agent,
        **options: Any,
    ) -> Any:
        script = load_transcript(write_transcript(tmp_path, agents, name=f"tree-{len(trees)}"))
        provider = CountingProvider(ReplayProvider(script))
        tree = Tree(
            home=home,
            provider=provider,  # type: ignore[arg-type]
            options=AgentOptions(**options),
            manager_config=ManagerConfig(max_depth=max_depth, report_delivery=report_delivery),  # type: ignore[arg-type]
            batch_delay_ms=batch_delay_ms,
            agent_class=agent_class,
        )
        trees.append(tree)
        return tree

    yield factory
    for tree in trees:
        await tree.shutdown()


@pytest.fixture
def threaded_replay(monkeypatch: pytest.MonkeyPatch) -> None:
    """Replay runs with the store's I/O back in worker threads (as before issue 10), so a transcript
    with a real race gives differing flows: the way to see `--repeat` and `repeat=` report one."""
    import dsh.loader.tree
    from dsh import loader

    class ThreadedStore(SessionStore):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs["inline_io"] = False
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(loader.tree, "SessionStore", ThreadedStore)
