"""Control socket under load (issue 15 item 8): a live `dsh run` (root and one child, both hanging
in a model request, so the run keeps serving), 1,000 idle connections held open, and 100 concurrent
clients calling `run.status`, `subagent.list` and `subagent.interrupt` for 10 s. Loopback (a Unix
socket) only, bounded in count and time.

Each client does what `dsh interrupt` does (loader/host/client.py): connect, send one line, read one
line, close; then its next call (closed loop). The load generator is kept cheap so that the latency
it measures is the server's as a client sees it, not its own scheduling: `--workers` forked
processes (default 2, one per core), each driving its share of the clients from one epoll loop over
raw non-blocking sockets, with every request line encoded before the clock starts. Its CPU per call
is printed next to the run's.

Prints: calls, replies, lost replies (a call without its JSON-RPC answer: EOF, reset, timeout,
wrong id), errors by `data.code`, latency p50 / p90 / p99 / max, throughput, the same-run floor (one
client alone for a second before the load, with the run's CPU per call then), the run's and the generator's CPU per call (Linux
/proc, getrusage), the mean number of calls in flight (sent, not yet answered: near `--clients`
means the generator kept every client waiting on the server), idle connections the server closed
(the cap keeps 256 open), the run's open file descriptors before, with the idle ones, under load and
after (fd leak check), and the load average before and after.

    python benchmarks/rpc_load.py [--clients 100] [--idle 1000] [--seconds 10] [--workers 2]
                                  [--profile-run FILE]    # cProfile the run, stats to FILE
                                  [--keep-connections]    # one connection per client, not per call

`subagent.interrupt` targets an id with no live session under the real root: the accepted no-op of
§10.1, so the call exercises the whole path without stopping the child (the run must keep serving).
To compare with another checkout, point `PYTHONPATH` at it: the run imports `dsh` from there.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import resource
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from array import array
from collections import Counter
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

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
REPLY_TIMEOUT = 10.0
PROFILED_ENTRY = """
import cProfile, signal, sys
from dsh.cli.main import entry
out = sys.argv.pop(1)
profile = cProfile.Profile()
def dump(*_):
    profile.disable()
    profile.dump_stats(out)
signal.signal(signal.SIGUSR1, dump)  # the run leaves by re-raising SIGINT: no finally would run
profile.enable()
entry()
"""


def start_run(work: Path, profile: str | None) -> tuple[subprocess.Popen[bytes], str]:
    script = work / "hang.json.yaml"
    script.write_text(json.dumps(HANG))
    env = {k: v for k, v in os.environ.items() if not k.startswith("DSH_")}
    entry = ["-c", "from dsh.cli.main import entry; entry()"] if profile is None else ["-c", PROFILED_ENTRY, profile]
    proc = subprocess.Popen(
        [sys.executable, *entry, "run", "--json", "--transcript", str(script), "--home", str(work / "h")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=env,
    )
    assert proc.stdout is not None
    deadline = time.monotonic() + 60
    for raw in proc.stdout:
        record = json.loads(raw)
        if record.get("type") == "lifecycle" and record.get("name") == "subagent/start":
            return proc, record["parentSessionId"]
        if time.monotonic() > deadline:
            break
    raise SystemExit(f"the run did not start a child: {proc.stderr.read().decode() if proc.stderr else ''}")


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd")) if os.path.isdir(f"/proc/{pid}/fd") else -1


def cpu_seconds(pid: int) -> float:
    """User + system CPU of another process (Linux /proc)."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def loadavg() -> str:
    return " ".join(open("/proc/loadavg").read().split()[:3]) if os.path.exists("/proc/loadavg") else "?"


# -- the generator: one epoll loop per worker process -----------------------------------------------
class _Client:
    __slots__ = ("buf", "expect", "frames", "n", "sock", "started")

    def __init__(self, frames: list[tuple[bytes, int]], n: int) -> None:
        self.frames, self.n = frames, n
        self.sock: socket.socket | None = None
        self.buf = b""
        self.expect = 0
        self.started = 0.0


def _frames(root: str, first_id: int) -> list[tuple[bytes, int]]:
    """Three pre-encoded request lines, each with the `"id":N` its answer must carry."""
    calls = [
        ("run.status", {}),
        ("subagent.list", {"parentSessionId": root}),
        ("subagent.interrupt", {"parentSessionId": root, "childSessionId": STRANGER}),
    ]
    out = []
    for k, (method, params) in enumerate(calls):
        request_id = first_id + k
        body = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
        out.append((json.dumps(body, separators=(",", ":")).encode() + b"\n", request_id))
    return out


