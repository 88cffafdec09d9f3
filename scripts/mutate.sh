#!/usr/bin/env bash
# Mutation run over the settlement core (issue 14): mutmut mutates loader/subagents/{notice,interrupt,
# teardown,report}.py and loader/agent/fold.py (see [tool.mutmut] in pyproject.toml) and runs, per
# mutant, only the tests of tests/subagents, tests/agent and tests/host/test_methods.py that cover
# the mutated function. Not part of the default pytest run. Installs nothing: it needs the
# `mutation` extra (pip install -e '.[test,mutation]').
#
#   scripts/mutate.sh            # fresh run, summary at the end
#   MUTATE_JOBS=4 scripts/mutate.sh
#   MUTATE_KEEP=1 scripts/mutate.sh   # reuse mutants/ (mutmut re-checks only what changed)
#   scripts/mutate.sh 'dsh.loader.subagents.teardown*'   # only mutants whose names match (fnmatch)
#   scripts/mutate.sh --quick    # CI-sized: the mutants of fold.py, interrupt.py and report.py
#
# Exit status: 0 when the run completed (survivors are reported, not fatal), 2 when the tools are
# missing, mutmut's own status otherwise.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
cd "$repo"

if ! python -c "import mutmut, pytest_timeout" 2>/dev/null; then
    echo "mutate.sh: mutmut and pytest-timeout are not installed; run: pip install -e '.[test,mutation]'" >&2
    exit 2
fi

jobs="${MUTATE_JOBS:-$(nproc)}"
if [ "${1:-}" = --quick ]; then
    shift
    set -- 'dsh.loader.agent.fold*' 'dsh.loader.subagents.interrupt*' 'dsh.loader.subagents.report*' "$@"
fi
# mutmut names a mutant after its file's path and matches it against the module the tests import.
# The folders install as dsh.loader and dsh.cli, so mutmut works in a staging copy (.mutation/,
# git-ignored) where they sit at dsh/loader and dsh/cli; the tests there import the mutated copy,
# which shadows the editable install (mutmut puts its mutants/ first on sys.path).
stage="$repo/.mutation"
if [ "${MUTATE_KEEP:-0}" != 1 ]; then
    rm -rf "$stage"
fi
mkdir -p "$stage/dsh"
rm -rf "$stage/dsh/loader" "$stage/dsh/cli" "$stage/tests"
cp -Rp loader "$stage/dsh/loader"
cp -Rp cli "$stage/dsh/cli"
cp -Rp tests profiles overlays transcripts README.md pyproject.toml "$stage/"
cd "$stage"
# Tests that read source files by path (the layer and one-writer checks) look for loader/ and cli/.
mkdir -p mutants
ln -sfn dsh/loader mutants/loader
ln -sfn dsh/cli mutants/cli
log="$(mktemp -t dsh-mutate.XXXXXX.log)"
start=$(date +%s)
echo "mutate.sh: mutmut run --max-children $jobs $* (progress in $log)"
if ! mutmut run --max-children "$jobs" "$@" >"$log" 2>&1; then
    tail -c 4000 "$log" >&2
    exit 1
fi
elapsed=$(( $(date +%s) - start ))
mutmut export-cicd-stats >/dev/null

echo "mutate.sh: surviving mutants (inspect one with: mutmut show NAME)"
mutmut results | grep -E ': survived$' || true

python - "$elapsed" <<'PY'
import json, sys
s = json.load(open("mutants/mutmut-cicd-stats.json"))
# Covered = checked with at least one test; a filtered run leaves the other mutants unchecked.
covered = s["killed"] + s["timeout"] + s["survived"] + s["suspicious"] + s["segfault"]
survived = s["survived"]
rate = 100.0 * survived / covered if covered else 0.0
print(f"mutate.sh: {s['total']} mutants, {covered} covered by a test, "
      f"{s['killed']} killed, {s['timeout']} timed out (counted as killed), {survived} survived, "
      f"{s['suspicious']} suspicious; survival among covered: {rate:.1f}%; {sys.argv[1]} s")
PY
