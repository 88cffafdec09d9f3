"""Run-wide budgets (issue 15 finding 9): a runaway model is stopped by children, requests or tokens
per run, the model sees a typed `BUDGET_EXHAUSTED`, the run settles, exits 1 and says so.

Keyless replays through the CLI in-process (`CliRunner`); the limits come from the command line
or from a config overlay, so both layers are exercised.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cli_kit import log_events, spawn, transcript, write_yaml

from dsh.loader.texts import render


def _result(stdout: str) -> dict[str, Any]:
    records = [json.loads(line) for line in stdout.splitlines()]
    [result] = [r for r in records if r["type"] == "result"]
    return result


def _tool_errors(home: Path, session_id: str) -> list[str]:
    return [b["error"]["code"] for e in log_events(home, session_id) if e["type"] == "tool/result"
            for b in [e["data"]] if b.get("error")]


def _respawner(tmp_path: Path) -> Path:
    """A root that answers every notice by spawning again: three spawns scripted, two children."""
    return transcript(tmp_path, "respawner", {
        "root": {"replies": [spawn("c1", "w1"), {"text": "STARTED 1"},
                             spawn("c2", "w2"), {"text": "STARTED 2"},
                             spawn("c3", "w3"), {"text": "BUDGET HIT"}]},
        "w1": {"spawnedBy": "c1", "replies": [{"text": "W1"}]},
        "w2": {"spawnedBy": "c2", "replies": [{"text": "W2"}]},
    })


def test_children_per_run_stop_a_model_that_spawns_on_every_notice(dsh, home, tmp_path):
    result = dsh("run", "--transcript", _respawner(tmp_path), "--max-children", "2", "--json", "--home", home)

    assert result.exit_code == 1, result.stderr
    record = _result(result.stdout)
    assert (record["stopReason"], record["exitCode"], record["output"]) == ("completed", 1, "BUDGET HIT")
    assert record["violations"] == []
    assert record["budget"]["exhausted"] == "children"
    assert (record["budget"]["children"], record["budget"]["maxChildren"]) == (2, 2)
    assert len(record["subagents"]) == 2  # the third spawn created nothing
    assert render("T-CLI-BUDGET", kind="children") in result.stderr
    assert _tool_errors(home, record["rootSessionId"]) == ["BUDGET_EXHAUSTED"]


def test_children_limit_from_config_and_the_defaults_let_the_run_complete(dsh, home, tmp_path):
    overlay = write_yaml(tmp_path / "tight.yaml", {"limits": {"maxChildren": 2}})
    capped = dsh("run", "--transcript", _respawner(tmp_path), "--overlay", overlay, "--json", "--home", home)
    assert capped.exit_code == 1, capped.stderr
    assert _result(capped.stdout)["budget"]["exhausted"] == "children"
    assert len(_result(capped.stdout)["subagents"]) == 2

    # Under the defaults (200 children) the same script spawns its third child, which has no
    # script: the point is only that nothing was refused for budget.
    free = dsh("run", "--transcript", _respawner(tmp_path), "--json", "--home", home / "free")
    assert _result(free.stdout)["budget"]["exhausted"] is None
    assert _result(free.stdout)["budget"]["maxChildren"] == 200
    assert len(_result(free.stdout)["subagents"]) == 3


def test_requests_per_run_end_the_turn_with_a_typed_error(dsh, home, tmp_path):
    script = transcript(tmp_path, "requests", {
        "root": {"replies": [spawn("c1", "w1"), {"text": "STARTED"}]},
        "w1": {"spawnedBy": "c1", "replies": [{"text": "W1"}]},
    })
    result = dsh("run", "--transcript", script, "--max-requests", "3", "--json", "--home", home)

    assert result.exit_code == 1, result.stderr
    record = _result(result.stdout)
    assert record["stopReason"] == "error" and record["violations"] == []
    assert record["budget"]["exhausted"] == "requests"
    assert (record["budget"]["requests"], record["budget"]["maxRequests"]) == (3, 3)
    ends = [e["data"]["reason"] for e in log_events(home, record["rootSessionId"]) if e["type"] == "turn/end"]
    assert ends[-1]["kind"] == "error" and ends[-1]["error"]["code"] == "BUDGET_EXHAUSTED"


def test_tokens_per_run_refuse_the_next_request(dsh, home, tmp_path):
    script = transcript(tmp_path, "tokens", {"root": {"replies": [
        {"toolCalls": [{"id": "l1", "name": "list_agents", "arguments": {}}],
         "usage": {"inputTokens": 60, "outputTokens": 50}},
    ]}})
    result = dsh("run", "--transcript", script, "--max-tokens", "100", "--json", "--home", home)

    assert result.exit_code == 1, result.stderr
    record = _result(result.stdout)
    assert record["stopReason"] == "error" and record["violations"] == []
    assert record["budget"]["exhausted"] == "tokens"
    assert (record["budget"]["tokens"], record["budget"]["requests"]) == (110, 1)