def drive(path: str, root: str, clients: range, start_at: float, stop_at: float, pipe: Connection | None,
          keep: bool = False) -> dict[str, Any]:
    """Closed-loop clients from `start_at` to `stop_at`; calls still unanswered then get
    `REPLY_TIMEOUT` more seconds. With `keep`, a client sends its next line on the connection it
    already has (a monitor that stays connected) instead of connecting per call as `dsh interrupt`
    does. Returns (or sends through `pipe`) latencies and counts."""
    sel = selectors.EpollSelector()
    latencies = array("d")
    outcome: Counter[str] = Counter()
    pending: list[_Client] = []  # connect refused with EAGAIN (backlog full): retried next turn
    inflight_samples = inflight_sum = 0
    live = 0

    def begin(c: _Client) -> None:
        nonlocal live
        frame, c.expect = c.frames[c.n % 3]
        c.n += 1
        c.buf = b""
        if c.sock is not None:  # `keep`: the next line on the open connection
            c.started = time.perf_counter()
            outcome["calls"] += 1
            try:
                c.sock.send(frame)
            except OSError as exc:
                finish(c, f"lost ({type(exc).__name__} at send)")
            return
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.setblocking(False)
        c.started = time.perf_counter()
        outcome["calls"] += 1
        try:
            sock.connect(path)
            sock.send(frame)
        except BlockingIOError:
            sock.close()
            outcome["calls"] -= 1
            c.n -= 1
            pending.append(c)
            return
        except OSError as exc:
            sock.close()
            outcome[f"lost ({type(exc).__name__} at connect/send)"] += 1
            pending.append(c)
            return
        c.sock = sock
        live += 1
        sel.register(sock, selectors.EVENT_READ, c)

    def close(c: _Client) -> None:
        nonlocal live
        assert c.sock is not None
        sel.unregister(c.sock)
        c.sock.close()
        c.sock = None
        live -= 1

    def finish(c: _Client, lost: str | None) -> None:
        assert c.sock is not None
        if not keep or lost is not None:
            close(c)
        if lost is not None:
            outcome[lost] += 1
            return
        latencies.append(time.perf_counter() - c.started)
        answer = json.loads(c.buf)
        if answer.get("id") != c.expect:
            outcome["lost (wrong id)"] += 1
        elif "error" in answer:
            outcome[f"error {answer['error']['data']['code']}"] += 1
        else:
            outcome["replies"] += 1

    population = [_Client(_frames(root, 3 * n + 1), n) for n in clients]
    while time.monotonic() < start_at:
        time.sleep(min(0.01, max(0.0, start_at - time.monotonic())))
    for c in population:
        begin(c)
    hard_stop = stop_at + REPLY_TIMEOUT
    while True:
        now = time.monotonic()
        if now >= hard_stop or (now >= stop_at and live == 0):
            break
        if pending and now < stop_at:
            retry, pending[:] = list(pending), []
            for c in retry:
                begin(c)
        inflight_samples += 1
        inflight_sum += live
        for key, _ in sel.select(0.001 if pending else 0.05):
            c = key.data
            try:
                data = c.sock.recv(65536)
            except ConnectionError as exc:
                finish(c, f"lost ({type(exc).__name__} at read)")
            else:
                if not data:
                    finish(c, "lost (EOF before the answer)")
                    data = b""
                else:
                    c.buf += data
                    if c.buf.endswith(b"\n"):
                        finish(c, None)
                    else:
                        continue
            if time.monotonic() < stop_at:
                begin(c)
            elif c.sock is not None:  # `keep`: the run is over, so is this client's connection
                close(c)
    for key in list(sel.get_map().values()):
        finish(key.data, "lost (no answer within the timeout)")
    usage = resource.getrusage(resource.RUSAGE_SELF)
    report = {
        "latencies": latencies.tobytes(),
        "outcome": dict(outcome),
        "cpu": usage.ru_utime + usage.ru_stime,
        "inflight": inflight_sum / max(1, inflight_samples),
    }
    if pipe is not None:
        pipe.send(report)
        pipe.close()
    return report


def run_workers(path: str, root: str, clients: int, workers: int, seconds: float,
                keep: bool = False) -> tuple[list[dict[str, Any]], float]:
    """Fork `workers` processes sharing `clients`; returns their reports and the wall time."""
    ctx = mp.get_context("fork")
    start_at = time.monotonic() + 0.3  # every worker forked and ready before the first call
    stop_at = start_at + seconds
    procs = []
    for w in range(workers):
        share = range(w * clients // workers, (w + 1) * clients // workers)
        receiver, sender = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=drive, args=(path, root, share, start_at, stop_at, sender, keep), daemon=True)
        proc.start()
        sender.close()
        procs.append((proc, receiver))
    reports = []
    for proc, receiver in procs:
        reports.append(receiver.recv())
        proc.join()
    return reports, time.monotonic() - start_at


