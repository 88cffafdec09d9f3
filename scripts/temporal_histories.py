"""Record the workflow histories tests/temporal/test_replay.py replays (issue 12 item 4).

Runs each transcript below on a fresh dev server (the venv's `temporal` binary) and writes every
workflow's history of the tree — the root and each child run — to tests/temporal/histories/
<transcript>.<n>.json. Rerun after a deliberate, versioned change to workflow code; a change that
makes the committed histories fail to replay is a non-deterministic change and breaks running trees.

    python scripts/temporal_histories.py
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "temporal"))

TRANSCRIPTS = ["hello", "background-settlement", "report-then-settle", "interrupt-parked-resume", "followups-checkpoint-failure"]


async def main() -> None:
    from temporal_kit import dev_server, run_temporal

    from dsh.loader.testing.runner import plan_flow

    out = ROOT / "tests" / "temporal" / "histories"
    out.mkdir(exist_ok=True)
    async with dev_server() as client:
        for name in TRANSCRIPTS:
            with tempfile.TemporaryDirectory() as home:
                run = await run_temporal(client, plan_flow(name), Path(home))
                assert run.result.violations == [], run.result.violations
                ids = [run.result.root_session_id]
                ids += [f"{ids[0]}/{p.parent.name}" for p in sorted(Path(home, "sessions").glob("*/session.jsonl"))
                        if p.parent.name != ids[0]]
                for n, workflow_id in enumerate(ids):
                    history = await client.get_workflow_handle(workflow_id).fetch_history()
                    path = out / f"{name}.{n}.json"
                    path.write_text(json.dumps({"workflowId": workflow_id, "history": history.to_json_dict()},
                                               indent=1) + "\n")
                    print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    asyncio.run(main())
