"""A child signals its notice only when the run that started it is gone (QUIET_SETTLE_PATCH;
loader/engines/README.md "Continue-as-new").

The notice of a child's epoch reaches its parent as the child run's result, but only the parent's
run that started it receives that result: once the parent continues as new, the result goes nowhere.
So every child also signalled its notice (`settled`) to the parent's workflow id: one more signal,
three history events and two workflow tasks per child (`tcan`'s +23% worker and server CPU at
N=300, benchmarks/README.md). Now the parent tells each child it holds a handle to as it continues
as new (`parent_moved`), and only a told (or released) child signals:
- a tree whose parent never continues as new: no child signals, and the notice enters once, as on
  the local engine;
- the root continuing as new with children resident (test_root_continue.py's chain): a child
  signals exactly when it was told, each notice enters once, in the local engine's order.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from temporal_kit import both_engines, client, settlement_facts  # noqa: F401  (the module's client)
from temporalio.client import Client
from test_root_continue import BACKSTOP, CHAIN, capped, chain, root_notices  # noqa: F401  (its capped server)
from test_tree_budget import both

pytestmark = pytest.mark.asyncio(loop_scope="module")


async def signals(client: Client, workflow_id: str) -> tuple[list[str], list[str]]:
    """The signals every run of `workflow_id` sent to other workflows, and those it received."""
    sent: list[str] = []
    received: list[str] = []
    run_id: str | None = None
    while True:
        history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        for e in history.events:
            if e.HasField("signal_external_workflow_execution_initiated_event_attributes"):
                sent.append(e.signal_external_workflow_execution_initiated_event_attributes.signal_name)
            elif e.HasField("workflow_execution_signaled_event_attributes"):
                received.append(e.workflow_execution_signaled_event_attributes.signal_name)
        run_id = history.events[0].workflow_execution_started_event_attributes.continued_execution_run_id or None
        if run_id is None:
            return sent, received


async def test_a_child_whose_starting_run_is_current_returns_its_notice_and_signals_nothing(
    client: Client, tmp_path: Path  # noqa: F811
) -> None:
    local, temporal = await both_engines(client, "background-settlement", tmp_path)
    assert settlement_facts(temporal.flow) == settlement_facts(local)
    root = temporal.result.root_session_id
    [child] = [s["sessionId"] for s in temporal.result.subagents]
    child_sent, _ = await signals(client, f"{root}/{child}")
    _, root_received = await signals(client, root)
    assert "settled" not in child_sent and "settled" not in root_received
    assert root_notices(tmp_path / "temporal", root) == [child]  # entered once, from the child's result


async def test_the_root_continuing_as_new_tells_its_children_and_only_they_signal(
    capped: Client, tmp_path: Path
) -> None:
    runs = await asyncio.wait_for(both(capped, tmp_path, chain(CHAIN), {}, temporal={"continue_as_new_updates": 10}),
                                  BACKSTOP)
    (local, local_flow), (remote, remote_flow) = runs
    assert (remote.stop_reason, remote.output, remote.violations) == ("completed", f"NOTED{CHAIN}", [])
    assert settlement_facts(remote_flow) == settlement_facts(local_flow)
    root = remote.root_session_id
    told, signalled = [], []
    for s in remote.subagents:
        sent, received = await signals(capped, f"{root}/{s['sessionId']}")
        told.append("parent_moved" in received)
        signalled.append(sent.count("settled"))
    # A child signals its notice exactly when the run that started it told it that it moved on.
    assert signalled == [int(t) for t in told]
    assert any(told), told  # the root continued as new with children it had started resident
    root_sent, root_received = await signals(capped, root)
    assert root_sent.count("parent_moved") == sum(told)
    assert root_received.count("settled") == sum(signalled)
    order = {s["sessionId"]: s["label"] for s in remote.subagents}
    assert [order[s] for s in root_notices(tmp_path / "temporal", root)] == [f"w{i}" for i in range(1, CHAIN + 1)]
