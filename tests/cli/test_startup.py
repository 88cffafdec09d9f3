"""Start-up cost of the command (STYLE §10): `import dsh.cli.main` and the `dsh interrupt` path load only
typer and the stdlib-level `loader` modules; the runtime, pydantic, httpx and ruamel.yaml load inside
the commands that need them. Each check runs in a fresh interpreter, where `sys.modules` is honest.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from cli_kit import subprocess_env

from dsh.loader.texts import render

HEAVY = ("httpx", "pydantic", "pydantic_settings", "ruamel.yaml", "dsh.loader.headless", "dsh.loader.agent", "dsh.loader.tree",
         "dsh.loader.config", "dsh.loader.session")

REPORT = "import json, sys; print(json.dumps(sorted(sys.modules)))"


def modules_after(code: str, *, cwd: Path | None = None) -> tuple[list[str], str]:
    """Run `code` then print `sys.modules` as the last stdout line; returns (modules, other stdout)."""
    done = subprocess.run(
        [sys.executable, "-c", f"{code}\n{REPORT}"], capture_output=True, text=True, timeout=30,
        env=subprocess_env(), cwd=cwd,
    )
    assert done.returncode == 0, done.stderr
    *before, last = done.stdout.splitlines()
    return json.loads(last), "\n".join(before)


def loaded(modules: list[str], names: tuple[str, ...]) -> list[str]:
    return [name for name in names if name in modules]


def test_importing_the_app_loads_no_runtime_and_no_rich():
    modules, _ = modules_after("import dsh.cli.main")

    assert loaded(modules, (*HEAVY, "rich", "typer.rich_utils")) == []


def test_the_rpc_client_path_loads_no_runtime_and_no_asyncio():
    """`dsh interrupt` talks to the socket synchronously; asyncio is not needed either."""
    modules, _ = modules_after("import dsh.cli.control, loader.host.client")

    assert loaded(modules, (*HEAVY, "asyncio", "dsh.loader.host.server")) == []


# typer >= 0.2x coerces every command parameter through a pydantic `TypeAdapter` when the command
# runs (typer/_coercion.py `build_runtime_param`), so running any command loads pydantic itself; that
# is typer's cost, not an import of ours. Everything of dsh's own must still stay out.
TYPER_RUNTIME = frozenset({"pydantic"})


@pytest.mark.parametrize("argv_tail", [[], ["hello"]], ids=["interrupt", "send"])
def test_running_interrupt_and_send_end_to_end_stays_light(tmp_path, argv_tail):
    """The whole command, routing included (headers read, socket tried), against a home whose run
    has ended: T-CLI-NO-RUN / T-CLI-SEND-NO-RUN, and none of the runtime in `sys.modules`."""
    root, child = "session-11111111-1111-4111-8111-111111111111", "child-1"
    for sid, extra in ((root, {}), (child, {"parentSession": root, "origin": "subagent"})):
        (tmp_path / "sessions" / sid).mkdir(parents=True)
        header = {"type": "session", "version": 1, "id": sid, "createdAt": 1, "cwd": "/", "delegationDepth": 0, **extra}
        (tmp_path / "sessions" / sid / "session.jsonl").write_text(json.dumps(header) + "\n")
    command = "send" if argv_tail else "interrupt"
    code = (
        "from dsh.cli.main import app\n"
        "try:\n"
        f"    app({[command, f'{root}/{child}', *argv_tail, '--home', str(tmp_path)]!r})\n"
        "except SystemExit as exc:\n"
        "    print('exit', exc.code)\n"
    )
    modules, stdout = modules_after(code)

    expected = (
        "exit 1" if command == "send" else f"{render('T-CLI-NO-RUN', child=child)}\nexit 0"
    )
    assert stdout == expected
    heavy = tuple(name for name in HEAVY if name not in TYPER_RUNTIME)
    assert loaded(modules, (*heavy, "asyncio", "rich")) == []


@pytest.mark.parametrize("argv_tail", [[], ["hello"]], ids=["interrupt", "send"])
def test_the_fast_path_loads_neither_typer_nor_pydantic(tmp_path, argv_tail):
    """Issue 13: `dsh interrupt` / `dsh send` through `cli.fastpath` (what the console script runs
    for them) answer T-CLI-NO-RUN / T-CLI-SEND-NO-RUN without importing typer at all, so nothing of
    the app, its pydantic coercion or rich either."""
    root, child = "session-11111111-1111-4111-8111-111111111111", "child-1"
    for sid, extra in ((root, {}), (child, {"parentSession": root, "origin": "subagent"})):
        (tmp_path / "sessions" / sid).mkdir(parents=True)
        header = {"type": "session", "version": 1, "id": sid, "createdAt": 1, "cwd": "/", "delegationDepth": 0, **extra}
        (tmp_path / "sessions" / sid / "session.jsonl").write_text(json.dumps(header) + "\n")
    command = "send" if argv_tail else "interrupt"
    code = (
        "from dsh.cli.fastpath import plan\n"
        f"call = plan({[command, f'{root}/{child}', *argv_tail, '--home', str(tmp_path)]!r}, {{}})\n"
        "try:\n"
        "    call()\n"
        "except SystemExit as exc:\n"
        "    print('exit', exc.code)\n"
    )
    modules, stdout = modules_after(code)

    # `send` without a live run fails, and `fail` raises typer's Exit: only then is typer imported.
    expected = "exit 1" if command == "send" else f"{render('T-CLI-NO-RUN', child=child)}\nexit 0"
    assert stdout == expected
    light = ("typer", "dsh.cli.app") if command == "interrupt" else ("dsh.cli.app",)
    assert loaded(modules, (*HEAVY, *light, "asyncio", "rich")) == []


def test_the_version_loads_nothing_of_dsh_but_the_entry():
    modules, stdout = modules_after(
        "import sys\nfrom cli.fastpath import plan\ntry:\n    plan(['--version'], {})()\nexcept SystemExit as exc:\n"
        "    print('exit', exc.code)\n"
    )

    assert stdout.splitlines()[-1] == "exit 0"
    assert [m for m in modules if m.startswith(("loader", "typer", "importlib.metadata", "pydantic"))] == []


# What `dsh run --transcript` (the console script's fast path) must not load (issue 13): typer and the
# app (the command runs without them), pydantic-settings (no DSH_* configuration variable is set),
# httpx and the OpenAI-compatible provider (the model is a transcript), the recorder (nothing is
# recorded), rich (stderr is not a TTY), ruamel.yaml (shipped files read from loader/shipped_parsed.json),
# pydantic (see below).
RUN_LIGHT = ("typer", "dsh.cli.app", "pydantic_settings", "dotenv", "httpx", "httpx_sse", "dsh.loader.models.openai",
             "dsh.loader.models.recorder", "ruamel.yaml",
             "rich",
             # the configuration, the transcript, the tool arguments and any control request are
             # validated by `loader.lean` (issue 13): pydantic only for an invalid or unusual input
             "pydantic", "pydantic_core", "annotated_types", "dsh.loader.config.schema",
             "dsh.loader.transcripts.schema", "dsh.loader.transcripts.fence_schema", "dsh.loader.tools.args",
             "dsh.loader.host.params")


@pytest.mark.parametrize("json_output", [False, True], ids=["answer", "json"])
def test_a_transcript_run_through_the_fast_path_stays_light(tmp_path, json_output):
    argv = ["run", "--transcript", "background-settlement", "--home", str(tmp_path / "h"), *(["--json"] if json_output else [])]
    code = (
        "import os\n"
        "from dsh.cli.fastpath import plan\n"
        "os.environ.pop('DSH_HOME', None)\n"
        f"call = plan({argv!r}, {{}})\n"
        "try:\n"
        "    call()\n"
        "except SystemExit as exc:\n"
        "    print('exit', exc.code)\n"
    )
    modules, stdout = modules_after(code)

    assert stdout.splitlines()[-1] == "exit 0"
    assert "PARENT_RECEIVED_CHILD_RESULT" in stdout
    assert "dsh.loader.headless" in modules  # it did run the tree
    assert loaded(modules, RUN_LIGHT) == []


def test_the_rpc_parameter_models_are_built_on_the_first_request_not_at_import():
    """`loader.host.methods` is imported by every run (it serves the control socket), but most runs
    get no request: its models defer their build (issue 13), and still validate when one comes."""
    code = (
        "from dsh.loader.host.methods import InterruptParams, PromptParams\n"
        "print(InterruptParams.__pydantic_complete__, PromptParams.__pydantic_complete__)\n"
        "sid = 'session-11111111-1111-4111-8111-111111111111'\n"
        "p = PromptParams.model_validate({'parentSessionId': sid, 'childSessionId': sid, 'message': 'm'})\n"
        "print(p.message, PromptParams.__pydantic_complete__)\n"
    )
    _, stdout = modules_after(code)

    assert stdout.splitlines() == ["False False", "m True"]
