"""The children an agent started, read from its workflow's runs (loader/engines/README.md "Large
payloads"). A run carries only its resident children's refs into the run it continues as, and an
epoch is a new run that never started its earlier epochs' children, so every run answers for the
children it started itself: `workflow_children` asks each one (query `children`, paged), the
earliest first. A closed run answers by replaying its history on a worker, so a listing costs one
replay per closed run (and per CHILDREN_PAGE children it started); only listings ask.
"""

from __future__ import annotations

import asyncio

from temporalio.client import Client, WorkflowExecutionStatus, WorkflowQueryFailedError
from temporalio.service import RPCError

from dsh.loader.engines.wire import CHILDREN_PAGE, ChildRef, agent_workflow_id
from dsh.loader.engines.workflow import AgentWorkflow

__all__ = ["workflow_children"]


async def workflow_children(client: Client, root_id: str, session_id: str) -> list[ChildRef]:
    """The children an agent started or resumed in any run of any of its epochs, the first started
    first; none for an agent with no workflow of its own (a one-shot child, an unknown id) or one
    that cannot answer."""
    workflow_id = agent_workflow_id(root_id, session_id)
    try:  # the latest run's id (no replay): the head of the current epoch's chain
        latest = (await client.get_workflow_handle(workflow_id).describe()).run_id
    except RPCError:
        return []
    heads = [latest, *(run_id for run_id in await _earlier_epochs(client, workflow_id) if run_id != latest)]
    runs = [run_id for head in reversed(heads) for run_id in await _chain(client, workflow_id, head)]
    found: dict[str, ChildRef] = {}
    for refs in await asyncio.gather(*(_children_of(client, workflow_id, run_id) for run_id in runs)):
        for ref in refs:
            found.setdefault(ref.child_id, ref)
    return list(found.values())


async def _chain(client: Client, workflow_id: str, last: str) -> list[str]:
    """The runs continued as new into `last`, the first first: each run's first event names the
    run it continues (exact, where a visibility listing may not show a run that just started)."""
    runs = [last]
    while True:
        handle = client.get_workflow_handle(workflow_id, run_id=runs[0])
        previous = ""
        try:
            async for event in handle.fetch_history_events(page_size=1):
                previous = event.workflow_execution_started_event_attributes.continued_execution_run_id
                break
        except RPCError:
            return runs  # past the retention period: the runs from here on answer
        if not previous:
            return runs
        runs.insert(0, previous)


async def _children_of(client: Client, workflow_id: str, run_id: str) -> list[ChildRef]:
    handle = client.get_workflow_handle_for(AgentWorkflow.run, workflow_id, run_id=run_id)
    refs: list[ChildRef] = []
    try:
        while True:
            page = await handle.query(AgentWorkflow.children, len(refs))
            refs += page
            if len(page) < CHILDREN_PAGE:
                return refs
    except (RPCError, WorkflowQueryFailedError):
        return refs


async def _earlier_epochs(client: Client, workflow_id: str) -> list[str]:
    """The run ids of the workflow's closed epochs, newest first, by a visibility listing: each
    epoch's last run (the head of its chain of runs continued as new)."""
    closed: list[tuple[float, str]] = []
    try:
        async for w in client.list_workflows(f'WorkflowId = "{workflow_id}"'):
            if w.status not in (None, WorkflowExecutionStatus.RUNNING, WorkflowExecutionStatus.CONTINUED_AS_NEW):
                closed.append((w.start_time.timestamp(), w.run_id))
    except RPCError:
        return []
    return [run_id for _, run_id in sorted(closed, reverse=True)]
