"""Payloads over Temporal's 2 MB limit (issue 12 item 2; loader/engines/README.md "Payloads by
reference"): a report and the root's output travel through workflow payloads. A report past
`NOTICE_LIMIT` arrives with its size and where to read it (the child's log keeps it whole); the
root's output is read from the root's log by the client, so `dsh run --json` prints it whole.
Before, both failed the run carrying them (PayloadsTooLarge, TMPRL1103).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from temporal_kit import client, run_temporal, write_transcript  # noqa: F401  (client: the module's dev-server fixture)
from temporalio.client import Client

from dsh.loader.engines.settle import NOTICE_LIMIT
from dsh.loader.session import SessionStore
from dsh.loader.testing.runner import plan_flow

pytestmark = pytest.mark.asyncio(loop_scope="module")

BACKSTOP = 120.0
BIG = "y" * (3 * 1024 * 1024)


async def test_a_root_output_past_the_payload_limit_is_read_whole_from_the_roots_log(
    client: Client, tmp_path: Path
) -> None:
    path = write_transcript(tmp_path, {"name": "big-output", "agents": {"root": {"replies": [{"text": BIG}]}}})
    run = await asyncio.wait_for(run_temporal(client, plan_flow(path), tmp_path / "home"), BACKSTOP)
    result = run.result
    assert (result.stop_reason, result.violations, result.exit_code) == ("completed", [], 0)
    assert result.output == BIG
    assert result.to_json()["output"] == BIG  # the `--json` result record


async def test_a_report_past_the_payload_limit_arrives_with_its_size_and_where_to_read_it(
    client: Client, tmp_path: Path
) -> None:
    path = write_transcript(tmp_path, {
        "name": "big-report", "overlays": ["quiet-reports"],
        "fences": [{"hold": {"agent": "*children", "until": {"turnEnded": {"agent": "root", "turn": 1}}}}],
        "agents": {
            "root": {"replies": [{"toolCalls": [{"id": "c1", "name": "subagent", "arguments": {
                "label": "w", "prompt": "Report big."}}]}, {"text": "STARTED"}, {"text": "NOTED"}]},
            "w": {"spawnedBy": "c1", "replies": [
                {"toolCalls": [{"id": "r1", "name": "report", "arguments": {"output": BIG}}]}, {"text": "Reported."}]}}})
    run = await asyncio.wait_for(run_temporal(client, plan_flow(path), tmp_path / "home"), BACKSTOP)
    result = run.result
    assert (result.stop_reason, result.output, result.violations, result.exit_code) == ("completed", "NOTED", [], 0)
    store = SessionStore(tmp_path / "home")
    [child] = [s["sessionId"] for s in result.subagents]
    reports = [m for e in store.read(result.root_session_id).events if e["type"] == "agent/inbox/spliced"
               for m in e["data"].get("inserted") or [] if m["source"]["kind"] == "subagent-report"]
    [report] = reports  # it arrived, once
    text = "".join(block["text"] for block in report["content"])
    assert f"dsh sessions show {child}" in text and BIG not in text and len(text) < NOTICE_LIMIT
    [call] = [e["data"] for e in store.read(child).events if e["type"] == "tool/call" and e["data"]["name"] == "report"]
    assert json.loads(call["arguments"])["output"] == BIG  # the child's log keeps the report whole


NOTICE_TEXT = 450 * 1024  # each notice under NOTICE_LIMIT; five pass 2 MB together


async def test_five_large_notices_pending_at_once_reach_one_turn_in_pages_under_the_payload_limit(
    client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Five children each end with a ~450 KiB reply; the root's first turn returns only once all
    five child runs have closed (each signalled its notice before closing), so its second turn
    starts with all five pending. By value that turn's input passed 2 MB and the root's workflow
    task failed on it, retried until the backstop; now each payload carries deliveries up to
    `PAGE_BYTES` and the turn fetches the rest by index before it sends any, so the notices enter
    the turn's steps exactly as five small ones do (the first wakes it, the rest steer into its
    next step)."""
    from dsh.loader.engines import worker
    from dsh.loader.engines.wire import TurnInput, TurnResult

    real = worker.run_turn

    async def ordered(spec: TurnInput, *args: Any, **kwargs: Any) -> TurnResult:
        result = await real(spec, *args, **kwargs)
        if spec.agent.parent_id is None and spec.seq == 0:
            store = SessionStore(Path(spec.agent.run.home))
            children = [e["data"]["value"]["sessionId"] for e in store.read(spec.agent.session_id).events
                        if e["type"] == "tool/result" and (e["data"].get("value") or {}).get("kind") == "continuable"]
            for child in children:
                await client.get_workflow_handle(f"{spec.agent.session_id}/{child}").result()
        return result

    monkeypatch.setattr(worker, "run_turn", ordered)

    async def steps_of_notices(size: int, home: Path) -> list[tuple[int, int, int]]:
        calls = [{"id": f"c{i}", "name": "subagent", "arguments": {"label": f"w{i}", "prompt": "Reply."}} for i in range(5)]
        home.parent.mkdir(parents=True)
        path = write_transcript(home.parent, {
            "name": f"notices-{size}",
            "agents": {"root": {"replies": [{"toolCalls": calls}, {"text": "STARTED"}, {"text": "NOTED"}, {"text": "ALL"}]},
                       **{f"w{i}": {"spawnedBy": f"c{i}", "replies": [{"text": str(i) * size}]} for i in range(5)}}})
        run = await asyncio.wait_for(run_temporal(client, plan_flow(path), home), BACKSTOP)
        result = run.result
        assert (result.stop_reason, result.output, result.violations, result.exit_code) == ("completed", "ALL", [], 0)
        events = SessionStore(home).read(result.root_session_id).events
        entered: list[tuple[int, int, int]] = []
        where = (0, 0)
        for e in events:
            if e["type"] == "step/start":
                where = (e["data"]["turn"], e["data"]["step"])
            elif e["type"] == "user/message" and e["data"]["source"]["kind"] == "subagent-settled":
                assert size < 100 or len(json.dumps(e["data"])) > size  # whole
                entered.append((*where, 1))
        return entered

    big = await steps_of_notices(NOTICE_TEXT, tmp_path / "big" / "home")
    small = await steps_of_notices(10, tmp_path / "small" / "home")
    assert big == small and len(big) == 5, (big, small)
