"""The Temporal engine against the local one (issue 12 item 4): one test per transcript runs it on
both engines, keylessly, and compares the settlement facts — and, since the replay is deterministic
on both, the whole normalized flow."""

from __future__ import annotations

from pathlib import Path

from temporal_kit import both_engines, dev_server, settlement_facts


async def test_hello_gives_the_same_flow_on_both_engines(tmp_path: Path) -> None:
    async with dev_server() as client:
        local, temporal = await both_engines(client, "hello", tmp_path)
    assert temporal.result.violations == []
    assert temporal.result.exit_code == 0 and temporal.result.output == "Hello from dsh."
    assert settlement_facts(temporal.flow) == settlement_facts(local)
    assert temporal.flow == local


async def test_background_settlement_notice_reaches_the_root_once_as_on_the_local_engine(tmp_path: Path) -> None:
    async with dev_server() as client:
        local, temporal = await both_engines(client, "background-settlement", tmp_path)
    assert temporal.result.violations == []
    facts = settlement_facts(temporal.flow)
    assert facts == settlement_facts(local)
    [notice] = facts["notices"]
    assert notice == {"kind": "subagent-settled", "from": "S2", "to": "S1", "stopReason": "completed"}
    assert temporal.result.output == "PARENT_RECEIVED_CHILD_RESULT"
    assert temporal.flow == local
