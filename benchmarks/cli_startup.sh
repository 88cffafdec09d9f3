#!/usr/bin/env bash
# Start-up cost of the `dsh` command (STYLE §10, issue 13 "Command line" rows): wall time of
#   - `python -c pass` with the same interpreter: the floor every figure is divided by
#   - `dsh --version`, `dsh --help`
#   - `dsh interrupt ROOT/CHILD` against a live run (header check, routing, socket connect, one
#     JSON-RPC round trip; the first call stops CHILD's hanging turn, later ones are accepted no-ops
#     on the idle child, and the root keeps hanging, so the run keeps serving)
#   - `dsh run --transcript background-settlement` (whole process, a fresh home each time)
# Every command runs once per round, round after round (interleaved, so a load spike on this shared
# machine hits all of them alike); each line gives the median and min over RUNS rounds (after two
# warm-up rounds), the median's ratio to the same-run floor, and the median CPU time (user + sys).
# With DSH_BEFORE=/path/to/other/dsh every dsh command also runs with that executable in the same
# rounds, marked "(before)": an interleaved before/after comparison.
#
# A last row, `dsh --help` with TYPER_USE_RICH=0, shows what Typer's plain (non-rich) help would
# cost: rich's import is most of `--help` (see benchmarks/README.md, "Command line").
# Bytecode is cached (PYTHONDONTWRITEBYTECODE unset), as for an installed dsh; the warm-up writes it.
#
# Usage: benchmarks/cli_startup.sh [RUNS]   (default 20; DSH=/path/to/dsh to pick the command)
set -euo pipefail
unset PYTHONDONTWRITEBYTECODE PYTHONUNBUFFERED

RUNS="${1:-20}"
DSH="${DSH:-$(command -v dsh || echo /tmp/venv/bin/dsh)}"
PY="$(dirname "$DSH")/python"
[ -x "$PY" ] || PY="$(command -v python3)"

work="$(mktemp -d /tmp/dsh-bench-XXXXXX)"
run_pid=""
cleanup() {
  if [ -n "$run_pid" ] && kill -0 "$run_pid" 2>/dev/null; then
    kill -INT "$run_pid" 2>/dev/null || true
    wait "$run_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

# A live run whose root starts one background child and then hangs in its second model request;
# the child hangs too. Since issue 15, `dsh interrupt` needs a child whose saved header names the
# parent, so the address must be a real one.
cat > "$work/hang.yaml" <<'EOF'
{"version": 1, "name": "hang", "task": "wait", "agents": {
  "root": {"replies": [{"toolCalls": [{"id": "sa", "name": "subagent", "arguments": {"label": "c", "prompt": "wait"}}]},
                       {"hang": {}}]},
  "child": {"spawnedBy": "sa", "replies": [{"hang": {}}]}}}
EOF
"$DSH" run --json --transcript "$work/hang.yaml" --home "$work/home" > "$work/run.ndjson" 2> "$work/run.err" &
run_pid=$!

# Wait (bounded) until the child has started: the run is then serving its socket.
root=""
child=""
for _ in $(seq 1 200); do
  line="$(grep -m1 '"name":"subagent/start"' "$work/run.ndjson" 2>/dev/null || true)"
  if [ -n "$line" ]; then
    child="$(echo "$line" | sed -E 's/.*"sessionId":"([^"]+)".*/\1/')"
    root="$(echo "$line" | sed -E 's/.*"parentSessionId":"([^"]+)".*/\1/')"
    break
  fi
  sleep 0.05
done
if [ -z "$root" ]; then
  echo "the live run did not start; stderr:" >&2
  cat "$work/run.err" >&2
  exit 1
fi
interrupt=("$DSH" interrupt "$root/$child" --home "$work/home")
"${interrupt[@]}" > /dev/null  # must succeed: exit 0, T-CLI-INTERRUPTED


echo "dsh: $DSH${DSH_BEFORE:+   before: $DSH_BEFORE}"
echo "runs: $RUNS   load: $(cut -d' ' -f1-3 /proc/loadavg)   cpus: $(nproc)"
"$PY" - "$RUNS" "$PY" "$work" "$root/$child" "$DSH" ${DSH_BEFORE:+"$DSH_BEFORE"} <<'EOF'
import os, resource, statistics, subprocess, sys, time

runs, py, work, address, *binaries = sys.argv[1:]
runs = int(runs)
commands = [("python -c pass", [py, "-c", "pass"])]
for index, dsh in enumerate(binaries):
    tag = "" if index == 0 else " (before)"
    commands += [
        (f"dsh --version{tag}", [dsh, "--version"]),
        (f"dsh --help{tag}", [dsh, "--help"]),
        (f"dsh interrupt (live run){tag}", [dsh, "interrupt", address, "--home", f"{work}/home"]),
        (f"dsh run --transcript b-s{tag}", [dsh, "run", "--transcript", "background-settlement", "--home", None]),
    ]
commands.append(("dsh --help (TYPER_USE_RICH=0)", [binaries[0], "--help"]))
plain = {**os.environ, "TYPER_USE_RICH": "0"}
wall = {name: [] for name, _ in commands}
cpu = {name: [] for name, _ in commands}
for round_ in range(-2, runs):  # two warm-up rounds, not counted
    for index, (name, argv) in enumerate(commands):
        argv = [f"{work}/run-home-{round_}-{index}" if a is None else a for a in argv]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        env = plain if "TYPER_USE_RICH" in name else None
        done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
        elapsed = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if done.returncode != 0:
            sys.exit(f"{name} exited {done.returncode}: {done.stderr.decode()}")
        if round_ >= 0:
            wall[name].append(elapsed)
            cpu[name].append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
floor = statistics.median(wall["python -c pass"])
for name, _ in commands:
    median = statistics.median(wall[name])
    print(f"{name:<36} median {median * 1000:7.1f} ms   min {min(wall[name]) * 1000:7.1f} ms"
          f"   {median / floor:5.1f}x floor   cpu {statistics.median(cpu[name]) * 1000:7.1f} ms")
EOF
