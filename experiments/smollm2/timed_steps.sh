#!/usr/bin/env bash
# Every command of `make -n <target>`, run one after another, each timed (wall, user, sys CPU seconds, peak
# RSS) into a steps log; stops at the first that fails. How the README's step-by-step timings were made:
#   experiments/smollm2/timed_steps.sh demo-real outputs/demo-real-steps.log [ARGS="..."]
# SKIP=<pattern> leaves out the commands that match it (grep's basic pattern), e.g. SKIP=adaspec.commands.evaluate
# for a recipe's training commands only.
set -euo pipefail
target=$1 log=$2
shift 2
kept() { if [ -n "${SKIP:-}" ]; then grep -v -- "$SKIP"; else cat; fi; }
mapfile -t commands < <(make --no-print-directory -n "$target" "$@" | kept)
for command in "${commands[@]}"; do
  echo "=== $(date +%H:%M:%S) $command" >> "$log"
  /usr/bin/time -a -o "$log" -f "=== wall %e s, user %U s, sys %S s, maxrss %M KB" bash -c "$command"
done
echo "=== $(date +%H:%M:%S) done" >> "$log"
