"""The N-child fan-out on the Temporal engine beside the local one, in the same run (issue 12 item 7).

The transcript is `fanout.py`'s: the root starts N background children in one reply and a fence
holds its second step until all N notices are in. Each measurement is one whole `dsh run` process:
`--transcript FILE` on the local engine, and the same with `--engine temporal` against a dev server
(`temporal server start-dev --headless`, in memory, started once from the venv's binary) served by
one `dsh worker` process, started once too. Both write JSONL logs under their own fresh home.

Printed per N and engine: median and min wall of the `dsh run` process, its CPU (user+sys, from
wait4: on Temporal the client's only; the worker's and server's CPU is printed per round from
/proc), and events per second = the tree's durable events (log lines past each header) / wall.
Runs alternate engine and N, so a load change hits both alike; the load average is printed.

`--homes K` (issue 12, "the homes' cost") adds a third set-up in the same rounds, `homes`: K
`dsh worker --home DIR` processes, each with its own home, on a task queue of their own; the
client's home is a fresh empty one, so it streams over the server (engines README "Homes"), and the
events are counted in the workers' homes (the difference each run makes).

    python benchmarks/temporal_fanout.py [--children 100,1000] [--repeat 3] [--homes 2]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fanout import CPU, dsh_command, run_once, transcript  # noqa: E402  (the same transcript and runner)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def events_in(home: Path) -> int:
    """Durable events of every session under `home`: each log's lines after its header."""
    total = 0
    for log in (home / "sessions").glob("*/session.jsonl"):
        with open(log, "rb") as f:
            total += sum(1 for _ in f) - 1
    return total


def cpu_seconds(pid: int) -> float:
    """user+sys of a live process and its reaped children (/proc/PID/stat fields 14-17)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def start_server(port: int) -> subprocess.Popen[str]:
    binary = Path(sys.executable).parent / "temporal"
    proc = subprocess.Popen(
        [str(binary), "server", "start-dev", "--headless", "--ip", "127.0.0.1", "--port", str(port),
         "--log-level", "error"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:  # serving once it prints its banner
        if line.startswith("Temporal Server:"):
            # Keep draining: a full pipe would stop the server mid-run.
            threading.Thread(target=proc.stdout.read, daemon=True).start()
            return proc
    raise SystemExit("the dev server exited before it served")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--children", default="100,1000", help="comma-separated N values")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--homes", type=int, default=0, help="also K workers with a home each (0: not)")
    args = parser.parse_args()
    sizes = [int(x) for x in args.children.split(",")]
    port = free_port()
    queue = f"fanout-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "DSH_TESTING__FENCE_TIMEOUT_SECONDS": "3600", "DSH_TEMPORAL__ADDRESS": f"127.0.0.1:{port}",
           "DSH_TEMPORAL__TASK_QUEUE": queue}
    env.pop("DSH_HOME", None)
    server = start_server(port)
    # The worker takes the fence timeout from each run (RunSpec), and refuses `testing.*` itself.
    worker_env = {k: v for k, v in env.items() if not k.startswith("DSH_TESTING__")}
    worker = subprocess.Popen([*dsh_command(), "worker"], env=worker_env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    engines = ["local", "temporal"] + (["homes"] if args.homes else [])
    homed_env = {**env, "DSH_TEMPORAL__TASK_QUEUE": f"{queue}-homes"}
    homed: list[subprocess.Popen[bytes]] = []
    worker_homes = Path(tempfile.mkdtemp(prefix="dsh-tfanout-homes-"))
    for i in range(args.homes):
        homed.append(subprocess.Popen(
            [*dsh_command(), "worker", "--home", str(worker_homes / f"home-{i}")],
            env={**worker_env, "DSH_TEMPORAL__TASK_QUEUE": f"{queue}-homes"}, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL))
    walls: dict[tuple[str, int], list[float]] = {}
    cpus: dict[tuple[str, int], list[float]] = {}
    rates: dict[tuple[str, int], list[float]] = {}
    sides: list[str] = []
    load_before = os.getloadavg()
    try:
        with tempfile.TemporaryDirectory(prefix="dsh-tfanout-") as tmp:
            files = {}
            for n in sizes:
                files[n] = Path(tmp) / f"fanout-{n}.yaml"
                files[n].write_text(json.dumps(transcript(n)))
            for r in range(args.repeat):
                for n in sizes:
                    for engine in engines:
                        home = Path(tmp) / f"home-{engine}-{n}-{r}"
                        cmd = [*dsh_command(), "run", "--transcript", str(files[n]), "--home", str(home),
                               "--engine", "local" if engine == "local" else "temporal",
                               "--max-children", str(n + 10), "--max-requests", str(2 * n + 10)]
                        serving = [worker] if engine == "temporal" else homed
                        side_before = sum(map(cpu_seconds, [p.pid for p in serving])) + cpu_seconds(server.pid)
                        events_before = sum(events_in(worker_homes / f"home-{i}") for i in range(args.homes))
                        wall, _, out = run_once(cmd, homed_env if engine == "homes" else env, f"{engine}-{n}")
                        side = sum(map(cpu_seconds, [p.pid for p in serving])) + cpu_seconds(server.pid) - side_before
                        if "ALL_RECEIVED" not in out:
                            raise SystemExit(f"{engine} N={n}: unexpected answer {out!r}")
                        key = (engine, n)
                        walls.setdefault(key, []).append(wall)
                        cpus.setdefault(key, []).append(CPU[f"{engine}-{n}"][-1])
                        if engine == "homes":
                            made = sum(events_in(worker_homes / f"home-{i}") for i in range(args.homes)) - events_before
                        else:
                            made = events_in(home)
                        rates.setdefault(key, []).append(made / wall)
                        if engine != "local":
                            sides.append(f"N={n} round {r + 1} {engine}: worker(s)+server CPU {side:.2f}s")
    finally:
        for proc in [worker, *homed]:
            proc.terminate()
        for proc in [worker, *homed]:
            proc.wait(timeout=120)
        server.terminate()
        server.wait(timeout=60)
        shutil.rmtree(worker_homes, ignore_errors=True)
    load = os.getloadavg()
    print(f"fan-out, whole `dsh run` process per engine, runs={args.repeat}, loadavg before "
          f"{load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}, after {load[0]:.2f} {load[1]:.2f} "
          f"{load[2]:.2f}, nproc {os.cpu_count()}; temporal: one `dsh worker`, dev server in memory")
    for n in sizes:
        for engine in engines:
            key = (engine, n)
            print(f"N={n:5} {engine:8}  wall median {statistics.median(walls[key]):7.2f}s  min {min(walls[key]):7.2f}s  "
                  f"runs {' '.join(f'{w:.2f}' for w in walls[key])}  client cpu {statistics.median(cpus[key]):6.2f}s  "
                  f"events/s median {statistics.median(rates[key]):8.0f}")
        ratio = statistics.median(walls[("temporal", n)]) / statistics.median(walls[("local", n)])
        print(f"N={n:5} temporal / local wall: {ratio:.1f}x")
        if args.homes:
            homes_ratio = statistics.median(walls[("homes", n)]) / statistics.median(walls[("temporal", n)])
            print(f"N={n:5} {args.homes} homes (stream over the server) / one worker without a home: {homes_ratio:.2f}x")
    for line in sides:
        print(line)


if __name__ == "__main__":
    main()
