#!/usr/bin/env bash
# Issue 30 (4): the capacity experiment's finished forward-KL drafts of one seed (each independent size, and the
# EAGLE-3 head: the capacity experiment's when it has one, else make demo-real's AdaSPEC k=0.4 head and its
# DistillSpec reference, which stage 3 at k=1 reproduces bit for bit), timed on the 40 test
# prompts greedy and at temperature 1 in one bench-real process: one set of target-only runs in every serving
# configuration of `make bench-real`, speed-ups against the fastest of them, and prompt lookup as a row of its
# own (the paper configs override the baseline group to none; `baseline=[prompt_lookup]` puts it back).
# Writes bench/results/capacity-seed<s>-g<gamma>.json.
#   experiments/smollm2/capacity_serving.sh 0 3 [bench-real options, e.g. --draft-dtype bfloat16]
#   KS="1" ...                 the independent drafts at these k only (default: 0.4 1)
#   DRY_RUN=1 ...              prints the command instead
# Train the independent drafts with capacity_drafts.sh (or capacity.sh); about 1 h alone on two cores.
set -euo pipefail
seed=${1:-0} gamma=${2:-3}; shift $(( $# < 2 ? $# : 2 ))
root=outputs/capacity-real/gsm8k/smollm2/seed$seed
drafts=()
add() { [ -f "$2/meta.json" ] && drafts+=(--draft "$1=$2") || true; }
for size in h128: h256:-h256x6 h384:-h384x8; do
  name=${size%%:*} suffix=${size#*:}
  for k in ${KS:-0.4 1}; do add "$name-k$k" "$root/draft-k$k$suffix-target-answers/final"; done
done
if [ -f "$root/draft-k0.4-eagle3-target-answers/final/meta.json" ]; then
  for k in 0.4 1; do add "head-k$k" "$root/draft-k$k-eagle3-target-answers/final"; done
else
  demo=outputs/gsm8k/smollm2/seed0
  add demo-real-head-k0.4 "$demo/draft-k0.4-eagle3-target-answers/final"
  add demo-real-head-k1 "$demo/ref-eagle3-target-answers/final"
fi
[ ${#drafts[@]} -gt 0 ] || { echo "no finished capacity draft under $root: run experiments/smollm2/capacity_drafts.sh $seed" >&2; exit 1; }
exec ${DRY_RUN:+echo} .venv/bin/python -m adaspec.commands.bench_real --name "capacity-seed$seed-g$gamma" --prompts 40 \
  --gammas "$gamma" --temperatures 0,1 --no-adaptive --serving bfloat16-compiled \
  --servings float32-compiled,bfloat16-compiled-w2 "${drafts[@]}" "$@" paper=smollm2_gsm8k_capacity seed="$seed" 'baseline=[prompt_lookup]'
