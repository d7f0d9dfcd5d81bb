#!/usr/bin/env bash
# Issue 30 (4): only the drafts capacity_serving.sh times, per size: stage 0, the forward-KL reference and the
# forward-KL drafts at k=0.4 and k=1 (capacity.sh also trains the -log alpha and LK arms and evaluates them:
# twice the time). The steps are the paper plan's own (`paper --dry-run`): the same configs as capacity.sh's
# (not always the same bits on another machine: experiments/README.md); each skips itself when finished.
#   experiments/smollm2/capacity_drafts.sh 0 h128 h384     (seed, sizes; about 30 min a size alone on two cores)
#   KS=1 ...      the drafts at these k only (default: 0.4 1); DRY_RUN=1 ... prints the steps instead
set -euo pipefail
python=${PYTHON:-.venv/bin/python}
seed=${1:-0}; shift || true
sizes=("$@"); [ ${#sizes[@]} -gt 0 ] || sizes=(h128 h256 h384)
plan_sizes="h128 h256 h384"  # experiments/paper/smollm2_gsm8k_capacity*.yaml
for size in "${sizes[@]}"; do
  [[ " $plan_sizes " == *" $size "* ]] || { echo "capacity_drafts.sh: no size $size in the plan; sizes: $plan_sizes" >&2; exit 2; }
  # the planner's own failure stops the script with its message and status (set -e)
  plan=$($python -m adaspec.commands.paper --tasks "smollm2_gsm8k_capacity_$size" --seeds "$seed" --dry-run)
  mapfile -t steps < <(grep -E '^python -m adaspec\.commands\.(train|cache) paper=smollm2_gsm8k_capacity(_target)?( |$)' <<<"$plan")
  [ ${#steps[@]} -gt 0 ] || { echo "capacity_drafts.sh: the plan of size $size has no training steps" >&2; exit 1; }
  for step in "${steps[@]}"; do
    case $step in *stage=draft*) [[ " ${KS:-0.4 1} " == *" ${step##* k=} "* ]] || continue ;; esac
    case $step in *commands.train*) step="$step resume=true" ;; esac
    if [ -n "${DRY_RUN:-}" ]; then echo "$step"; continue; fi
    echo "[capacity_drafts] $step" >&2
    ${step/#python/$python} </dev/null
  done
done
