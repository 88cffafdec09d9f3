"""An interrupt or a message the server refuses for its limits is sent again, never taken for a
closed workflow (loader/engines/control.py `admitted`).

A run past the server's cap of updates (`history.maxTotalUpdates`) refuses every further update
with FAILED_PRECONDITION, the status that also meant "not running" to the control calls: `dsh
interrupt` answered `accepted` for an interrupt the child never got (a closed child's interrupt is
the accepted no-op), and `dsh send` said the parent was not live. A stand-in for the child's
workflow (a real run on a dev server whose cap is `CAP`) takes `CAP` updates; the interrupt is
refused until the run continues as new, which the test asks for only once the server has refused
the interrupt (a client interceptor sees it), so the call succeeds only by being sent again.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from refusals_kit import Refusals
from temporal_kit import dev_server
from temporalio import workflow
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from dsh.loader.engines import control
from dsh.loader.engines.wire import Interrupt, MessageChild, child_workflow_id

pytestmark = pytest.mark.asyncio(loop_scope="module")

CAP = 2
BACKSTOP = 60.0


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def capped() -> AsyncIterator[Client]:
    async with dev_server("--dynamic-config-value", f"history.maxTotalUpdates={CAP}") as c:
        yield c


@workflow.defn(name="dsh-test-capped-child")
class CappedChild:
    """Answers `interrupt` and `message_child` as an agent's workflow does; `fill` spends updates."""

    def __init__(self) -> None:
        self.move = False
        self.answered: list[str] = []

    @workflow.run
    async def run(self, runs: int) -> None:
        await workflow.wait_condition(lambda: self.move)
        workflow.continue_as_new(runs + 1)

    @workflow.update
    def fill(self) -> None:
        self.answered.append("fill")

    @workflow.update
    def interrupt(self, request: dict[str, Any]) -> dict[str, Any]:
        self.answered.append("interrupt")
        return {"status": "interrupted"}

    @workflow.update
    def message_child(self, request: dict[str, Any]) -> dict[str, Any]:
        self.answered.append("message")
        return {"status": "delivered"}

    @workflow.signal
    def continue_now(self) -> None:
        self.move = True

    @workflow.query
    def seen(self) -> list[str]:
        return self.answered


async def spent_child(capped: Client, queue: str, root: str, child: str) -> Any:
    """The child's stand-in, its run's `CAP` updates taken."""
    handle = await capped.start_workflow(CappedChild.run, 0, id=child_workflow_id(root, child), task_queue=queue)
    for _ in range(CAP):
        await handle.execute_update(CappedChild.fill)
    return handle


async def test_an_interrupt_refused_for_the_update_cap_is_sent_again_not_answered_accepted(capped: Client) -> None:
    refusals = Refusals(watch=lambda _, exc: exc.status == RPCStatusCode.FAILED_PRECONDITION)
    seeing = await Client.connect(capped.service_client.config.target_host, namespace=capped.namespace,
                                  interceptors=[refusals])
    queue, root, child = f"dsh-test-{uuid.uuid4().hex[:8]}", f"session-{uuid.uuid4()}", f"session-{uuid.uuid4()}"
    async with Worker(capped, task_queue=queue, workflows=[CappedChild], workflow_runner=UnsandboxedWorkflowRunner()):
        handle = await spent_child(capped, queue, root, child)
        call = asyncio.create_task(control.interrupt_workflow(seeing, root, child, Interrupt(kind="user", caller=root)))
        await asyncio.wait_for(refusals.seen.wait(), BACKSTOP)
        assert not call.done()  # refused, and waiting to send it again (not "accepted")
        await handle.signal(CappedChild.continue_now)  # the new run admits updates again
        answer = await asyncio.wait_for(call, BACKSTOP)
        assert answer is not None and answer.status == "interrupted"
        assert await capped.get_workflow_handle(handle.id).query(CappedChild.seen) == ["interrupt"]  # the new run's
    assert refusals.refused["interrupt"] >= 1


async def test_a_message_still_refused_after_the_wait_is_the_servers_refusal_not_a_parent_not_live(
    capped: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(control, "ADMIT_WAIT", 0.5)
    queue, root, parent = f"dsh-test-{uuid.uuid4().hex[:8]}", f"session-{uuid.uuid4()}", f"session-{uuid.uuid4()}"
    async with Worker(capped, task_queue=queue, workflows=[CappedChild], workflow_runner=UnsandboxedWorkflowRunner()):
        handle = await spent_child(capped, queue, root, parent)
        request = MessageChild(child_id="session-x", message={"id": "m1", "role": "user", "content": []})
        with pytest.raises(RPCError) as raised:
            await asyncio.wait_for(control.message_workflow(capped, root, parent, request), BACKSTOP)
        assert raised.value.status == RPCStatusCode.FAILED_PRECONDITION
        await handle.signal(CappedChild.continue_now)
        answer = await asyncio.wait_for(control.message_workflow(capped, root, parent, request), BACKSTOP)
        assert answer.status == "delivered"
