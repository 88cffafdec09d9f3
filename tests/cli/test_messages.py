"""Messages (issue 11 item 5), through the CLI: every error line prefixed `dsh:` and in position
order, did-you-mean for unknown keys, retry lines without Python's `None`, the provider URL in
connection errors, the provider's own (key-free) message on HTTP errors, no stray newline on stdout
when the root fails, and `--record` that will not overwrite a file without `--force`.

Live-provider runs are in-process against the suite's respx router (`llm`), on the keyless
`ollama` overlay; an overlay file sets the retry backoff to 0 so a retry waits for nothing.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import pytest
from cli_kit import transcript, write_yaml

from sse_kit import SSE_HEADERS, delta, finish, sse

URL = "http://localhost:11434/v1/chat/completions"
NO_KEYS = {"DEEPSEEK_API_KEY": None, "OPENAI_API_KEY": None}
POSITION = re.compile(r"^dsh: (?P<file>.+?):(?P<line>\d+):(?P<col>\d+): ")


def positions(stderr: str) -> list[tuple[int, int]]:
    lines = stderr.splitlines()
    assert lines and all(line.startswith("dsh: ") for line in lines), stderr
    found = [POSITION.match(line) for line in lines]
    assert all(found), stderr
    return [(int(m["line"]), int(m["col"])) for m in found if m]


def fast_retries(tmp_path: Path, attempts: int) -> Path:
    return write_yaml(tmp_path / "fast-retries.yaml",
                      {"model": {"retry": {"maxAttempts": attempts, "initialBackoffSeconds": 0}}})


def test_config_errors_are_each_prefixed_sorted_by_position_with_did_you_mean(dsh, home, tmp_path):
    overlay = tmp_path / "typos.yaml"
    overlay.write_text("model:\n  retry:\n    maxAttempt: 3\nagnets:\n  x: 1\n"
                       "run:\n  parked: maybe\nsubagents:\n  reportDelivry: quiet\n")

    result = dsh("config", "show", "--overlay", overlay)

    assert (result.exit_code, result.stdout) == (2, "")
    assert positions(result.stderr) == [(3, 5), (4, 1), (7, 3), (9, 3)]
    assert "model.retry.maxAttempt: unknown key; did you mean maxAttempts?" in result.stderr
    assert "subagents.reportDelivry: unknown key; did you mean reportDelivery?" in result.stderr


def test_transcript_errors_are_each_prefixed_sorted_by_position_with_did_you_mean(dsh, home, tmp_path):
    path = tmp_path / "typos.yaml"
    path.write_text(
        "version: 1\nname: typos\ntask: go\n"
        "fences:\n  - hold: {agent: root, turn: 1, step: 2, until: {turnEnd: {agent: w, turn: 1}}}\n"
        "agnets:\n  root:\n    replies:\n      - {txt: hi}\n"
    )

    result = dsh("run", "--transcript", path, "--home", home)

    assert (result.exit_code, result.stdout) == (2, "")
    spots = positions(result.stderr)
    assert spots == sorted(spots) and len(spots) >= 3, result.stderr
    assert "agnets: unknown key; did you mean agents?" in result.stderr
    assert "turnEnd: unknown key; did you mean turnEnded?" in result.stderr


def test_a_retried_connection_error_names_the_url_and_never_none(dsh, home, tmp_path, llm):
    llm.post(URL).mock(side_effect=[
        httpx.ConnectError("connection refused"),
        httpx.Response(200, headers=SSE_HEADERS, content=sse(delta(content="ok"), finish("stop"))),
    ])

    result = dsh("run", "hi", "--overlay", "ollama", "--overlay", fast_retries(tmp_path, 2), "--home", home,
                 env=NO_KEYS)

    assert (result.exit_code, result.stdout) == (0, "ok\n"), result.stderr
    assert result.stderr.startswith(
        f"dsh: model request attempt 1 failed: could not connect to the model provider at {URL} (ConnectError) "
        "(NETWORK); retrying in 0.0 s"), result.stderr
    assert "None" not in result.stderr


def test_a_failed_root_prints_nothing_on_stdout_and_the_error_names_the_url(dsh, home, tmp_path, llm):
    llm.post(URL).mock(side_effect=httpx.ConnectError("connection refused"))

    result = dsh("run", "hi", "--overlay", "ollama", "--overlay", fast_retries(tmp_path, 1), "--home", home,
                 env=NO_KEYS)

    assert (result.exit_code, result.stdout) == (1, "")
    assert result.stderr.splitlines()[-1] == (
        f"dsh: root turn failed [NETWORK]: could not connect to the model provider at {URL} (ConnectError) (NETWORK)")


def test_an_http_401_carries_the_providers_own_message_without_the_key(dsh, home, llm):
    key = "sk-live-abcdef1234567890"
    body = {"error": {"message": f"Incorrect API key provided: {key}.\nYou can find your key in the dashboard.",
                      "type": "invalid_request_error", "code": "invalid_api_key"}}
    llm.post("https://api.openai.com/v1/chat/completions").mock(return_value=httpx.Response(401, json=body))

    result = dsh("run", "hi", "--overlay", "openai", "--home", home, env={**NO_KEYS, "OPENAI_API_KEY": key})

    assert (result.exit_code, result.stdout) == (1, "")
    assert result.stderr.splitlines()[-1] == (
        "dsh: root turn failed [AUTH]: the model provider answered HTTP 401: Incorrect API key provided: "
        "<redacted>. You can find your key in the dashboard. (AUTH)")
    assert key not in result.stderr


def test_record_refuses_to_overwrite_a_file_without_force(dsh, home, tmp_path, llm):
    route = llm.post(URL).mock(
        return_value=httpx.Response(200, headers=SSE_HEADERS, content=sse(delta(content="ok"), finish("stop"))))
    kept = tmp_path / "kept.yaml"
    kept.write_text("precious: true\n")

    refused = dsh("run", "hi", "--overlay", "ollama", "--record", kept, "--home", home, env=NO_KEYS)

    assert (refused.exit_code, refused.stdout) == (2, "")
    assert refused.stderr == f"dsh: --record: {kept} already exists; give --force to overwrite it\n"
    assert kept.read_text() == "precious: true\n" and route.call_count == 0

    forced = dsh("run", "hi", "--overlay", "ollama", "--record", kept, "--force", "--home", home, env=NO_KEYS)

    assert (forced.exit_code, forced.stdout) == (0, "ok\n"), forced.stderr
    assert "precious" not in kept.read_text() and route.call_count == 1


def test_a_failed_replay_root_prints_no_stray_newline(dsh, home, tmp_path):
    path = transcript(tmp_path, "fails", {"root": {"replies": [{"error": {"code": "AUTH", "message": "nope"}}]}})

    result = dsh("run", "--transcript", path, "--home", home)

    assert (result.exit_code, result.stdout) == (1, "")
    assert json.dumps("nope")[1:-1] in result.stderr


@pytest.mark.parametrize(("argv", "first"), [
    (["run", "--bogus"], "dsh: No such option: --bogus"),
    (["sessions", "shw"], "dsh: No such command 'shw'. Did you mean 'show'?"),
    (["interrupt"], "dsh: Missing argument 'ADDRESS'."),
    (["run", "--max-steps", "x", "--transcript", "hello"], "dsh: Invalid value for '--max-steps'"),
], ids=["option", "command", "argument", "value"])
def test_click_usage_errors_are_dsh_lines_too(dsh, home, argv, first):
    """Issue 11 item 5: every error line is prefixed, click's own usage errors included; exit 2 as
    click's, with the usage line and where help is, and nothing on stdout."""
    result = dsh(*argv, "--home", str(home))

    lines = result.stderr.splitlines()
    assert (result.exit_code, result.stdout) == (2, "")
    assert lines[0].startswith(first), lines
    assert all(line.startswith("dsh: ") for line in lines), lines
    command = f"dsh {argv[0]}"  # the command (or group) whose usage was wrong
    assert lines[-2].startswith(f"dsh: Usage: {command} [OPTIONS]"), lines
    assert lines[-1] == f"dsh: Try '{command} --help' for help."
