"""What an agent's workflow carries as its children come and go (issue 12 item 2, "large payloads
stay under the 2 MB limit"; loader/engines/README.md "Large payloads").

A root starts `--rounds` batches of `--batch` children in one turn: each step starts a batch and
the next step is held until every child so far has settled (`inboxAccepted`), so at most one batch
is resident at a time while the number ever started grows to rounds × batch. The root continues as
new every `--events` history events (`temporal.continueAsNewAfter`), so its runs hand each other
what they carry. Dev server in memory, one `dsh worker`, one `dsh run --engine temporal`.

Printed, over the root's chain of runs: for each run, the bytes of its input (what the run before
it carried: `TreeInput` with `Carried`), the children refs in it and the resident ones; the largest
turn input (the `dsh.turn_run` child start's input, `TurnInput` inside). Beside them, the same-run
floor: the first run's input, which carries nothing; and what a list of every child started would
weigh (the refs' mean size × children started), which is what a run carried before refs were
bounded. Then the cost of the listing that pays for it: one `subagent.list` of the root, which
asks every run (a closed one by replaying it). `--dsh` runs another tree's executable (an older
venv's `dsh`) for the same figures, without the listing (its workers answer another query shape).

    python benchmarks/temporal_payloads.py [--rounds 10] [--batch 100] [--events 1500] [--dsh OTHER/bin/dsh]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fanout import dsh_command  # noqa: E402
from temporal_fanout import cpu_seconds, free_port, start_server  # noqa: E402


def transcript(rounds: int, batch: int) -> dict[str, Any]:
    replies: list[dict[str, Any]] = []
    fences: list[dict[str, Any]] = []
    agents: dict[str, Any] = {}
    for r in range(rounds):
        calls = []
        for i in range(r * batch + 1, (r + 1) * batch + 1):
            calls.append({"id": f"c{i}", "name": "subagent", "arguments": {"label": f"w{i}", "prompt": "Reply."}})
            agents[f"w{i}"] = {"spawnedBy": f"c{i}", "replies": [{"text": f"W{i}"}]}
        replies.append({"toolCalls": calls})
        fences.append({"hold": {"agent": "root", "turn": 1, "step": r + 2, "until": {
            "inboxAccepted": {"agent": "root", "kind": "subagent-settled", "count": (r + 1) * batch}}}})
    # The last batch's notices, accepted while the held step waits, enter the step after it (as in
    # fanout.py's transcript).
    replies += [{"text": "ROUNDS_DONE"}, {"text": "ALL_RECEIVED"}]
    return {"version": 1, "name": f"rounds-{rounds}x{batch}", "task": "Start children in rounds.", "fences": fences,
            "agents": {"root": {"replies": replies}, **agents}}


async def measure(address: str, root: str, *, listing: bool) -> None:
    from temporalio.api.enums.v1 import EventType
    from temporalio.client import Client

    client = await Client.connect(address)
    if listing:  # this tree's client against this tree's workers: every run answers for its children
        from dsh.loader.engines.control import user_call
        from dsh.loader.engines.started import workflow_children

        start = time.perf_counter()
        refs = await workflow_children(client, root, root)
        asked = time.perf_counter() - start
        start = time.perf_counter()
        listed = await user_call(client, root, "subagent.list", {"parentSessionId": root})
        entries = (listed or {}).get("entries") or []
        print(f"  the root's runs asked for their children: {len(refs):,} in {asked:.2f} s; subagent.list of the root "
              f"(that, and each child's status): {len(entries):,} in {time.perf_counter() - start:.2f} s")
    runs: list[Any] = []
    run_id: str | None = None
    while True:  # the chain of runs, the last first
        history = await client.get_workflow_handle(root, run_id=run_id).fetch_history()
        runs.insert(0, history)
        run_id = history.events[0].workflow_execution_started_event_attributes.continued_execution_run_id or None
        if run_id is None:
            break
    ref_bytes: list[int] = []
    turn_input = 0
    print(f"  {'run':>4} {'input bytes':>12} {'refs carried':>13} {'resident':>9}")
    for k, history in enumerate(runs, start=1):
        payload = history.events[0].workflow_execution_started_event_attributes.input.payloads[0].data
        carried = json.loads(payload).get("carried") or {}
        refs = carried.get("children") or []
        ref_bytes += [len(json.dumps(ref, separators=(",", ":"))) for ref in refs]
        print(f"  {k:>4} {len(payload):>12,} {len(refs):>13,} {len(carried.get('resident') or []):>9,}")
        for event in history.events:
            if event.event_type == EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED:
                a = event.start_child_workflow_execution_initiated_event_attributes
                if a.workflow_type.name == "dsh.turn_run":
                    turn_input = max(turn_input, sum(len(p.data) for p in a.input.payloads))
            elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                a = event.activity_task_scheduled_event_attributes
                if a.activity_type.name == "dsh.turn":
                    turn_input = max(turn_input, sum(len(p.data) for p in a.input.payloads))
    inputs = [len(h.events[0].workflow_execution_started_event_attributes.input.payloads[0].data) for h in runs]
    largest = json.loads(runs[inputs.index(max(inputs))].events[0].workflow_execution_started_event_attributes.input
                         .payloads[0].data)
    parts = {**{k: v for k, v in largest.items() if k != "carried"}, **{f"carried.{k}": v for k, v in
                                                                     (largest.get("carried") or {}).items()}}
    weights = sorted(((len(json.dumps(v, separators=(",", ":"))), k) for k, v in parts.items()), reverse=True)
    print("  the largest run input by field: " + ", ".join(f"{k} {b:,} B" for b, k in weights[:5]))
    print(f"  runs {len(runs)}; largest run input {max(inputs):,} B; largest turn input {turn_input:,} B; "
          f"floor (first run's input) {inputs[0]:,} B")
    if ref_bytes:
        mean = sum(ref_bytes) / len(ref_bytes)
        print(f"  a ref is {mean:.0f} B on average: a list of every child started would weigh {mean:,.0f} B × N")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--events", type=int, default=1500, help="temporal.continueAsNewAfter")
    parser.add_argument("--dsh", default=None, help="another tree's dsh executable")
    args = parser.parse_args()
    n = args.rounds * args.batch
    dsh = [args.dsh] if args.dsh else dsh_command()
    port = free_port()
    address = f"127.0.0.1:{port}"
    queue = f"payloads-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "DSH_TESTING__FENCE_TIMEOUT_SECONDS": "3600", "DSH_TEMPORAL__ADDRESS": address,
           "DSH_TEMPORAL__TASK_QUEUE": queue, "DSH_TEMPORAL__CONTINUE_AS_NEW_AFTER": str(args.events)}
    env.pop("DSH_HOME", None)
    server = start_server(port)
    worker_env = {k: v for k, v in env.items() if not k.startswith("DSH_TESTING__")}
    worker = subprocess.Popen([*dsh, "worker"], env=worker_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        with tempfile.TemporaryDirectory(prefix="dsh-payloads-") as tmp:
            script = Path(tmp) / "rounds.yaml"
            script.write_text(json.dumps(transcript(args.rounds, args.batch)))
            home = Path(tmp) / "home"
            cmd = [*dsh, "run", "--transcript", str(script), "--home", str(home), "--engine", "temporal", "--json",
                   "--max-children", str(n + 10), "--max-requests", str(2 * n + 10)]
            side0 = cpu_seconds(worker.pid) + cpu_seconds(server.pid)
            start = time.perf_counter()
            run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=3600)
            wall = time.perf_counter() - start
            side = cpu_seconds(worker.pid) + cpu_seconds(server.pid) - side0
            result = json.loads(run.stdout.splitlines()[-1]) if run.stdout else {}
            print(f"{args.rounds} rounds × {args.batch} children (N={n}), continueAsNewAfter {args.events}: "
                  f"exit {run.returncode}, {result.get('output', '')!r}, {wall:.1f} s, worker+server CPU {side:.1f} s, "
                  f"load {os.getloadavg()[0]:.1f}")
            if run.returncode != 0:
                print(run.stderr[-2000:])
            asyncio.run(measure(address, result["rootSessionId"], listing=args.dsh is None))
    finally:
        worker.terminate()
        worker.wait(timeout=120)
        server.terminate()
        server.wait(timeout=60)


if __name__ == "__main__":
    main()
