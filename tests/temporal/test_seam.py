"""The engine seam (issue 12 item 1): `engine` and `temporal.*` in the configuration, the local
engine the default and free of temporalio, `dsh worker` and `dsh run --engine temporal` end to end."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

from temporal_kit import BACKSTOP_SECONDS, dev_server

from dsh.loader.config import compose
from dsh.loader.config import flag_layer

ROOT = Path(__file__).resolve().parents[2]
DSH = [sys.executable, "-c", "from dsh.cli.main import entry; entry()"]


def env_without_dsh(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("DSH_")}
    env.update(extra)
    return env


def test_engine_is_local_by_default_and_temporal_settings_come_from_every_layer(tmp_path: Path) -> None:
    config = compose(environ={}, cwd=tmp_path).config
    assert config.engine == "local"
    assert (config.temporal.address, config.temporal.namespace, config.temporal.task_queue) == (
        "localhost:7233", "default", "dsh")
    environ = {"DSH_ENGINE": "temporal", "DSH_TEMPORAL__TASK_QUEUE": "trees", "DSH_TEMPORAL__ADDRESS": "t:7233"}
    config = compose(environ=environ, cwd=tmp_path).config
    assert (config.engine, config.temporal.task_queue, config.temporal.address) == ("temporal", "trees", "t:7233")
    profile = tmp_path / "p.yaml"
    profile.write_text("engine: temporal\ntemporal:\n  namespace: dsh-ns\n  taskQueue: q\n")
    config = compose(profile=str(profile), environ={}, cwd=tmp_path,
                     flags=[flag_layer("--engine", "engine", "local")]).config
    assert (config.engine, config.temporal.namespace, config.temporal.task_queue) == ("local", "dsh-ns", "q")


def test_a_local_run_never_imports_temporalio(tmp_path: Path) -> None:
    probe = (
        "import atexit, sys\n"
        "atexit.register(lambda: sys.stderr.write('temporalio loaded: %s\\n' % ('temporalio' in sys.modules)))\n"
        "from dsh.cli.main import entry\n"
        f"sys.argv = ['dsh', 'run', '--transcript', 'hello', '--home', {str(tmp_path)!r}]\n"
        "entry()\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env_without_dsh(),
                          cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "Hello from dsh.\n"
    assert "temporalio loaded: False" in done.stderr


async def test_dsh_worker_serves_dsh_run_engine_temporal_and_sessions_reads_the_projection(tmp_path: Path) -> None:
    async with dev_server() as client:
        target = client.service_client.config.target_host
        worker_env = env_without_dsh(DSH_TEMPORAL__ADDRESS=target, DSH_TEMPORAL__TASK_QUEUE=f"cli-e2e-{uuid.uuid4().hex[:8]}")
        # The client's runs take the Temporal fence backstop (temporal_kit); the worker, under the
        # default profile, refuses `testing.*` settings, and needs none (fences come with the run).
        env = {**worker_env, "DSH_TESTING__FENCE_TIMEOUT_SECONDS": str(BACKSTOP_SECONDS)}
        worker = subprocess.Popen([*DSH, "worker"], env=worker_env, cwd=tmp_path, text=True,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            hello = await _dsh(["run", "--engine", "temporal", "--transcript", "hello", "--home", str(tmp_path)], env, tmp_path)
            assert (hello.returncode, hello.stdout) == (0, "Hello from dsh.\n"), hello.stderr
            settled = await _dsh(["run", "--engine", "temporal", "--transcript", "background-settlement", "--json",
                                  "--home", str(tmp_path)], env, tmp_path)
            assert settled.returncode == 0, settled.stderr
            records = [json.loads(line) for line in settled.stdout.splitlines()]
            kinds = [r["type"] for r in records]  # streamed as on the local engine (test_stream.py)
            assert kinds[0] == "init" and kinds.count("lifecycle") == 2 and "event" in kinds
            result = records[-1]
            assert (result["type"], result["stopReason"], result["output"]) == (
                "result", "completed", "PARENT_RECEIVED_CHILD_RESULT")
            assert result["violations"] == []
            tree = await _dsh(["sessions", "tree", result["rootSessionId"], "--home", str(tmp_path)], env, tmp_path)
            assert tree.returncode == 0, tree.stderr
            root_line, child_line = tree.stdout.splitlines()
            assert root_line == f"{result['rootSessionId']} root completed"
            assert "[answer child] continuable completed" in child_line
            assert f"address {result['rootSessionId']}/session-" in child_line
            # A task no payload carries: one line and the usage exit, no traceback, no workflow started.
            big = tmp_path / "big-task.json"
            big.write_text(json.dumps({"version": 1, "name": "big-task", "task": "x" * 3_000_000,
                                       "agents": {"root": {"replies": [{"text": "OK"}]}}}))
            refused = await _dsh(["run", "--engine", "temporal", "--transcript", str(big), "--home", str(tmp_path / "big")],
                                 env, tmp_path)
            assert (refused.returncode, refused.stdout) == (2, ""), refused.stderr
            assert refused.stderr.startswith("dsh: the task is 3000") and refused.stderr.count("\n") == 1, refused.stderr
            assert not (tmp_path / "big" / "sessions").exists()
        finally:
            worker.send_signal(signal.SIGTERM)
            out, err = worker.communicate(timeout=60)
        assert worker.returncode == 0, err


async def _dsh(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    import asyncio

    return await asyncio.to_thread(
        subprocess.run, [*DSH, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=120
    )


async def test_an_unreachable_server_is_a_configuration_error_naming_the_address() -> None:
    import pytest

    from dsh.loader.engines.client import connect
    from dsh.loader.errors import ConfigError

    with pytest.raises(ConfigError) as caught:
        await connect("127.0.0.1:1", "default")
    assert caught.value.code == "CONFIG_INVALID"
    assert caught.value.message.startswith("no Temporal server at 127.0.0.1:1 (namespace default): ")


async def test_run_flags_of_later_slices_are_refused_not_ignored(tmp_path: Path) -> None:
    import pytest

    from dsh.loader.engines.client import submit
    from dsh.loader.errors import ConfigError
    from dsh.loader.headless import RunRequest
    from dsh.loader.transcripts import load_transcript

    # `--record` is built (tests/temporal/test_record.py).
    for extra, flag in (({"timeout": 5.0}, "--timeout"), ({"resume": "last"}, "--resume")):
        request = RunRequest(home=tmp_path, transcript=load_transcript("hello"), **extra)  # type: ignore[arg-type]
        with pytest.raises(ConfigError) as caught:
            await submit(None, request, "q")  # type: ignore[arg-type]  # refused before any call
        assert (caught.value.code, caught.value.message) == (
            "USAGE", f"the Temporal engine does not support {flag} yet")


async def test_a_task_or_a_users_message_no_payload_carries_is_refused_before_any_call(tmp_path: Path) -> None:
    """The server refuses a payload over 2 MB ("Blob data size exceeds limit", an internal error
    before): a task past MESSAGE_LIMIT is a usage error; a `dsh send` message past it is refused as
    the control socket refuses a line past its limit (the same bound), both before the server is
    asked anything."""
    import pytest

    from dsh.loader.engines.client import submit
    from dsh.loader.engines.control import user_call
    from dsh.loader.engines.refusals import MESSAGE_LIMIT
    from dsh.loader.errors import ConfigError
    from dsh.loader.headless import RunRequest
    from dsh.loader.host.protocol import MAX_LINE_BYTES, RpcError
    from dsh.loader.transcripts import load_transcript

    assert MESSAGE_LIMIT == MAX_LINE_BYTES
    big = "x" * MESSAGE_LIMIT
    request = RunRequest(home=tmp_path, transcript=load_transcript("hello"), task=big)
    with pytest.raises(ConfigError) as caught:
        await submit(None, request, "q")  # type: ignore[arg-type]  # refused before any call
    assert caught.value.code == "USAGE" and caught.value.message.startswith("the task is ")
    params = {"parentSessionId": "session-p", "childSessionId": "session-c", "message": big}
    with pytest.raises(RpcError) as refused:
        await user_call(None, "session-r", "subagent.prompt", params)  # type: ignore[arg-type]
    assert (refused.value.code, refused.value.data_code) == (-32600, "bad-request")
    assert "the message is " in refused.value.message