def percentile(sorted_values: list[float], q: float) -> float | None:
    if not sorted_values:
        return None
    return sorted_values[min(len(sorted_values) - 1, max(0, int(len(sorted_values) * q + 0.5) - 1))] * 1000


def load(path: str, root: str, clients: int, idle: int, seconds: float, workers: int, pid: int,
         keep: bool = False) -> dict[str, Any]:
    floor_cpu = cpu_seconds(pid)
    floor = drive(path, root, range(1), time.monotonic(), time.monotonic() + 1.0, None, keep)
    floor_cpu = cpu_seconds(pid) - floor_cpu
    floor_lat = sorted(array("d", floor["latencies"]))
    idle_socks = []
    for _ in range(idle):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(path)
        sock.setblocking(False)
        idle_socks.append(sock)
    time.sleep(1.0)  # the idle connections have now been idle for a while, not just opened
    fds_idle = open_fds(pid)
    load_before = loadavg()
    server_cpu = cpu_seconds(pid)
    reports, elapsed = run_workers(path, root, clients, workers, seconds, keep)
    server_cpu = cpu_seconds(pid) - server_cpu
    fds_loaded = open_fds(pid)
    closed = 0
    for sock in idle_socks:
        try:
            closed += sock.recv(1) == b""
        except BlockingIOError:
            pass
        except OSError:  # reset by the server's close
            closed += 1
        sock.close()
    outcome: Counter[str] = Counter()
    latencies: list[float] = []
    for report in reports:
        outcome.update(report["outcome"])
        latencies.extend(array("d", report["latencies"]))
    latencies.sort()
    calls = max(1, outcome["calls"])
    lost = sum(v for k, v in outcome.items() if k.startswith("lost"))
    return {
        "outcome": dict(outcome),
        "lost_replies": lost,
        "calls_per_s": round(outcome["calls"] / elapsed, 1),
        "p50_ms": percentile(latencies, 0.50),
        "p90_ms": percentile(latencies, 0.90),
        "p99_ms": percentile(latencies, 0.99),
        "max_ms": latencies[-1] * 1000 if latencies else None,
        "floor_p50_ms": percentile(floor_lat, 0.50),
        "floor_p99_ms": percentile(floor_lat, 0.99),
        "floor_calls": len(floor_lat),
        "floor_server_cpu_ms_per_call": round(floor_cpu * 1000 / max(1, len(floor_lat)), 4),
        "server_cpu_ms_per_call": round(server_cpu * 1000 / calls, 4),
        "generator_cpu_ms_per_call": round(sum(r["cpu"] for r in reports) * 1000 / calls, 4),
        "server_cpu_share": round(server_cpu / elapsed, 3),
        "mean_in_flight": round(sum(r["inflight"] for r in reports), 1),
        "idle_closed_by_server": closed,
        "fds_with_idle": fds_idle,
        "fds_under_load": fds_loaded,
        "load_before": load_before,
        "load_after": loadavg(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--idle", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--profile-run", default=None, help="cProfile the run; write its stats here")
    parser.add_argument("--keep-connections", action="store_true",
                        help="each client keeps one connection for all its calls (default: one per call)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="dsh-load-", dir="/tmp"))
    proc, root = start_run(work, args.profile_run)
    try:
        from dsh.loader.host import socket_path

        path = str(socket_path(work / "h", root))
        fds_before = open_fds(proc.pid)
        report = load(path, root, args.clients, args.idle, args.seconds, args.workers, proc.pid, args.keep_connections)
        report["connections"] = "kept" if args.keep_connections else "one per call"
        time.sleep(0.5)  # let the server finish closing the benchmark's sockets before counting fds
        report["fds_before"] = fds_before
        report["fds_after"] = open_fds(proc.pid)
        report["run_alive"] = proc.poll() is None
        print(json.dumps(report, indent=2))
    finally:
        if args.profile_run is not None:
            proc.send_signal(signal.SIGUSR1)
            deadline = time.monotonic() + 30
            while not os.path.exists(args.profile_run) and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(0.5)  # dump_stats has created the file; let it finish writing
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        err = proc.stderr.read().decode() if proc.stderr else ""
        print(f"run exit {proc.returncode}; stderr: {err.strip()[-500:] or '(empty)'}")
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
