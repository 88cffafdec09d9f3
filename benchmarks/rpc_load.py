"""Control socket under load (issue 15 item 8): a live `dsh run` (root and one child, both hanging
in a model request, so the run keeps serving), 1,000 idle connections held open, and 100 concurrent
clients calling `run.status`, `subagent.list` and `subagent.interrupt` for 10 s. Loopback (a Unix
socket) only, bounded in count and time.

Prints: calls, replies, lost replies (a call without a JSON-RPC answer), errors by `data.code`,
latency p50 / p99 / max, idle connections the server closed (the cap keeps 256 open), and the run's
open file descriptors before, under and after the load (fd leak check, Linux /proc). Also the floor
and the why (issue 13): `floor_p50_ms`, one client alone for a second before the load; `calls_per_s`;
and the run's CPU per call under load (`server_cpu_ms_per_call`, Linux /proc) next to this client's
(`client_cpu_ms_per_call`). The clients are closed-loop, so latency ≈ clients / throughput (Little's
law): p99 ≤ 50 ms with 100 clients needs ≥ 2,000 calls/s from two processes sharing the machine.

    python benchmarks/rpc_load.py [--clients 100] [--idle 1000] [--seconds 10]

`subagent.interrupt` targets an id with no live session under the real root: the accepted no-op of
§10.1, so the call exercises the whole path without stopping the child (the run must keep serving).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

HANG = {
    "version": 1, "name": "rpc-load", "task": "wait",
    "agents": {
        "root": {"replies": [
            {"toolCalls": [{"id": "sa", "name": "subagent", "arguments": {"label": "c", "prompt": "wait"}}]},
            {"hang": {}},
        ]},
        "child": {"spawnedBy": "sa", "replies": [{"hang": {}}]},
    },
}
STRANGER = "00000000-0000-4000-8000-000000000000"


def start_run(work: Path) -> tuple[subprocess.Popen[bytes], str, str]:
    script = work / "hang.json.yaml"
    script.write_text(json.dumps(HANG))
    env = {k: v for k, v in os.environ.items() if not k.startswith("DSH_")}
    proc = subprocess.Popen(
        [sys.executable, "-c", "from dsh.cli.main import entry; entry()", "run", "--json", "--transcript", str(script),
         "--home", str(work / "h")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=env,
    )
    assert proc.stdout is not None
    deadline = time.monotonic() + 60
    for raw in proc.stdout:
        record = json.loads(raw)
        if record.get("type") == "lifecycle" and record.get("name") == "subagent/start":
            return proc, record["parentSessionId"], record["sessionId"]
        if time.monotonic() > deadline:
            break
    raise SystemExit(f"the run did not start a child: {proc.stderr.read().decode() if proc.stderr else ''}")


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd")) if os.path.isdir(f"/proc/{pid}/fd") else -1


async def client(path: str, root: str, stop: float, latencies: list[float], outcome: Counter[str], n: int) -> None:
    calls = [
        ("run.status", {}),
        ("subagent.list", {"parentSessionId": root}),
        ("subagent.interrupt", {"parentSessionId": root, "childSessionId": STRANGER}),
    ]
    i = n
    while time.monotonic() < stop:
        method, params = calls[i % 3]
        i += 1
        line = json.dumps({"jsonrpc": "2.0", "id": i, "method": method, "params": params}).encode() + b"\n"
        started = time.perf_counter()
        outcome["calls"] += 1
        stage = "connect"
        try:
            reader, writer = await asyncio.open_unix_connection(path)
            stage = "send"
            writer.write(line)
            await writer.drain()
            stage = "read"
            raw = await asyncio.wait_for(reader.readline(), 10)
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
            answer = json.loads(raw)
        except (OSError, ValueError, asyncio.TimeoutError) as exc:
            outcome[f"lost ({type(exc).__name__} at {stage})"] += 1
            continue
        latencies.append(time.perf_counter() - started)
        if answer.get("id") != i:
            outcome["lost (wrong id)"] += 1
        elif "error" in answer:
            outcome[f"error {answer['error']['data']['code']}"] += 1
        else:
            outcome["replies"] += 1


def cpu_seconds(pid: int) -> float:
    """User + system CPU of `pid` (Linux /proc), or of this process when `pid` is ours."""
    if pid == os.getpid():
        usage = os.times()
        return usage.user + usage.system
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def load(path: str, root: str, clients: int, idle: int, seconds: float, pid: int) -> dict[str, object]:
    floor: list[float] = []
    await client(path, root, time.monotonic() + 1.0, floor, Counter(), 0)
    idle_conns = []
    for _ in range(idle):
        idle_conns.append(await asyncio.open_unix_connection(path))
    await asyncio.sleep(1.0)  # the idle connections have now been idle for a while, not just opened
    fds_idle = open_fds(pid)
    latencies: list[float] = []
    outcome: Counter[str] = Counter()
    server_cpu, client_cpu, started = cpu_seconds(pid), cpu_seconds(os.getpid()), time.monotonic()
    stop = started + seconds
    await asyncio.gather(*(client(path, root, stop, latencies, outcome, n) for n in range(clients)))
    elapsed = time.monotonic() - started
    server_cpu, client_cpu = cpu_seconds(pid) - server_cpu, cpu_seconds(os.getpid()) - client_cpu
    fds_loaded = open_fds(pid)
    closed = 0
    for reader, writer in idle_conns:
        try:
            data = await asyncio.wait_for(reader.read(1), 0.01)
            closed += data == b""
        except asyncio.TimeoutError:
            pass
        except OSError:  # reset by the server's close
            closed += 1
        writer.close()
    latencies.sort()
    calls = max(1, outcome["calls"])
    return {
        "outcome": dict(outcome),
        "floor_p50_ms": statistics.median(floor) * 1000 if floor else None,
        "calls_per_s": outcome["calls"] / elapsed,
        "server_cpu_ms_per_call": server_cpu * 1000 / calls,
        "client_cpu_ms_per_call": client_cpu * 1000 / calls,
        "p50_ms": statistics.median(latencies) * 1000 if latencies else None,
        "p99_ms": latencies[int(len(latencies) * 0.99) - 1] * 1000 if latencies else None,
        "max_ms": latencies[-1] * 1000 if latencies else None,
        "idle_closed_by_server": closed,
        "fds_with_idle": fds_idle,
        "fds_under_load": fds_loaded,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--idle", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="dsh-load-", dir="/tmp"))
    proc, root, child = start_run(work)
    try:
        from dsh.loader.host import socket_path

        path = str(socket_path(work / "h", root))
        fds_before = open_fds(proc.pid)
        report = asyncio.run(load(path, root, args.clients, args.idle, args.seconds, proc.pid))
        time.sleep(0.5)  # let the server finish closing the benchmark's sockets before counting fds
        report["fds_before"] = fds_before
        report["fds_after"] = open_fds(proc.pid)
        report["run_alive"] = proc.poll() is None
        print(json.dumps(report, indent=2))
    finally:
        proc.send_signal(2)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        err = proc.stderr.read().decode() if proc.stderr else ""
        print(f"run exit {proc.returncode}; stderr: {err.strip()[-500:] or '(empty)'}")
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
