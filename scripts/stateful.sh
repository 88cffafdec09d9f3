#!/usr/bin/env bash
# The long run of the stateful interleaving test (issue 14 item 4): 10,000 random examples of
# tests/subagents/test_stateful.py, not part of the default pytest run's budget.
#
#   scripts/stateful.sh                 # 10,000 examples, a fresh random seed (printed on failure)
#   DSH_STATEFUL_EXAMPLES=500 scripts/stateful.sh
#   SEED=1234 scripts/stateful.sh       # replay one seed
#
#   DSH_STATEFUL_STEPS=20 scripts/stateful.sh   # shorter rule sequences (default 30)
# Progress: /tmp/dsh-stateful-progress gets one byte per finished example (shrinking included):
# `.` passed, `F` failed, `x` discarded by hypothesis; `tr -cd F < FILE | wc -c` counts failures.
# Hypothesis prints the number of examples run and any failing rule sequence (shrunk) at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
export DSH_STATEFUL_PROFILE=long
export DSH_STATEFUL_EXAMPLES="${DSH_STATEFUL_EXAMPLES:-10000}"
# One byte per finished example (`wc -c` it while the run goes on).
export DSH_STATEFUL_PROGRESS="${DSH_STATEFUL_PROGRESS:-${TMPDIR:-/tmp}/dsh-stateful-progress}"
: > "${DSH_STATEFUL_PROGRESS}"
seed="${SEED:-$RANDOM$RANDOM}"
echo "stateful: ${DSH_STATEFUL_EXAMPLES} examples, seed ${seed}" >&2
exec python -m pytest tests/subagents/test_stateful.py -q -p no:cacheprovider \
    --hypothesis-seed="${seed}" --hypothesis-show-statistics "$@"
