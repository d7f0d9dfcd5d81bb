#!/usr/bin/env bash
# make demo-real's AdaSPEC heads of head seeds 0-2 (sampled answers) in one bench-real run on the first 40 GSM8K test
# prompts, then alpha per seed and pooled over the seeds with 95 % intervals (alpha_over_seeds.py), per row kind:
#
#   experiments/smollm2/bench_head_seeds.sh t1       # temperature 1: chain gamma 3, hybrid k4-d3-n12+lookup8+sample
#   experiments/smollm2/bench_head_seeds.sh greedy   # chain gamma 3, tree k4-d4-n8, hybrid k4-d3-n12+lookup8
#
# Train the heads first: seed 0 by `make demo-real`, seeds 1 and 2 by its training commands with ARGS=seed=<s>
# (experiments/smollm2/README.md, "The default head: sampled answers"). Writes
# bench/results/smollm2-<NAME>-<t1|greedy>-p<PROMPTS>.json, and machine.txt and alpha.md under
# experiments/results/smollm2/<NAME>-<t1|greedy>-p<PROMPTS>/ (NAME: demo-real-sampled-seeds unless set; PROMPTS: the
# first 40 test prompts unless set). Run it alone on the cores. The Hydra overrides (target, prompts, the heads'
# serving) are make bench-real's.
#
# Heads of other recipes, trained by make demo-real under a root of their own (ARGS=paths.root=<root>), join the same
# run as further "<label>=<root>" arguments, the default heads first ("head seed=outputs"); alpha.md then gives each
# label's pooled alpha minus the first's, paired by prompt. SEEDS picks the head seeds (default "0 1 2"), e.g.
#   SEEDS=0 NAME=demo-real-sampled-n4096 experiments/smollm2/bench_head_seeds.sh t1 "head seed=outputs" \
#       "n4096 head seed=outputs/n4096"
# TREES replaces the kind's tree shapes (comma-separated); alpha.md then also gives each further shape's pooled alpha
# minus the first's, paired by prompt, e.g. the ways of drawing the root's children at temperature 1:
#   SEEDS=0 NAME=demo-real-root-draws TREES=k4-d3-n12+lookup8+sample,k4-d3-n12+lookup8+sample-last,\
#       k4-d3-n12+lookup8+sample-all experiments/smollm2/bench_head_seeds.sh t1
set -euo pipefail
case "${1:-}" in
  t1) temperature=1; trees=${TREES:-k4-d3-n12+lookup8+sample} ;;
  greedy) temperature=0; trees=${TREES:-k4-d4-n8,k4-d3-n12+lookup8} ;;
  *) echo "usage: [SEEDS=...] [NAME=...] $0 t1|greedy [<label>=<root> ...]" >&2; exit 2 ;;
esac
kind=$1
shift
groups=("$@")
[ ${#groups[@]} -gt 0 ] || groups=("head seed=outputs")
run=gsm8k/smollm2/seed%s/draft-k0.4-eagle3-warm540-target-answers-t1-s0-b64-unfinished/final
drafts=() labels=()
for group in "${groups[@]}"; do
  label=${group%%=*} root=${group#*=}
  labels+=("$label")
  for seed in ${SEEDS:-0 1 2}; do
    head=$root/$(printf "$run" "$seed")
    [ -e "$head/model.safetensors" ] || {
      how="make demo-real ARGS=seed=$seed"
      [ "$root" = outputs ] || how="make demo-real ARGS='seed=$seed paths.root=$root' with that root's HEAD_ANSWERS"
      echo "$head: no head of seed $seed; train it with $how (its training commands)" >&2
      exit 1
    }
    drafts+=(--draft "$label $seed=$head")
  done
done
mapfile -t overrides < <(make --no-print-directory -C "$(dirname "$0")/../.." -n bench-real \
  | grep adaspec.commands.bench_real | sed 's/^.* model=/model=/' | tr ' ' '\n' | grep -v '^$')
[ ${#overrides[@]} -gt 0 ] || { echo "make -n bench-real printed no bench_real command to take the overrides from" >&2; exit 1; }
prompts=${PROMPTS:-40}
stem=${NAME:-demo-real-sampled-seeds}-$kind-p$prompts
name=smollm2-$stem
out=experiments/results/smollm2/$stem
mkdir -p "$out"
{ date -u; lscpu | grep -E "^CPU\(s\)|Model name"; lscpu | grep -o -E "amx[a-z_]*|avx512_bf16" | sort -u; } > "$out/machine.txt"
.venv/bin/python -m adaspec.commands.bench_real --name "$name" --prompts "$prompts" --gammas 3 --no-adaptive \
  --temperatures $temperature --trees $trees --serving bfloat16-compiled --servings bfloat16-compiled-w2 "${drafts[@]}" \
  "${overrides[@]}"
first_tree=tree-${trees%%,*}
for policy in fixed-3 ${trees//,/ }; do
  [ "$policy" = fixed-3 ] || policy=tree-$policy
  for label in "${labels[@]}"; do
    against=()
    [ "$label" = "${labels[0]}" ] || against=(--against "${labels[0]}")
    echo; echo "$policy, temperature $temperature, $label:"; echo
    .venv/bin/python experiments/smollm2/alpha_over_seeds.py --policy "$policy" --temperature $temperature \
      --draft-prefix "$label" "${against[@]}" "bench/results/$name.json"
    if [ "$policy" != fixed-3 ] && [ "$policy" != "$first_tree" ]; then
      echo; echo "$policy against $first_tree, temperature $temperature, $label:"; echo
      .venv/bin/python experiments/smollm2/alpha_over_seeds.py --policy "$policy" --temperature $temperature \
        --draft-prefix "$label" --against-policy "$first_tree" "bench/results/$name.json"
    fi
  done
done > "$out/alpha.md"
cat "$out/alpha.md"
