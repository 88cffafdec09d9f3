"""The `dsh run --json` contract (issue 16 item 2): every record validates against the JSON Schema
that ships in the package, and the stream has its promised order.

Validated with `jsonschema` (the reference validator, in the `test` extra), so the shipped schema
is also checked to be a well-formed draft 2020-12 schema, which is what a consumer's validator
needs. Every shipped transcript's `--json` run is validated record by record; `interrupt-demo`,
which waits for a person, is driven by a second process (`dsh interrupt`) under `--parked wait`, so
its run also produces the `waiting` record. The `retry` record needs a real provider retrying: the
OpenAI-compatible provider runs against a respx route that answers 429 once.
"""

from __future__ import annotations

import json
import shlex
import signal
from pathlib import Path
from typing import Any

import httpx
import pytest
from cli_kit import first_child, run_dsh, spawn, transcript, write_yaml
from jsonschema import Draft202012Validator
from typer.testing import CliRunner

from dsh.cli.main import app
from dsh.loader.ndjson import SCHEMA_VERSION, base_url_host, load_schema
from dsh.loader.shipped import available_names
from dsh.loader.texts import TEXTS, render

KEY = "sk-test-contract-0123456789"
BASE = "https://llm.example.test"
INTERACTIVE = "interrupt-demo"


@pytest.fixture(scope="module")
def validator() -> Draft202012Validator:
    schema = load_schema()
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def ndjson(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines()]


def assert_contract(records: list[dict[str, Any]], validator: Draft202012Validator) -> None:
    """Each record valid; `init` first and `result` last, once each; every record versioned."""
    for index, rec in enumerate(records):
        errors = sorted(validator.iter_errors(rec), key=lambda e: list(e.path))
        assert not errors, f"record {index} ({rec.get('type')}): {[e.message for e in errors]}"
        assert rec["version"] == SCHEMA_VERSION
    types = [r["type"] for r in records]
    assert types[0] == "init" and types.count("init") == 1
    assert types[-1] == "result" and types.count("result") == 1


def invoke(*args: str | Path, env: dict[str, str] | None = None) -> Any:
    from cli_kit import clean_env

    return CliRunner().invoke(app, [str(a) for a in args], env=clean_env(env))


# -- every shipped transcript ----------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(set(available_names("transcripts")) - {INTERACTIVE}))
def test_every_record_of_every_shipped_transcript_validates(name, home, validator):
    result = invoke("run", "--transcript", name, "--json", "--home", home)

    assert result.exit_code == 0, result.stderr
    records = ndjson(result.stdout)
    assert_contract(records, validator)
    init, final = records[0], records[-1]
    assert (init["rootSessionId"], init["transcript"], init["provider"], init["baseUrlHost"]) == (
        final["rootSessionId"], name, "replay", None)
    assert init["profile"] == "test" and init["model"] == final["model"] == "replay"


def interrupt_the_hanging_child(run: Any, home: Path) -> tuple[str, str]:
    """Once the first child hangs in its request and the root has ended turn 1, stop the child's
    turn from a second process, as a person would; returns `(root, child)`."""
    root, child = first_child(run)
    run.wait_event(child, "user/message")
    run.wait_event(root, "turn/end", turn=1)
    assert run_dsh("interrupt", f"{root}/{child}", "--home", home).returncode == 0
    return root, child


def test_the_interactive_transcript_waits_on_its_parked_child_then_validates(live_run, home, validator):
    """`interrupt-demo` under `--parked wait`: once the child's turn is stopped from a second process,
    the child parks with its queued message and the run emits one `waiting` record whose address
    and command `dsh send` accepts; the first SIGINT then ends the run (exit 130). All valid."""
    run = live_run("--transcript", INTERACTIVE, "--home", home, "--parked", "wait")
    root, child = interrupt_the_hanging_child(run, home)

    waiting = run.wait_for(lambda r: r["type"] == "waiting", "the waiting record")
    [entry] = waiting["parked"]
    assert (waiting["rootSessionId"], entry["sessionId"], entry["parentSessionId"]) == (root, child, root)
    assert entry["address"] == f"{root}/{child}" and entry["label"] == "long task"
    assert shlex.split(entry["send"]) == ["dsh", "send", f"{root}/{child}", "MESSAGE", "--home", str(home)]
    run.signal(signal.SIGINT)

    assert run.finish() == 130
    assert_contract(run.records, validator)
    assert [r["type"] for r in run.records].count("waiting") == 1
    stderr = run.stderr.decode()
    assert TEXTS["T-CLI-STALLED"].format(ids=f"{root}/{child}") in stderr


# -- --parked wait, resumed by `dsh send` -------------------------------------------------------------

