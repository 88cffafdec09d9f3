"""`dsh run` flags for pipelines (issue 16 item 3), each driven through the CLI.

Configuration flags are the last configuration layer: `--model` → `model.model`,
`--append-system-prompt` → `agent.appendSystemPrompt`, `--max-steps` → `agent.maxStepsPerTurn`,
`--parked` → `run.parked` (and the issue-15 budget flags → `limits.*`); `dsh config show` names each
as `flag --…`. The others are run options: `dsh run -` (the task from stdin), `--output-last-message
FILE` and `--resume last`. Flags that change what the model is asked run the real OpenAI-compatible
provider against a respx route (the suite's autouse mock) and read the request it sent.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from cli_kit import clean_env, transcript, write_yaml
from typer.testing import CliRunner

from dsh.cli.main import app
from dsh.loader.texts import TEXTS, render

KEY = "sk-test-flags-0123456789"
BASE = "https://llm.example.test"


def sse_answer(text: str) -> bytes:
    events = [
        {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        {"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 3}},
    ]
    return ("".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n").encode()


@pytest.fixture
def live(llm, tmp_path):
    """A live-provider setup: an overlay pointing at the respx route, and the bodies it received."""
    bodies: list[dict[str, Any]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=sse_answer("LIVE_OK"))

    llm.post(f"{BASE}/chat/completions").mock(side_effect=answer)
    overlay = write_yaml(tmp_path / "local.yaml", {"model": {"baseUrl": BASE},
                                                    "persistence": {"batchDelayMs": 0, "fsync": False}})
    return overlay, bodies


def invoke(*args: str | Path, input: str | None = None, env: dict[str, str] | None = None) -> Any:
    return CliRunner().invoke(app, [str(a) for a in args], input=input, env=clean_env(env))


def ndjson(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines()]


def provenance(*args: str) -> dict[str, tuple[Any, str]]:
    result = invoke("config", "show", "--json", *args)
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)

    def value(path: str) -> Any:
        node = doc["config"]
        for part in path.split("."):
            node = node[part]
        return node

    return {key: (value(key), source) for key, source in doc["provenance"].items()}


# -- configuration flags --------------------------------------------------------------------------

@pytest.mark.parametrize(("flag", "value", "key", "expected"), [
    pytest.param("--model", "my-model", "model.model", "my-model", id="model"),
    pytest.param("--append-system-prompt", "Answer in French.", "agent.appendSystemPrompt", "Answer in French.", id="append"),
    pytest.param("--max-steps", "7", "agent.maxStepsPerTurn", 7, id="max-steps"),
    pytest.param("--parked", "release", "run.parked", "release", id="parked"),
    pytest.param("--max-children", "3", "limits.maxChildren", 3, id="max-children"),
])
def test_each_config_flag_shows_in_config_show_provenance_as_flag(flag, value, key, expected):
    assert provenance(flag, value)[key] == (expected, f"flag {flag}")


def test_a_flag_outranks_the_environment(monkeypatch):
    got = provenance("--max-steps", "9")
    assert got["agent.maxStepsPerTurn"] == (9, "flag --max-steps")
    result = invoke("config", "show", "--json", "--max-steps", "9", env={"DSH_AGENT__MAX_STEPS_PER_TURN": "4"})
    assert json.loads(result.stdout)["provenance"]["agent.maxStepsPerTurn"] == "flag --max-steps"


def test_parked_wait_beats_the_transcript_rule_of_release():
    """Under a transcript `run.parked` is `release` (source `transcript`), unless the person says
    `--parked wait`: the explicit flag wins, so a replay's parked child can be sent to."""
    assert provenance("--transcript", "hello")["run.parked"] == ("release", "transcript")
    assert provenance("--transcript", "hello", "--parked", "wait")["run.parked"] == ("wait", "flag --parked")


@pytest.mark.parametrize(("flag", "value", "problem"), [
    pytest.param("--max-steps", "0", "flag --max-steps: agent.maxStepsPerTurn: Input should be greater than or equal to 1", id="max-steps"),
    pytest.param("--parked", "never", "flag --parked: run.parked: Input should be 'wait' or 'release'", id="parked"),
])
def test_a_bad_flag_value_exits_2_naming_the_flag_and_its_key(home, flag, value, problem):
    result = invoke("run", "--transcript", "hello", flag, value, "--home", home)
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == f"dsh: {problem}\n"
    assert not (home / "sessions").exists()  # nothing ran


def test_model_and_append_system_prompt_reach_the_request(live, home):
    overlay, bodies = live
    result = invoke("run", "Say it.", "--overlay", overlay, "--home", home, "--model", "my-model",
                    "--append-system-prompt", "Answer in French.", env={"DEEPSEEK_API_KEY": KEY})

    assert (result.exit_code, result.stdout, result.stderr) == (0, "LIVE_OK\n", "")
    [body] = bodies
    assert body["model"] == "my-model"
    system = body["messages"][0]
    assert system["role"] == "system"
    # The appended text is its own paragraph right after the system prompt, before the tool sections.
    assert system["content"].startswith(TEXTS["T-SYSTEM-DEFAULT"] + "\n\nAnswer in French.\n\n")


