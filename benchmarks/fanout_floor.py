"""The fan-out against what the durability and security rules themselves cost (issue 13 row 1).

Per N and round, interleaved: one whole `dsh run --transcript` process of `fanout.py`'s N-child
fan-out (wall and CPU from `wait4`), then the **rule floor**: a bare loop, no runtime, that does
the minimum work SPEC §5.4/§5.5 and issue 15's directory checks require for the same sessions and
the same events (taken from the runtime's own logs of that N, decoded before the clock starts):

- per session (the root and each child), atomic creation with the system calls
  `SessionStore.create` makes: `stat` (is the sessions directory there), `mkdir` 0700, `lstat` of
  home, `sessions/` and the session directory (owner and mode), `lstat` of the final name (exists?),
  `open(O_CREAT|O_EXCL|O_NOFOLLOW)` of a temp file, `flock`, `write` of the encoded header, `link`
  to `session.jsonl`, `unlink` of the temp name;
- per event, its JSON text (compact, the log's §5.1 form; one reused C encoder, the cheapest
  Python has) and its UTF-8 bytes;
- per write, the truncate rule's `fstat` check, then one `write` of the batch through the held
  descriptor; a session's events are cut into writes at its barriers (§5.5): before each
  `step/start` (pre-step), before each `assistant/message` (model request) and before the first
  `tool/result` after `tool/call`s (tool execution), and the rest at the end;
- with fsync, one `syncfs` per group (the cheapest durable group commit: every session's write
  number k in one round, one sync per round, as `persistence.py`'s floor), plus the two creation
  groups (the headers before any name points at them, the directory entries after the links);
  printed twice: with the runtime's tool barriers (its pool of 10 calls makes the root's one step
  100 call/result groups at N=1,000) and with one tool barrier per step (all calls started at once);
- at the end `flock(LOCK_UN)` and `close` per session.

So the floor assumes perfect grouping (every session's k-th barrier shares one sync) and does no
scheduling, no model work, no decoding: it is a lower bound for any runtime under the rules.
"Whole process" for the floor is the same-run `python -c pass` plus the floor process's own imports
and loop (measured inside it; reading its input is not counted).

    python benchmarks/fanout_floor.py [--children 100,1000,3000] [--repeat 5] [--no-fsync]
"""

from __future__ import annotations

import time

_T0 = time.perf_counter()

import argparse  # noqa: E402 - the floor child times its own imports from _T0
import ctypes  # noqa: E402
import fcntl  # noqa: E402
import json  # noqa: E402
import marshal  # noqa: E402
import os  # noqa: E402
import secrets  # noqa: E402
import sys  # noqa: E402

_T_IMPORTS = time.perf_counter() - _T0

FILE = "session.jsonl"
TEMP = ".session.jsonl.tmp-"


def cut_batches(events: list[dict], *, pool: bool = True) -> list[list[dict]]:
    """A session's events as the writes its barriers need at least (module docstring). With `pool`
    every `tool/result` after `tool/call`s is a cut (the runtime's tool pool runs 10 calls at a
    time, so a 1,000-call step interleaves 100 call/result groups); without it one cut per step
    (every call of a step started at once: the fewest barriers the rules allow for these events)."""
    batches: list[list[dict]] = []
    current: list[dict] = []
    after_call = cut_in_step = False
    for event in events:
        kind = event["type"]
        if kind == "step/start":
            cut_in_step = False
        tool_cut = kind == "tool/result" and after_call and (pool or not cut_in_step)
        if (kind in ("step/start", "assistant/message") or tool_cut) and current:
            batches.append(current)
            current = []
        if tool_cut:
            cut_in_step = True
        after_call = kind == "tool/call" or (after_call and kind != "tool/result")
        current.append(event)
    if current:
        batches.append(current)
    return batches


def logs_of(home: str) -> list[tuple[str, dict, list[dict]]]:
    """(id, header, events) of every session a run left under `home`, root first."""
    out = []
    sessions = os.path.join(home, "sessions")
    for sid in sorted(os.listdir(sessions), key=lambda s: (not s.startswith("session-"), s)):
        with open(os.path.join(sessions, sid, FILE), "rb") as f:
            lines = f.read().splitlines()
        out.append((sid, json.loads(lines[0]), [json.loads(line) for line in lines[1:]]))
    return out


