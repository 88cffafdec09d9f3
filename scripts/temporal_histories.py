"""Record the workflow histories tests/temporal/test_replay.py replays (issue 12 item 4).

Runs each transcript below on a fresh dev server (the venv's `temporal` binary) and writes every
workflow's history of the tree — the root and each child run — to tests/temporal/histories/
<transcript>.<n>.json, and each turn's own workflow (`temporal.turnWorkflows`) to
<transcript>.turn<k>.json. Rerun after a deliberate change to workflow code, old histories replayed first
(keep them: rename them `v1-*`, `v2-*`, so runs started before the change stay checked); a change that
makes the committed histories fail to replay is a non-deterministic change and breaks running trees.

    python scripts/temporal_histories.py
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path

from temporalio.client import WorkflowHistory

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "temporal"))

# Every shipped transcript (`transcripts/`) under today's defaults (`temporal.turnWorkflows: root`),
# but interrupt-demo, which waits for a user's `dsh interrupt` (its fenced variant's histories are
# test_temporal_control's run; not recorded here).
TRANSCRIPTS = ["hello", "background-settlement", "report-then-settle", "interrupt-parked-resume",
               "followups-checkpoint-failure", "child-max-tokens", "four-children-one-step", "notice-new-turn"]
# Recorded under another name with `temporal.continueAsNewAfter` set, so each run of a residency
# continued as new (the ContinueAsNew command and the carried input) replays too; since the root
# continues as new with children resident, the root's two runs are recorded as well.
CONTINUED = {"continued-as-new": ("interrupt-parked-resume", 1)}


async def main() -> None:
    from temporal_kit import dev_server, run_histories, run_temporal

    from dsh.loader.testing.runner import FlowPlan, plan_flow

    out = ROOT / "tests" / "temporal" / "histories"
    out.mkdir(exist_ok=True)
    async with dev_server() as client:
        jobs = [(name, plan_flow(name)) for name in TRANSCRIPTS]
        for label, (name, after) in CONTINUED.items():
            plan = plan_flow(name)
            temporal = plan.config.temporal.model_copy(update={"continue_as_new_after": after})
            jobs.append((label, FlowPlan(script=plan.script, config=plan.config.model_copy(update={"temporal": temporal}))))
        for name, plan in jobs:
            with tempfile.TemporaryDirectory() as home:
                run = await run_temporal(client, plan, Path(home))
                assert run.result.violations == [], run.result.violations
                ids = [run.result.root_session_id]
                ids += [f"{ids[0]}/{p.parent.name}" for p in sorted(Path(home, "sessions").glob("*/session.jsonl"))
                        if p.parent.name != ids[0]]
                # every run of each workflow, the earliest first
                histories = [(workflow_id, h) for workflow_id in ids for h in await run_histories(client, workflow_id)]
                # The turns' own workflows (`temporal.turnWorkflows`, root by default), in the order
                # their agents' runs started them: `<name>.turn<k>.json`.
                turns = [(f"{name}.turn{k}", turn_id) for k, turn_id in
                         enumerate(started_turns(history for _, history in histories))]
                for n, (workflow_id, history) in enumerate(histories):
                    write(out / f"{name}.{n}.json", workflow_id, history)
                for stem, workflow_id in turns:
                    write(out / f"{stem}.json", workflow_id, await client.get_workflow_handle(workflow_id).fetch_history())


def started_turns(histories: Iterable[WorkflowHistory]) -> list[str]:
    """The ids of the `dsh.turn_run` workflows these runs started, in history order."""
    from dsh.loader.engines.turn_run import TURN_RUN_WORKFLOW

    return [event.start_child_workflow_execution_initiated_event_attributes.workflow_id
            for history in histories for event in history.events
            if event.HasField("start_child_workflow_execution_initiated_event_attributes")
            and event.start_child_workflow_execution_initiated_event_attributes.workflow_type.name == TURN_RUN_WORKFLOW]


def write(path: Path, workflow_id: str, history: WorkflowHistory) -> None:
    path.write_text(json.dumps({"workflowId": workflow_id, "history": history.to_json_dict()}, indent=1) + "\n")
    print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    asyncio.run(main())