def test_without_flags_the_request_keeps_the_configured_model_and_prompt(live, home):
    overlay, bodies = live
    result = invoke("run", "Say it.", "--overlay", overlay, "--home", home, env={"DEEPSEEK_API_KEY": KEY})

    assert result.exit_code == 0, result.stderr
    assert bodies[0]["model"] == "deepseek-chat"
    assert "Answer in French." not in bodies[0]["messages"][0]["content"]


def test_max_steps_ends_the_turn_at_the_limit(home, tmp_path):
    """`--max-steps 2`: the root's third step never runs; the turn fails STEP_LIMIT (exit 1)."""
    listing = {"toolCalls": [{"id": "l1", "name": "list_agents", "arguments": {}}]}
    again = {"toolCalls": [{"id": "l2", "name": "list_agents", "arguments": {}}]}
    script = transcript(tmp_path, "three-steps", {"root": {"replies": [listing, again, {"text": "DONE"}]}})

    unlimited = invoke("run", "--transcript", script, "--home", home)
    assert (unlimited.exit_code, unlimited.stdout) == (0, "DONE\n")

    limited = invoke("run", "--transcript", script, "--home", home, "--max-steps", "2", "--json")
    result = ndjson(limited.stdout)[-1]
    assert limited.exit_code == 1
    assert (result["stopReason"], result["error"]["code"]) == ("error", "STEP_LIMIT")
    assert render("T-CLI-ROOT-ERROR", code="STEP_LIMIT", message="the turn reached the step limit of 2") in limited.stderr


# -- dsh run - -------------------------------------------------------------------------------------

def test_dash_reads_the_task_from_stdin(live, home):
    overlay, bodies = live
    result = invoke("run", "-", "--overlay", overlay, "--home", home, input="Summarise the log.\n",
                    env={"DEEPSEEK_API_KEY": KEY})

    assert (result.exit_code, result.stdout) == (0, "LIVE_OK\n")
    assert bodies[0]["messages"][-1] == {"role": "user", "content": "Summarise the log."}


def test_dash_with_empty_stdin_is_a_usage_error(home):
    result = invoke("run", "-", "--home", home, input="\n")
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == "dsh: dsh run -: the task read from stdin is empty\n"


# -- --output-last-message -------------------------------------------------------------------------

@pytest.mark.parametrize("mode", [pytest.param([], id="text"), pytest.param(["--json"], id="json")])
def test_output_last_message_writes_the_answer_to_the_file(home, tmp_path, mode):
    target = tmp_path / "answer.txt"
    result = invoke("run", "--transcript", "background-settlement", "--home", home,
                    "--output-last-message", target, *mode)

    assert result.exit_code == 0, result.stderr
    assert target.read_text() == "PARENT_RECEIVED_CHILD_RESULT\n"
    assert not list(tmp_path.glob(".answer.txt.*"))  # no temporary file left behind


def test_output_last_message_into_a_missing_directory_exits_2_before_running(home, tmp_path):
    target = tmp_path / "nowhere" / "answer.txt"
    result = invoke("run", "--transcript", "hello", "--home", home, "--output-last-message", target)

    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == f"dsh: --output-last-message: no directory {target.parent}\n"
    assert not (home / "sessions").exists()


def test_output_last_message_that_cannot_be_written_fails_the_run(home, tmp_path):
    target = tmp_path / "answer.txt"
    target.mkdir()  # a directory cannot be replaced by the answer file
    result = invoke("run", "--transcript", "hello", "--home", home, "--output-last-message", target)

    assert result.exit_code == 1
    assert result.stderr.startswith(f"dsh: --output-last-message: could not write {target}: ")


# -- --resume last ---------------------------------------------------------------------------------

def test_resume_last_continues_the_newest_root_in_the_home(live, home):
    """Two runs leave two roots; `--resume last` continues the second one's conversation."""
    overlay, bodies = live
    env = {"DEEPSEEK_API_KEY": KEY}
    roots = []
    for task in ("FIRST_TASK", "SECOND_TASK"):
        done = invoke("run", task, "--overlay", overlay, "--home", home, "--json", env=env)
        assert done.exit_code == 0, done.stderr
        roots.append(ndjson(done.stdout)[-1]["rootSessionId"])

    resumed = invoke("run", "--resume", "last", "THIRD_TASK", "--overlay", overlay, "--home", home, "--json", env=env)

    assert resumed.exit_code == 0, resumed.stderr
    records = ndjson(resumed.stdout)
    assert records[-1]["rootSessionId"] == roots[1]
    assert (records[0]["type"], records[0]["resumed"], records[0]["rootSessionId"]) == ("init", True, roots[1])
    users = [m["content"] for m in bodies[-1]["messages"] if m["role"] == "user"]
    assert users == ["SECOND_TASK", "THIRD_TASK"]


def test_resume_last_in_an_empty_home_exits_2(home):
    result = invoke("run", "--resume", "last", "--transcript", "hello", "--home", home)
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == f"dsh: --resume last: no root session under {home}/sessions\n"
