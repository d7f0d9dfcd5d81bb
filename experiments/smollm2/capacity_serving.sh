#!/usr/bin/env bash
# Issue 30 (4): every DistillSpec and AdaSPEC k=0.4 draft of one seed of the capacity experiment (forward KL:
# each independent size and the EAGLE-3 head, whichever have finished) and prompt lookup, timed on the 40 test
# prompts greedy and at temperature 1 in one bench-real process: one set of target-only runs in every serving
# configuration, speed-ups against the fastest of them. Writes bench/results/capacity-seed<s>-g<gamma>.json.
#   experiments/smollm2/capacity_serving.sh 0 3        (seed, gamma; about 1.5 h alone on two cores)
#   DRY_RUN=1 experiments/smollm2/capacity_serving.sh 0 prints the command instead
set -euo pipefail
seed=${1:-0} gamma=${2:-3}
root=outputs/capacity-real/gsm8k/smollm2/seed$seed
drafts=()
for size in h128: h256:-h256x6 h384:-h384x8 head:-eagle3; do
  name=${size%%:*} suffix=${size#*:}
  for k in 0.4 1; do
    folder=$root/draft-k$k$suffix-target-answers/final
    if [ -f "$folder/meta.json" ]; then drafts+=(--draft "$name-k$k=$folder"); fi
  done
done
[ ${#drafts[@]} -gt 0 ] || { echo "no finished capacity draft under $root: run experiments/smollm2/capacity.sh $seed" >&2; exit 1; }
exec ${DRY_RUN:+echo} .venv/bin/python -m adaspec.commands.bench_real --name "capacity-seed$seed-g$gamma" --prompts 40 \
  --gammas "$gamma" --temperatures 0,1 --no-adaptive --serving bfloat16-compiled \
  --servings float32,float32-compiled,bfloat16-compiled-w2 "${drafts[@]}" paper=smollm2_gsm8k_capacity seed="$seed"
