#!/usr/bin/env bash
# Issue 30: is the preset draft data- or capacity-limited? Its DistillSpec alpha after no stage 0, a quarter of
# stage 0's data and twice as much, one task at a time, collected after each into
# experiments/results/smollm2-gsm8k-stage0-tokens/seed<s>/ (commit it then); resumable: rerun after an
# interruption. The full-data point is the capacity experiment's h128 task (the same task, seed and steps):
# its committed evaluation is copied in rather than trained a third time, and collect checks that its settings
# are this group's.
#   experiments/smollm2/stage0_tokens.sh 0
set -euo pipefail
seed=${1:-0} group=smollm2_gsm8k_stage0_tokens
out=experiments/results/smollm2-gsm8k-stage0-tokens/seed$seed
full=experiments/results/smollm2-gsm8k-capacity/seed$seed/smollm2_gsm8k_capacity_h128/seed$seed/main.json
if [[ -f $full && ! -f $out/smollm2_gsm8k_capacity_h128/seed$seed/main.json ]]; then
  mkdir -p "$out/smollm2_gsm8k_capacity_h128/seed$seed"
  cp "$full" "$out/smollm2_gsm8k_capacity_h128/seed$seed/main.json"
fi
tasks=$(.venv/bin/python -c "from adaspec.paper.plan import CAPACITY, GROUPS
print(' '.join(t for t in GROUPS['$group'] if t != CAPACITY[0].name))")  # all but the copied full-data point
for task in $tasks; do
  make --no-print-directory paper ARGS="--tasks $task --seeds $seed --results $out"
  make --no-print-directory paper ARGS="--tasks $group --seeds $seed --collect-only --no-sweeps --results $out"
done
