"""The dsh pytest plugin (SPEC §20.3; `pytest11` entry point `dsh`).

Fixtures:
- `dsh_flow(transcript, *, overlays=(), timeout=60) -> Flow` runs a transcript in a fresh temporary
  home under the test profile and returns its normalized flow, raising `TranscriptViolation` (which
  carries the flow and the violations) when the transcript was broken. `await dsh_flow.arun(...)` is
  the async twin; the sync form refuses to run inside a running loop instead of nesting one.
- `dsh_flow(path, repeat=N)` runs the transcript N times (each in its own home and, in the sync
  form, its own event loop) and raises `FlowsDiffer` with a unified diff when two flows differ
  (issue 10: one transcript, one flow). `--dsh-repeat N` sets the default N for every call.
- `flow_snapshot` is syrupy's `snapshot` using `FlowYamlExtension`:
  `assert dsh_flow("background-settlement") == flow_snapshot`.

CI is read-only: with `CI` set to anything but "", "0" or "false", `--snapshot-update` (and
`--snapshot-update-new-only`, which would equally let a missing snapshot pass by writing it) is a
usage error. Missing and unused snapshots keep syrupy's default of failing.

The plugin is loaded into every pytest session of an environment that has dsh installed, so syrupy
and the runtime are imported only when a fixture is used; replay runs happen inside
`respx.mock(assert_all_mocked=True)` when respx is installed, so a stray request fails the test.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from dsh.loader.testing.snapshots import ci_is_read_only

if TYPE_CHECKING:
    from syrupy.assertion import SnapshotAssertion

    from dsh.loader.testing.runner import Flow

__all__ = ["DshFlow", "ci_is_read_only"]

_UPDATE_OPTIONS = (("update_snapshots", "--snapshot-update"),
                   ("update_new_snapshots_only", "--snapshot-update-new-only"))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--dsh-repeat", type=int, default=1, metavar="N",
        help="dsh: run each dsh_flow(...) transcript N times; differing flows fail the test",
    )


def pytest_configure(config: pytest.Config) -> None:
    if not ci_is_read_only(os.environ):
        return
    for dest, flag in _UPDATE_OPTIONS:
        if config.getoption(dest, default=False):
            raise pytest.UsageError(
                f"{flag} is refused in CI (CI={os.environ.get('CI')!r}): snapshots are read-only "
                "there; update them locally and commit the files"
            )


class DshFlow:
    """The `dsh_flow` fixture value: each call runs in its own fresh home."""

    def __init__(self, tmp_path_factory: pytest.TempPathFactory, default_repeat: int = 1) -> None:
        self._tmp = tmp_path_factory
        self.default_repeat = default_repeat

    def __call__(self, transcript: str | Path, *, overlays: Sequence[str] = (), timeout: float = 60,
                 repeat: int | None = None) -> Flow:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise RuntimeError(
                "dsh_flow(...) cannot run inside a running event loop (an async test or fixture); "
                "use `await dsh_flow.arun(...)` there"
            )
        from dsh.loader.testing.runner import TranscriptViolation, check_repeats, plan_flow

        plan = plan_flow(transcript, overlays=overlays)
        outcomes: list[Flow | TranscriptViolation] = []
        for _ in range(self._repeat(repeat)):  # one event loop per run: nothing carries over
            try:
                outcomes.append(asyncio.run(self._arun_once(plan, timeout)))
            except TranscriptViolation as exc:
                outcomes.append(exc)
        return check_repeats(plan.name, outcomes)

    async def arun(self, transcript: str | Path, *, overlays: Sequence[str] = (), timeout: float = 60,
                   repeat: int | None = None) -> Flow:
        from dsh.loader.testing.runner import TranscriptViolation, check_repeats, plan_flow

        plan = plan_flow(transcript, overlays=overlays)
        outcomes: list[Flow | TranscriptViolation] = []
        for _ in range(self._repeat(repeat)):
            try:
                outcomes.append(await self._arun_once(plan, timeout))
            except TranscriptViolation as exc:
                outcomes.append(exc)
        return check_repeats(plan.name, outcomes)

    def _repeat(self, repeat: int | None) -> int:
        n = self.default_repeat if repeat is None else repeat
        if n < 1:
            raise ValueError(f"repeat must be at least 1, got {n}")
        return n

    async def _arun_once(self, plan: Any, timeout: float) -> Flow:
        from dsh.loader.testing.runner import arun_flow

        home = self._tmp.mktemp("dsh-flow")
        with _no_network():
            return await arun_flow(plan, home=home, timeout=timeout)


def _no_network() -> contextlib.AbstractContextManager[Any]:
    try:
        import respx
    except ImportError:  # respx is a test extra; without it nothing can intercept requests
        return contextlib.nullcontext()
    return respx.mock(assert_all_mocked=True)


@pytest.fixture
def dsh_flow(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> DshFlow:
    return DshFlow(tmp_path_factory, default_repeat=int(request.config.getoption("--dsh-repeat", default=1)))


@pytest.fixture
def flow_snapshot(snapshot: SnapshotAssertion) -> SnapshotAssertion:
    from dsh.loader.testing.extension import FlowYamlExtension

    return snapshot.use_extension(FlowYamlExtension)