RESUMABLE = {
    "root": {"replies": [
        spawn("start-worker", label="worker", prompt="Work on the long task."),
        {"toolCalls": [{"id": "queue-more", "name": "send_message",
                        "arguments": {"agent_id": "{{child:start-worker}}", "message": "FOLLOW_UP"}}]},
        {"text": "ROOT_DONE"},
        {"text": "NOTED"},
    ]},
    "worker": {"spawnedBy": "start-worker", "replies": [{"hang": {"text": "partial"}}, {"text": "FOLLOW_UP_OK"},
                                                         {"text": "MORE_OK"}]},
}


def test_parked_wait_keeps_the_run_until_a_person_sends_with_the_waiting_command(live_run, home, tmp_path, validator):
    """The `waiting` record's own command resumes the child: it runs its queue and the message, its
    notice opens a root turn, and the run ends by itself (exit 0) with nothing released."""
    script = transcript(tmp_path, "resumable", RESUMABLE)
    run = live_run("--transcript", script, "--home", home, "--parked", "wait")
    root, child = interrupt_the_hanging_child(run, home)
    waiting = run.wait_for(lambda r: r["type"] == "waiting", "the waiting record")

    command = [arg if arg != "MESSAGE" else "MORE" for arg in shlex.split(waiting["parked"][0]["send"])]
    sent = run_dsh(*command[1:])
    assert sent.returncode == 0, sent.stderr

    assert run.finish() == 0
    assert_contract(run.records, validator)
    final = run.records[-1]
    assert (final["output"], final["released"], final["violations"]) == ("NOTED", [], [])
    assert final["numTurns"] == 2 and final["subagents"][0]["numTurns"] == 3


def test_parked_release_ends_the_run_and_the_result_lists_the_released_child(live_run, home, tmp_path, validator):
    script = transcript(tmp_path, "released", {
        "root": {"replies": RESUMABLE["root"]["replies"][:3]},
        "worker": {"spawnedBy": "start-worker", "replies": [{"hang": {"text": "partial"}}]},
    })
    run = live_run("--transcript", script, "--home", home, "--parked", "release")
    root, child = interrupt_the_hanging_child(run, home)

    assert run.finish() == 0
    assert_contract(run.records, validator)
    assert "waiting" not in [r["type"] for r in run.records]
    assert run.records[-1]["released"] == [child]
    assert run.stderr.decode() == TEXTS["T-CLI-RELEASED"].format(ids=child) + "\n"


# -- result fields -----------------------------------------------------------------------------------

def test_a_failed_root_puts_code_and_message_in_the_result(home, tmp_path, validator):
    script = transcript(tmp_path, "root-error", {"root": {"replies": [{"error": {"code": "BOOM", "message": "it broke"}}]}})
    result = invoke("run", "--transcript", script, "--json", "--home", home)

    records = ndjson(result.stdout)
    assert_contract(records, validator)
    assert result.exit_code == 1
    assert (records[-1]["stopReason"], records[-1]["error"]) == ("error", {"code": "BOOM", "message": "it broke"})


def test_usage_is_summed_over_the_whole_tree_with_per_subagent_usage(home, tmp_path, validator):
    script = transcript(tmp_path, "usage-tree", {
        "root": {"replies": [{**spawn("c1"), "usage": {"inputTokens": 11, "outputTokens": 7}},
                             {"text": "STARTED", "usage": {"inputTokens": 13, "outputTokens": 2}},
                             {"text": "DONE", "usage": {"inputTokens": 9, "outputTokens": 12}}]},
        "w": {"spawnedBy": "c1", "replies": [{"text": "W", "usage": {"inputTokens": 11, "outputTokens": 7}}]},
    })
    result = invoke("run", "--transcript", script, "--json", "--home", home)

    assert result.exit_code == 0, result.stderr
    records = ndjson(result.stdout)
    assert_contract(records, validator)
    final = records[-1]
    assert final["usage"] == {"inputTokens": 44, "outputTokens": 28, "cacheReadTokens": 0}  # root alone: 33/21
    [worker] = final["subagents"]
    assert worker["usage"] == {"inputTokens": 11, "outputTokens": 7, "cacheReadTokens": 0}


