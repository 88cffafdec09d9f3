"""Fixtures for the `dsh` command tests: the Typer app in-process through `CliRunner` (stdout and
stderr kept apart), a short private home whose logs are validated at teardown, and `live_run`, which
starts `dsh run --json` subprocesses and kills any left over.

Nothing here mutates `os.environ`: in-process calls pass `env=` to `CliRunner.invoke`, subprocesses
get an explicit environment.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest
from cli_kit import LiveRun, clean_env
from home_kit import validate_home
from typer.testing import CliRunner, Result

from dsh.cli.main import app


@pytest.fixture
def home() -> Iterator[Path]:
    """Overrides the suite's `home` with a short path, so the control socket is `home/run/<root>.sock`
    (pytest's tmp_path can exceed the 100-byte limit and would exercise the fallback instead). Every
    log under it must pass validate_log at teardown."""
    scratch = Path(tempfile.mkdtemp(prefix="dsh-cli-", dir="/tmp"))
    path = scratch / "h"
    try:
        yield path
        validate_home(path)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


@pytest.fixture
def dsh() -> Callable[..., Result]:
    """`dsh(*args, env=...)`: the Typer app in-process; `result.stdout` and `result.stderr` are apart."""
    runner = CliRunner()

    def invoke(*args: str | Path, env: Mapping[str, str | None] | None = None) -> Result:
        return runner.invoke(app, [str(a) for a in args], env=clean_env(env))

    return invoke


@pytest.fixture
def live_run() -> Iterator[Callable[..., LiveRun]]:
    runs: list[LiveRun] = []

    def start(*args: str | Path, env: Mapping[str, str] | None = None) -> LiveRun:
        run = LiveRun([str(a) for a in args], env)
        runs.append(run)
        return run

    yield start
    for run in runs:
        run.kill()
