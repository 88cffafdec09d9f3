"""`dsh run --engine temporal --json` streams what the local engine streams (issue 12 item 3).

Each shipped transcript the Temporal engine runs (test_temporal_engine.py's list) is run on both
engines through the run's own sinks (the records `dsh run --json` prints, result record included).
Every record of both streams validates against the shipped schema, and the streams agree as
`temporal_kit.comparable` defines: `init` and `result` (usage tree-wide and per subagent,
`numTurns`, `model`, output) ids and clocks aside, and per agent the same events and lifecycle
edges in the same order, texts included.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from temporal_kit import client, comparable, records_of, stream_plan  # noqa: F401  (client: the module's dev-server fixture)
from temporalio.client import Client
from test_temporal_engine import MANUAL, SHIPPED

from dsh.loader.ndjson import load_schema
from dsh.loader.testing.runner import plan_flow

pytestmark = pytest.mark.asyncio(loop_scope="module")

STREAMED = [name for name in SHIPPED if name not in MANUAL]


def assert_valid(records: list[dict[str, Any]]) -> None:
    validator = Draft202012Validator(load_schema())
    for index, rec in enumerate(records):
        errors = [e.message for e in validator.iter_errors(rec)]
        assert not errors, f"record {index} ({rec.get('type')}): {errors}"
    types = [r["type"] for r in records]
    assert types[0] == "init" and types.count("init") == 1
    assert types[-1] == "result" and types.count("result") == 1


@pytest.mark.parametrize("name", STREAMED)
async def test_both_engines_stream_the_same_records_per_agent(client: Client, name: str, tmp_path: Path) -> None:
    plan = stream_plan(name, tmp_path)
    local = await records_of(plan, tmp_path / "local")
    temporal = await records_of(plan, tmp_path / "temporal", client)
    assert_valid(local)
    assert_valid(temporal)
    assert temporal[-1]["violations"] == []
    assert comparable(temporal) == comparable(local)


async def test_the_result_counts_usage_tree_wide_and_per_subagent(client: Client, tmp_path: Path) -> None:
    records = await records_of(plan_flow("four-children-one-step"), tmp_path, client)
    result = records[-1]
    assert result["violations"] == []
    children = result["subagents"]
    assert len(children) == 4 and {c["epochs"] for c in children} == {1}
    assert all(c["usage"]["inputTokens"] > 0 and c["numTurns"] == 1 for c in children)
    events = [r["event"] for r in records if r["type"] == "event" and r["event"]["type"] == "assistant/message"]
    assert result["usage"]["outputTokens"] == sum(e["data"]["usage"]["outputTokens"] for e in events)
    root_turns = [r for r in records if r["type"] == "event" and r["sessionId"] == result["rootSessionId"]
                  and r["event"]["type"] == "turn/start"]
    assert result["numTurns"] == len(root_turns) >= 1
    assert (result["model"], result["stopReason"]) == ("replay", "completed")
    ends = [r for r in records if r["type"] == "lifecycle" and r["name"] == "subagent/end"]
    assert sorted(r["sessionId"] for r in ends) == sorted(c["sessionId"] for c in children)
