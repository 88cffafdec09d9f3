#!/usr/bin/env bash
# Run a command beside two CPU-burning processes (this machine has two cores); kill them after.
#   benchmarks/with_cpu_load.sh dsh flow four-children-one-step --repeat 100
set -u
burners=()
for _ in 1 2; do
  python3 -c 'while True: pass' &
  burners+=("$!")
done
"$@"
status=$?
kill "${burners[@]}"
wait "${burners[@]}" 2>/dev/null
exit "$status"