# The cheapest encoding Python offers for the log's form: one C encoder reused for every event
# (`json.dumps` builds an encoder per call), as `Session._append` does.
_C_ENCODE = json.encoder.c_make_encoder(  # type: ignore[attr-defined]
    {}, None, json.encoder.encode_basestring, None, ":", ",", False, False, False
)


def _dumps(obj: dict) -> bytes:
    return ("".join(_C_ENCODE(obj, 0)) + "\n").encode()


def floor_loop(home: str, logs: list[tuple[str, dict, list[list[dict]]]], fsync: bool) -> dict[str, float]:
    """The rule floor (module docstring); returns wall and CPU seconds and the counts done."""
    libc = ctypes.CDLL(None, use_errno=True)
    syncfs = libc.syncfs
    syncs = writes = 0
    written = sum(len(_dumps(header)) for _, header, _ in logs)
    wall0, cpu0 = time.perf_counter(), time.process_time()
    sessions = os.path.join(home, "sessions")
    os.makedirs(sessions, 0o700)
    uid = os.getuid()
    fds: list[int] = []
    temps: list[tuple[str, str]] = []
    for sid, header, _ in logs:
        directory = os.path.join(sessions, sid)
        os.stat(sessions)  # `_make_dirs`: is the parent there (no ancestor walk)
        os.mkdir(directory, 0o700)
        for d in (home, sessions, directory):  # issue 15: ours alone, 0700, not a symlink
            st = os.lstat(d)
            if st.st_uid != uid or st.st_mode & 0o022:
                raise SystemExit(f"{d}: unsafe")
        path = os.path.join(directory, FILE)
        if os.path.lexists(path):
            raise SystemExit(f"{path} exists")
        temp = os.path.join(directory, TEMP + secrets.token_hex(8))
        fd = os.open(temp, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.write(fd, _dumps(header))
        fds.append(fd)
        temps.append((temp, path))
    if fsync:
        syncfs(fds[0])  # the headers are durable before any name points at them
        syncs += 1
    for temp, path in temps:
        os.link(temp, path, follow_symlinks=False)
        os.unlink(temp)
    if fsync:
        syncfs(fds[0])  # the directory entries
        syncs += 1
    sizes = [os.fstat(fd).st_size for fd in fds]
    rounds = max(len(batches) for _, _, batches in logs)
    for r in range(rounds):
        for i, (_, _, batches) in enumerate(logs):
            if r >= len(batches):
                continue
            data = b"".join(_dumps(event) for event in batches[r])
            fd = fds[i]
            if os.fstat(fd).st_size != sizes[i]:  # the truncate rule's check
                raise SystemExit("unconfirmed bytes")
            os.write(fd, data)
            sizes[i] += len(data)
            writes += 1
            written += len(data)
        if fsync:
            syncfs(fds[0])
            syncs += 1
    for fd in fds:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
    return {"wall": time.perf_counter() - wall0, "cpu": time.process_time() - cpu0, "syncs": syncs,
            "writes": writes, "events": sum(len(b) for _, _, bs in logs for b in bs), "sessions": len(logs), "bytes": written}


def child(argv: list[str]) -> None:
    """The floor process: `--floor-child INPUT HOME FSYNC`; prints one JSON line."""
    source, home, fsync, pool = argv[0], argv[1], argv[2] == "true", argv[3] == "pool"
    with open(source, "rb") as f:
        logs = [(sid, header, cut_batches(events, pool=pool)) for sid, header, events in marshal.load(f)]
    result = floor_loop(home, logs, fsync)
    result["imports"] = _T_IMPORTS
    print(json.dumps(result))


def main() -> None:
    import shutil
    import statistics
    import tempfile
    from pathlib import Path

    from fanout import CPU, command_for, run_once, transcript  # benchmarks/ is sys.path[0]

    parser = argparse.ArgumentParser()
    parser.add_argument("--children", default="100,1000,3000", help="comma-separated N values")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--no-fsync", action="store_true")
    args = parser.parse_args()
    sizes = [int(x) for x in args.children.split(",")]
    fsync = not args.no_fsync
    env = {**os.environ, "DSH_PERSISTENCE__FSYNC": "true" if fsync else "false"}
    env.pop("DSH_HOME", None)
    runtime: dict[int, list[float]] = {n: [] for n in sizes}
    floors: dict[int, list[dict]] = {n: [] for n in sizes}
    floors_all: dict[int, list[dict]] = {n: [] for n in sizes}  # one tool barrier per step
    start: list[float] = []
    with tempfile.TemporaryDirectory(prefix="dsh-ffloor-", dir=os.environ.get("BENCH_DIR")) as tmp:
        files, inputs, runtime_bytes = {}, {}, {}
        for n in sizes:
            files[n] = Path(tmp) / f"fanout-{n}.yaml"
            files[n].write_text(json.dumps(transcript(n)))
        for r in range(args.repeat):
            start.append(run_once([sys.executable, "-c", "pass"], env, "floor")[0])
            for n in sizes:  # interleaved: every round runs every N, runtime then floor
                home = Path(tmp) / f"home-{n}-{r}"
                wall, _, out = run_once(command_for(files[n], n, home), env, str(n))
                if "ALL_RECEIVED" not in out:
                    raise SystemExit(f"N={n}: unexpected answer {out!r}")
                runtime[n].append(wall)
                if n not in inputs:  # the floor writes the runtime's own events (decoded, untimed)
                    inputs[n] = Path(tmp) / f"logs-{n}.marshal"
                    inputs[n].write_bytes(marshal.dumps(logs_of(str(home))))
                    runtime_bytes[n] = sum(p.stat().st_size for p in home.glob("sessions/*/session.jsonl"))
                shutil.rmtree(home, ignore_errors=True)
                for mode, into in (("pool", floors[n]), ("all", floors_all[n])):
                    fhome = Path(tmp) / f"floor-{n}-{r}-{mode}"
                    cmd = [sys.executable, __file__, "--floor-child", str(inputs[n]), str(fhome), str(fsync).lower(), mode]
                    _, _, fout = run_once(cmd, env, f"floor-{mode}-{n}")
                    into.append(json.loads(fout))
                    if into[-1]["bytes"] != runtime_bytes[n]:  # the same bytes, or the floor is wrong
                        raise SystemExit(f"N={n}: floor wrote {into[-1]['bytes']} bytes, runtime {runtime_bytes[n]}")
                    shutil.rmtree(fhome, ignore_errors=True)
    load = os.getloadavg()
    pass_s = statistics.median(start)
    print(f"fan-out vs the rule floor, fsync={str(fsync).lower()}, runs={args.repeat}, "
          f"loadavg {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, nproc {os.cpu_count()}")
    cpu_pass = statistics.median(CPU["floor"])
    print(f"`python -c pass`: median {pass_s * 1000:.0f} ms, cpu {cpu_pass * 1000:.0f} ms")
    for n in sizes:
        rt, rt_cpu = statistics.median(runtime[n]), statistics.median(CPU[str(n)])
        print(f"N={n:5}  runtime: wall {rt:6.2f}s  cpu {rt_cpu:6.2f}s  "
              f"(per child {(rt - pass_s) / n * 1000:6.3f} ms wall, {rt_cpu / n * 1000:6.3f} ms cpu)")
        for label, f in (("floor, the runtime's barriers", floors[n]), ("floor, 1 tool barrier/step", floors_all[n])):
            fl_wall = statistics.median(x["wall"] for x in f)
            fl_cpu = statistics.median(x["cpu"] for x in f)
            fl_proc = pass_s + statistics.median(x["imports"] for x in f) + fl_wall
            counts = f[0]
            print(
                f"  {label:30} loop wall {fl_wall:6.3f}s cpu {fl_cpu:6.3f}s; whole process {fl_proc:6.3f}s "
                f"({counts['sessions']} sessions, {counts['events']} events, {counts['writes']} writes, "
                f"{counts['syncs']} syncs, {counts['bytes'] / 1e6:.1f} MB); runtime / floor: wall {rt / fl_proc:5.1f}x "
                f"cpu {rt_cpu / (fl_cpu + cpu_pass):5.1f}x; floor per child {fl_wall / n * 1e6:6.0f} µs wall "
                f"{fl_cpu / n * 1e6:6.0f} µs cpu"
            )
    if len(sizes) > 1:
        lo = sizes[0]
        for n in sizes[1:]:
            fl = (statistics.median(x["wall"] for x in floors[n]) - statistics.median(x["wall"] for x in floors[lo])) / (n - lo)
            rt_m = (statistics.median(CPU[str(n)]) - statistics.median(CPU[str(lo)])) / (n - lo)
            print(f"marginal per child ({lo}->{n}): runtime cpu {rt_m * 1000:.3f} ms, floor (runtime's barriers) "
                  f"wall {fl * 1000:.3f} ms")

if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--floor-child":
        child(sys.argv[2:])
    else:
        main()
