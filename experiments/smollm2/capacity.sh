#!/usr/bin/env bash
# The capacity experiment (issue 31) one draft size at a time, collecting after each size, so that every
# finished size is in experiments/results/<group, with dashes>/seed<s>/ before the next starts (commit it
# then); resumable: rerun the same command after an interruption. Sizes: adaspec.paper.plan.GROUPS[group].
#   experiments/smollm2/capacity.sh 0             seed 0 of smollm2_gsm8k_capacity
#   experiments/smollm2/capacity.sh 1 smollm2_gsm8k_stage0_tokens
set -euo pipefail
seed=${1:-0} group=${2:-smollm2_gsm8k_capacity}
out=experiments/results/${group//_/-}/seed$seed
tasks=$(.venv/bin/python -c "from adaspec.paper.plan import GROUPS; print(' '.join(GROUPS['$group']))")
for task in $tasks; do
  make --no-print-directory paper ARGS="--tasks $task --seeds $seed --results $out"
  make --no-print-directory paper ARGS="--tasks $group --seeds $seed --collect-only --results $out"
done
