"""`dsh run --engine temporal` without the workers' `--home` (issue 12 "Not yet" item 1;
loader/engines/README.md "The stream over the server"): the stream and the result come from the
server, in pages a reader workflow's activity reads on the workers' home.

- a client whose home is empty and not the workers' gets every shipped transcript's whole stream
  and result, the local engine's as `temporal_kit.comparable` defines, and its home stays empty;
- the two paths print the same NDJSON byte for byte: a finished tree read from the home and from
  the server (pages cut small, so passes are cut and long lines go in pieces) gives the same
  records, ledgers and logs; the live stream from the server holds, per session, exactly those;
- the result's parts read from the logs come over the server too: REPLAY_UNCONSUMED and a root
  output past the payload limit (a 3 MB line, in pieces).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporal_kit import backstopped, client, comparable, records_of, stream_plan, write_transcript  # noqa: F401  (client: the module's dev-server fixture)
from temporalio.client import Client
from temporalio.worker import Replayer
from test_temporal_engine import MANUAL, SHIPPED

from dsh.loader.config import TemporalConfig
from dsh.loader.engines.client import run_tree_temporal
from dsh.loader.engines.pages import PASS_END, Page
from dsh.loader.engines.projection import TreeProjection, TreeTail
from dsh.loader.engines.reader import StreamReader
from dsh.loader.engines.stream import ServerFeed, StreamMode
from dsh.loader.engines.worker import make_worker
from dsh.loader.headless import RunRequest, RunResult
from dsh.loader.ndjson import RecordStream
from dsh.loader.sinks import RunSinks
from dsh.loader.testing.runner import FlowPlan, plan_flow

pytestmark = pytest.mark.asyncio(loop_scope="module")

STREAMED = [name for name in SHIPPED if name not in MANUAL]
BACKSTOP = 120.0
BIG = "z" * (3 * 1024 * 1024)
READER_HISTORY = Path(__file__).parent / "histories" / "stream-page.0.json"


async def run_elsewhere(client: Client, plan: FlowPlan, workers: Path, home: Path, *,
                        stream: StreamMode = "auto") -> tuple[list[dict[str, Any]], RunResult]:
    """A run whose worker keeps the trees under `workers` while the client's `--home` is `home`."""
    records: list[dict[str, Any]] = []
    sinks = RunSinks(records=RecordStream(records.append))
    request = RunRequest(home=home, config=backstopped(plan.config), transcript=plan.script, fences_allowed=True,
                         sinks=sinks)
    queue = f"dsh-test-{uuid.uuid4().hex[:8]}"
    async with make_worker(client, queue, home=workers):
        result = await asyncio.wait_for(
            run_tree_temporal(request, TemporalConfig(task_queue=queue), client=client, stream=stream), BACKSTOP)
    assert sinks.records is not None
    sinks.records.result(result.to_json())
    return records, result


def opened(records: list[dict[str, Any]]) -> RecordStream:
    stream = RecordStream(records.append)
    stream.init({"type": "init"})  # a stream buffers until `init`
    return stream


def lines(records: list[dict[str, Any]]) -> list[str]:
    return [json.dumps(r) for r in records]


async def both_reads(client: Client, workers: Path, root_id: str, queue: str) -> tuple[Any, Any]:
    """A finished tree read twice from the start: from the home, in one pass; from the server, in
    pages of at most 2,000 bytes and 3 lines, so that passes are cut and the longest lines (model
    requests) go in pieces. Each: its records, ledgers and logs."""
    home_records: list[dict[str, Any]] = []
    tail = TreeTail(workers, root_id, RunSinks(records=opened(home_records)), keep=True)
    tail.poll()
    server_records: list[dict[str, Any]] = []
    projection = TreeProjection(root_id, RunSinks(records=opened(server_records)), keep=True)
    feed = ServerFeed(client, queue, workers / "elsewhere", projection, max_bytes=2000, max_lines=3)
    in_pieces: list[str] = []  # pieces that end inside a line

    def fed(page: Page) -> None:
        in_pieces.extend(data for index, data in page.pieces
                         if index != PASS_END and not base64.b64decode(data).endswith(b"\n"))
        ServerFeed.feed(feed, page)

    feed.feed = fed  # type: ignore[method-assign]

    async def one_home() -> list[str]:
        # The tree is on one home, read on the shared queue ([] homes). Asked, the closed root
        # (its worker gone) would leave the `homes` query unanswered until HOMES_RPC (10 s).
        return []

    feed.homes = one_home  # type: ignore[method-assign]
    async with make_worker(client, queue, home=workers):
        await feed.drain()
    assert feed.pages > 1 and in_pieces  # the pass was cut into pages, a long line into pieces

    def seen(tree: TreeProjection, records: list[dict[str, Any]]) -> dict[str, Any]:
        raw = {sid: bytes(data) for sid, data in (tree.raw or {}).items()}
        return {"ndjson": lines(records), "usage": tree.total_usage(), "subagents": tree.subagents(),
                "turns": tree.root_turns(), "raw": raw}

    return seen(tail, home_records), seen(projection, server_records)


