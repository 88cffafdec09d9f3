"""The run result's issue-16 fields, through `run_tree`: `durationMs` from an injectable clock (so a
test, or a snapshot of a result, never depends on the wall clock), `numTurns` and `model`."""

from __future__ import annotations

import json
from pathlib import Path

from dsh.loader.config import Config
from dsh.loader.headless import RunRequest, run_tree
from dsh.loader.models import ReplayProvider
from dsh.loader.transcripts import load_transcript

SCRIPT = {"version": 1, "name": "two-turns", "task": "go", "agents": {"root": {"replies": [{"text": "ONE"}]}}}


async def test_duration_comes_from_the_injected_clock_and_turns_are_counted(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text(json.dumps(SCRIPT))
    ticks = iter([100.0, 100.25])
    request = RunRequest(
        home=tmp_path / "home",
        config=Config.model_validate({"persistence": {"batchDelayMs": 0, "fsync": False}}),
        task="go", provider=ReplayProvider(load_transcript(path)), clock=lambda: next(ticks),
    )
    result = await run_tree(request)

    assert result.output == "ONE"
    record = result.to_json()
    assert (record["durationMs"], record["numTurns"], record["model"]) == (250, 1, "deepseek-chat")
    assert record["version"] == 1 and record["error"] is None
