#!/usr/bin/env bash
# Start-up cost of the `dsh` command (STYLE §10): median wall time of
#   1. `dsh --help`
#   2. `dsh interrupt ROOT/CHILD` against a live run (header check, routing, socket connect, one
#      JSON-RPC round trip; the first call stops CHILD's hanging turn, later ones are accepted no-ops
#      on the idle child, and the root keeps hanging, so the run keeps serving)
#   3. `python -c pass` with the same interpreter, as the floor
# Uses hyperfine when installed (`apt-get install -y hyperfine`), else a Python timing loop.
#
# Usage: benchmarks/cli_startup.sh [RUNS]   (default 20; DSH=/path/to/dsh to pick the command)
set -euo pipefail

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

echo "dsh: $DSH"
echo "runs: $RUNS"
if command -v hyperfine > /dev/null; then
  hyperfine --style basic --warmup 3 --runs "$RUNS" --export-json "$work/times.json" \
    -n "python -c pass" "$PY -c pass" \
    -n "dsh --help" "$DSH --help" \
    -n "dsh interrupt (live run)" "${interrupt[*]}" > /dev/null
  "$PY" - "$work/times.json" <<'EOF'
import json, sys
for r in json.load(open(sys.argv[1]))["results"]:
    print(f"{r['command']:<28} median {r['median'] * 1000:7.1f} ms   mean {r['mean'] * 1000:7.1f} ms"
          f"   min {r['min'] * 1000:7.1f} ms   max {r['max'] * 1000:7.1f} ms")
EOF
else
  "$PY" - "$RUNS" "$PY -c pass" "$DSH --help" "${interrupt[*]}" <<'EOF'
import shlex, statistics, subprocess, sys, time
runs = int(sys.argv[1])
names = ["python -c pass", "dsh --help", "dsh interrupt (live run)"]
for name, command in zip(names, sys.argv[2:]):
    argv = shlex.split(command)
    for _ in range(3):
        subprocess.run(argv, stdout=subprocess.DEVNULL, check=True)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, check=True)
        times.append(time.perf_counter() - start)
    print(f"{name:<28} median {statistics.median(times) * 1000:7.1f} ms   min {min(times) * 1000:7.1f} ms"
          f"   max {max(times) * 1000:7.1f} ms")
EOF
fi