@pytest.mark.parametrize("name", STREAMED)
async def test_a_client_with_another_empty_home_gets_the_whole_stream_from_the_server(
    client: Client, name: str, tmp_path: Path
) -> None:
    plan = stream_plan(name, tmp_path)
    local = await records_of(plan, tmp_path / "local")
    workers, home = tmp_path / "workers", tmp_path / "client"
    home.mkdir()
    streamed, result = await run_elsewhere(client, plan, workers, home)
    assert result.violations == [] and result.exit_code == 0
    assert comparable(streamed) == comparable(local)
    assert list(home.iterdir()) == []  # nothing read from (or written under) the client's home
    # Both paths over the finished tree: the same bytes in, the same NDJSON out.
    from_home, from_server = await both_reads(client, workers, result.root_session_id, f"dsh-test-{uuid.uuid4().hex[:8]}")
    assert from_server == from_home
    # The live stream from the server holds per session exactly the records of the home's read
    # (its lifecycle edges apart: an end edge comes with the parent's log, in the passes' order).
    def per_session(records: list[str]) -> dict[tuple[str, bool], list[str]]:
        out: dict[tuple[str, bool], list[str]] = {}
        for line in records:
            rec = json.loads(line)
            if rec["type"] in ("event", "lifecycle", "retry"):
                out.setdefault((rec["sessionId"], rec["type"] == "lifecycle"), []).append(line)
        return out
    assert per_session(lines(streamed)) == per_session(from_home["ndjson"])
    assert streamed[-1]["usage"] == from_home["usage"] and streamed[-1]["numTurns"] == from_home["turns"]


async def test_a_forced_server_stream_on_a_shared_home_prints_what_the_home_tail_prints(
    client: Client, tmp_path: Path
) -> None:
    plan = plan_flow("four-children-one-step")
    shared, result = await run_elsewhere(client, plan, tmp_path / "a", tmp_path / "a", stream="server")
    tailed, _ = await run_elsewhere(client, plan, tmp_path / "b", tmp_path / "b", stream="home")
    assert comparable(shared) == comparable(tailed)
    assert result.subagents and all(c["numTurns"] == 1 for c in result.subagents)
    # A page's reader workflow replays; its committed history is test_replay.py's `stream-page.0`
    # (`DSH_RECORD_HISTORIES=1 pytest -n 0 -k forced_server tests/temporal/test_server_stream.py`).
    readers = [w.id async for w in client.list_workflows(f"WorkflowId STARTS_WITH '{result.root_session_id}/stream/'")]
    assert readers
    history = await client.get_workflow_handle(sorted(readers)[0]).fetch_history()
    assert (await Replayer(workflows=[StreamReader]).replay_workflow(history)).replay_failure is None
    # And a page read on the worker's home queue (README "Homes"), once the root had told its home.
    for reader in sorted(readers)[1:]:
        paged = await client.get_workflow_handle(reader).fetch_history()
        if any("@" in e.activity_task_scheduled_event_attributes.task_queue.name for e in paged.events
               if e.HasField("activity_task_scheduled_event_attributes")):
            assert (await Replayer(workflows=[StreamReader]).replay_workflow(paged)).replay_failure is None
            history = paged
            break
    if os.environ.get("DSH_RECORD_HISTORIES"):
        READER_HISTORY.write_text(json.dumps({"workflowId": history.workflow_id, "history": history.to_json_dict()},
                                             indent=1) + "\n")


async def test_replay_unconsumed_is_checked_on_the_logs_the_server_carried(client: Client, tmp_path: Path) -> None:
    path = write_transcript(tmp_path, {"name": "left-over", "agents": {"root": {"replies": [{"text": "DONE"}, {"text": "NEVER"}]}}})
    home = tmp_path / "client"
    home.mkdir()
    records, result = await run_elsewhere(client, plan_flow(path), tmp_path / "workers", home)
    assert [v["code"] for v in result.violations] == ["REPLAY_UNCONSUMED"]
    assert (result.output, result.exit_code) == ("DONE", 1)
    local = await records_of(plan_flow(path), tmp_path / "local")
    assert [v["code"] for v in local[-1]["violations"]] == ["REPLAY_UNCONSUMED"]
    assert records[-1]["violations"] == local[-1]["violations"]


async def test_a_root_output_past_the_payload_limit_comes_whole_over_the_server(client: Client, tmp_path: Path) -> None:
    path = write_transcript(tmp_path, {"name": "big-output", "agents": {"root": {"replies": [{"text": BIG}]}}})
    home = tmp_path / "client"
    home.mkdir()
    records, result = await run_elsewhere(client, plan_flow(path), tmp_path / "workers", home)
    assert (result.stop_reason, result.violations, result.exit_code) == ("completed", [], 0)
    assert result.output == BIG
    [message] = [r["event"] for r in records if r["type"] == "event" and r["event"]["type"] == "assistant/message"]
    # The 3 MB line, from pieces of pages; the output by reference, read from the same bytes.
    assert "".join(b.get("text", "") for b in message["data"]["message"]["content"]) == BIG
    assert list(home.iterdir()) == []
