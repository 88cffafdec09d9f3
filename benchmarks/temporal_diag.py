"""What the root workflow of an N-child fan-out spends per child on Temporal (issue 12 item 7).

Runs `temporal_fanout.py`'s setting once (dev server in memory, one `dsh worker`, one
`dsh run --engine temporal` of the N-child fan-out) and, every `--every` seconds and at the end
(the run's exit or `--limit`), reads the root workflow: history length and bytes (`describe`);
at the end the whole root history is fetched and summarised: events and payload bytes per event
type, workflow tasks (count, schedule-to-start and start-to-complete latencies, timeouts: a
sticky task not picked up in time is a `WorkflowTaskTimedOut` of type SCHEDULE_TO_START), updates
and signals, and one child's history for comparison. The worker's own log (`--worker-log`) is
kept for the SDK's eviction messages.

    python benchmarks/temporal_diag.py --children 300 [--limit 180] [--every 15]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fanout import dsh_command, transcript  # noqa: E402
from temporal_fanout import cpu_seconds, events_in, free_port, start_server  # noqa: E402


def root_id_in(home: Path) -> str | None:
    for header in (home / "sessions").glob("*/session.jsonl"):
        with open(header, "rb") as f:
            first = json.loads(f.readline() or b"{}")
        if first.get("data", first).get("parentSession") is None and "parentSession" not in json.dumps(first):
            return header.parent.name
    return None


def steal() -> tuple[float, float]:
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    return float(sum(fields)), float(fields[7])


def quantiles(values: list[float]) -> str:
    if not values:
        return "-"
    values = sorted(values)
    pick = lambda q: values[min(len(values) - 1, int(q * len(values)))]  # noqa: E731
    return f"n={len(values)} p50 {pick(0.5) * 1000:.0f} ms p90 {pick(0.9) * 1000:.0f} ms max {values[-1] * 1000:.0f} ms"


async def summarise(address: str, workflow_id: str, label: str) -> None:
    from temporalio.api.enums.v1 import EventType
    from temporalio.client import Client

    client = await Client.connect(address)
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    counts: Counter[str] = Counter()
    sizes: Counter[str] = Counter()
    scheduled: dict[int, float] = {}
    started: dict[int, float] = {}
    to_start: list[float] = []
    to_done: list[float] = []
    timeouts: Counter[str] = Counter()
    for event in history.events:
        name = EventType.Name(event.event_type).removeprefix("EVENT_TYPE_")
        counts[name] += 1
        sizes[name] += event.ByteSize()
        t = event.event_time.ToDatetime().timestamp()
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED:
            scheduled[event.event_id] = t
        elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
            a = event.workflow_task_started_event_attributes
            if a.scheduled_event_id in scheduled:
                to_start.append(t - scheduled[a.scheduled_event_id])
            started[event.event_id] = t
        elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            a = event.workflow_task_completed_event_attributes
            if a.started_event_id in started:
                to_done.append(t - started[a.started_event_id])
        elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT:
            timeouts[str(event.workflow_task_timed_out_event_attributes.timeout_type)] += 1
    total = sum(sizes.values())
    print(f"[{label}] {workflow_id}: {len(history.events)} events, {total / 1e6:.2f} MB")
    for name, n in counts.most_common():
        print(f"    {name:48} {n:6}  {sizes[name] / 1e3:10.1f} kB  ({sizes[name] / n:7.0f} B each)")
    print(f"    workflow task schedule->start {quantiles(to_start)}")
    print(f"    workflow task start->complete {quantiles(to_done)}")
    if timeouts:
        print(f"    workflow task timeouts by type: {dict(timeouts)}")


async def describe(address: str, workflow_id: str) -> str:
    from temporalio.client import Client

    client = await Client.connect(address)
    d = await client.get_workflow_handle(workflow_id).describe()
    raw = d.raw_description.workflow_execution_info
    return f"history {raw.history_length} events {raw.history_size_bytes / 1e6:.2f} MB"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--children", type=int, default=300)
    parser.add_argument("--limit", type=float, default=180.0, help="stop the run after this many seconds")
    parser.add_argument("--every", type=float, default=15.0)
    parser.add_argument("--worker-log", default=None)
    args = parser.parse_args()
    n = args.children
    port = free_port()
    address = f"127.0.0.1:{port}"
    queue = f"diag-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "DSH_TESTING__FENCE_TIMEOUT_SECONDS": "3600", "DSH_TEMPORAL__ADDRESS": address,
           "DSH_TEMPORAL__TASK_QUEUE": queue}
    env.pop("DSH_HOME", None)
    server = start_server(port)
    worker_env = {k: v for k, v in env.items() if not k.startswith("DSH_TESTING__")}
    log = open(args.worker_log or os.devnull, "w")
    worker = subprocess.Popen([*dsh_command(), "worker"], env=worker_env, stdout=log, stderr=log)
    try:
        with tempfile.TemporaryDirectory(prefix="dsh-tdiag-") as tmp:
            script = Path(tmp) / f"fanout-{n}.yaml"
            script.write_text(json.dumps(transcript(n)))
            home = Path(tmp) / "home"
            cmd = [*dsh_command(), "run", "--transcript", str(script), "--home", str(home), "--engine", "temporal",
                   "--max-children", str(n + 10), "--max-requests", str(2 * n + 10)]
            total0, steal0 = steal()
            side0 = cpu_seconds(worker.pid) + cpu_seconds(server.pid)
            start = time.perf_counter()
            run = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            root: str | None = None
            next_look = start + args.every
            while run.poll() is None and time.perf_counter() - start < args.limit:
                time.sleep(0.5)  # a sampling period of this script, not an ordering
                root = root or root_id_in(home)
                if root is not None and time.perf_counter() >= next_look:
                    next_look += args.every
                    notices = sum(1 for _ in open(home / "sessions" / root / "session.jsonl", "rb")) - 1
                    print(f"  t={time.perf_counter() - start:6.1f}s root log lines {notices:5}  "
                          f"{asyncio.run(describe(address, root))}  load {os.getloadavg()[0]:.1f}", flush=True)
            wall = time.perf_counter() - start
            finished = run.poll() is not None
            if not finished:
                run.kill()
            out, err = run.communicate()
            total1, steal1 = steal()
            side = cpu_seconds(worker.pid) + cpu_seconds(server.pid) - side0
            print(f"N={n}: {'finished' if finished else 'STOPPED'} after {wall:.1f}s "
                  f"({'ALL_RECEIVED' in out}), events {events_in(home)}, worker+server CPU {side:.1f}s, "
                  f"steal {100 * (steal1 - steal0) / max(1.0, total1 - total0):.0f}%, load {os.getloadavg()}")
            if not finished or "ALL_RECEIVED" not in out:
                print(err[-2000:])
            root = root or root_id_in(home)
            if root is not None:
                asyncio.run(summarise(address, root, "root"))
                children = sorted(p.name for p in (home / "sessions").iterdir() if p.name != root)
                if children:
                    asyncio.run(summarise(address, f"{root}/{children[0]}", "one child"))
    finally:
        worker.terminate()
        worker.wait(timeout=120)
        server.terminate()
        server.wait(timeout=60)
        log.close()


if __name__ == "__main__":
    main()