def sse(*events: dict[str, Any]) -> bytes:
    return ("".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n").encode()


def test_retry_records_follow_the_providers_retries_and_init_holds_no_secret(llm, home, tmp_path, validator):
    """A 429 with `Retry-After: 0`, then an answer: one `retry` record (attempt 1, RATE_LIMITED, 429,
    0 ms) after its `llm/retry` event. Cache tokens reach the usage. The init record names only the
    base URL's host: no user, password, path or key."""
    answer = sse({"choices": [{"index": 0, "delta": {"content": "OK"}, "finish_reason": "stop"}]},
                 {"choices": [], "usage": {"prompt_tokens": 20, "completion_tokens": 2, "prompt_cache_hit_tokens": 16}})
    llm.post(f"{BASE}/v9/chat/completions").mock(side_effect=[
        httpx.Response(429, headers={"retry-after": "0"}, json={"error": {"message": "slow down"}}),
        httpx.Response(200, headers={"content-type": "text/event-stream"}, content=answer),
    ])
    overlay = write_yaml(tmp_path / "local.yaml", {
        "model": {"baseUrl": "https://user:hunter2@llm.example.test/v9"},
        "persistence": {"batchDelayMs": 0, "fsync": False},
    })
    result = invoke("run", "Say OK.", "--overlay", overlay, "--json", "--home", home, env={"DEEPSEEK_API_KEY": KEY})

    assert result.exit_code == 0, result.stderr
    records = ndjson(result.stdout)
    assert_contract(records, validator)
    assert records[0]["baseUrlHost"] == "llm.example.test" and records[0]["provider"] == "openai-compatible"
    assert KEY not in result.stdout and "hunter2" not in result.stdout
    [retry] = [r for r in records if r["type"] == "retry"]
    assert {k: retry[k] for k in ("attempt", "code", "status", "delayMs", "turn", "step")} == {
        "attempt": 1, "code": "RATE_LIMITED", "status": 429, "delayMs": 0, "turn": 1, "step": 1}
    position = records.index(retry)
    assert records[position - 1]["type"] == "event" and records[position - 1]["event"]["type"] == "llm/retry"
    assert records[-1]["usage"] == {"inputTokens": 20, "outputTokens": 2, "cacheReadTokens": 16}


@pytest.mark.parametrize(("url", "host"), [
    ("https://api.deepseek.com", "api.deepseek.com"),
    ("http://user:pw@localhost:11434/v1", "localhost:11434"),
    ("http://[::1]:8000/v1", "[::1]:8000"),
])
def test_base_url_host_keeps_only_host_and_port(url, host):
    assert base_url_host(url) == host


def test_the_schema_is_package_data_next_to_the_code():
    """`load_schema` reads through importlib.resources, so it works from a wheel as from a checkout;
    the file lives inside the `loader` package, which the wheel ships whole."""
    from importlib import resources

    from dsh import loader

    path = resources.files(loader).joinpath("schemas/run-ndjson.schema.json")
    assert path.is_file()
    assert load_schema()["$defs"]["result"]["properties"]["version"] == {"const": SCHEMA_VERSION}


def test_record_stream_holds_early_records_until_init_and_nothing_follows_the_result():
    from dsh.loader.ndjson import RecordStream, record

    out: list[dict[str, Any]] = []
    stream = RecordStream(out.append)
    stream.emit(record("event", n=1))
    stream.emit(record("event", n=2))
    assert out == []  # nothing before init
    stream.init(record("init"))
    stream.emit(record("event", n=3))
    stream.result(record("result"))
    stream.emit(record("event", n=4))  # a late event after the result is dropped
    assert [(r["type"], r.get("n")) for r in out] == [
        ("init", None), ("event", 1), ("event", 2), ("event", 3), ("result", None)]


def test_the_readme_examples_validate_against_the_schema(validator):
    """The README's example stream is the documentation of the contract: each line must be a valid
    record, one of each type, in the promised order."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme.split("## The `--json` contract", 1)[1]
    block = section.split("```json\n", 1)[1].split("```", 1)[0]
    records = [json.loads(line) for line in block.splitlines()]
    assert_contract(records, validator)
    assert [r["type"] for r in records] == ["init", "event", "lifecycle", "retry", "waiting", "result"]


def test_a_run_failed_by_a_violation_or_a_budget_names_it_in_the_result_error(home, tmp_path, validator):
    """The root completed, yet the run failed (exit 1): `error` says why, so a pipeline reading only
    the result record does not mistake it for a success."""
    extra = transcript(tmp_path, "one-too-many", {"root": {"replies": [{"text": "A"}, {"text": "B"}]}})
    violated = invoke("run", "--transcript", extra, "--json", "--home", home)
    records = ndjson(violated.stdout)
    assert_contract(records, validator)
    assert (violated.exit_code, records[-1]["stopReason"]) == (1, "completed")
    assert records[-1]["error"] == {"code": "REPLAY_UNCONSUMED", "message": "agent root consumed 1/2 replies"}

    spawner = transcript(tmp_path, "spawner", {
        "root": {"replies": [spawn("c1", "w1"), {"text": "STARTED"}, spawn("c2", "w2"), {"text": "CAPPED"}]},
        "w1": {"spawnedBy": "c1", "replies": [{"text": "W1"}]},
    })
    capped = invoke("run", "--transcript", spawner, "--json", "--home", home, "--max-children", "1")
    records = ndjson(capped.stdout)
    assert_contract(records, validator)
    assert capped.exit_code == 1
    assert records[-1]["error"] == {
        "code": "BUDGET_EXHAUSTED", "message": render("T-ERR-BUDGET", kind="children", limit=1)}
