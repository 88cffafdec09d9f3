#!/bin/sh
# Long fuzz run (issue 15 item 7): every fuzz surface at 10,000 examples (hypothesis profile `fuzz`,
# see tests/cli/fuzz_kit.py). The CI suite runs the same tests at 300 examples each.
#
#   scripts/fuzz.sh                                        # all surfaces
#   FUZZ_TESTS=tests/cli/test_fuzz_rpc.py scripts/fuzz.sh   # one surface
#   scripts/fuzz.sh -x                                     # extra arguments go to pytest
#
# Per test, hypothesis prints the examples run ("N passing, M failing, K invalid"): passing examples
# are clean cases; a traceback, a wrong exit code or a changed file fails the test with the
# shrunk input; a case over the 30 s deadline fails it as DeadlineExceeded (a hang backstop).
set -eu
cd "$(dirname "$0")/.."
tests="${FUZZ_TESTS:-tests/cli/test_fuzz_yaml.py tests/cli/test_fuzz_ids.py tests/cli/test_fuzz_env.py tests/cli/test_fuzz_rpc.py tests/session/test_fuzz_sessions.py}"
# shellcheck disable=SC2086  # $tests is a list of paths
HYPOTHESIS_PROFILE="${HYPOTHESIS_PROFILE:-fuzz}" exec python -m pytest -q -p no:cacheprovider \
    --hypothesis-show-statistics $tests "$@"
