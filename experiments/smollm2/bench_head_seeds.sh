#!/usr/bin/env bash
# make demo-real's AdaSPEC heads of head seeds 0-2 (sampled answers) in one bench-real run on the first 40 GSM8K test
# prompts, then alpha per seed and pooled over the seeds with 95 % intervals (alpha_over_seeds.py), per row kind:
#
#   experiments/smollm2/bench_head_seeds.sh t1       # temperature 1: chain gamma 3, hybrid k4-d3-n12+lookup8+sample
#   experiments/smollm2/bench_head_seeds.sh greedy   # chain gamma 3, tree k4-d4-n8, hybrid k4-d3-n12+lookup8
#
# Train the heads first: seed 0 by `make demo-real`, seeds 1 and 2 by its training commands with ARGS=seed=<s>
# (experiments/smollm2/README.md, "The default head: sampled answers"). Writes
# bench/results/smollm2-demo-real-sampled-seeds-<t1|greedy>-p40.json, and machine.txt and alpha.md under
# experiments/results/smollm2/demo-real-sampled-seeds-<t1|greedy>-p40/. Run it alone on the cores.
set -euo pipefail
case "${1:-}" in
  t1) temperature=1; trees=k4-d3-n12+lookup8+sample ;;
  greedy) temperature=0; trees=k4-d4-n8,k4-d3-n12+lookup8 ;;
  *) echo "usage: $0 t1|greedy" >&2; exit 2 ;;
esac
heads=outputs/gsm8k/smollm2
run=draft-k0.4-eagle3-warm540-target-answers-t1-s0-b64-unfinished/final
drafts=()
for seed in 0 1 2; do
  [ -e "$heads/seed$seed/$run/model.safetensors" ] || {
    echo "$heads/seed$seed/$run: no head of seed $seed; train it with make demo-real ARGS=seed=$seed (its training commands)" >&2
    exit 1
  }
  drafts+=(--draft "head seed $seed=$heads/seed$seed/$run")
done
name=smollm2-demo-real-sampled-seeds-$1-p40
out=experiments/results/smollm2/demo-real-sampled-seeds-$1-p40
mkdir -p $out
{ date -u; lscpu | grep -E "^CPU\(s\)|Model name"; lscpu | grep -o -E "amx[a-z_]*|avx512_bf16" | sort -u; } > $out/machine.txt
.venv/bin/python -m adaspec.commands.bench_real --name $name --prompts 40 --gammas 3 --no-adaptive \
  --temperatures $temperature --trees $trees --serving bfloat16-compiled --servings bfloat16-compiled-w2 "${drafts[@]}" \
  model=smollm2 task=gsm8k task.local_dir=../shared/data/gsm8k task.n_train=500 task.n_val=64 distill.data=target \
  distill.teacher=cache distill.cache_mode=topk pretrain=none model.draft_kind=eagle3 distill.ttt_passes=3 \
  distill.ttt_warmup_steps=540 task.n_train=7409 decode.draft_dtype=bfloat16 decode.draft_compile=true
for policy in fixed-3 ${trees//,/ }; do
  [ "$policy" = fixed-3 ] || policy=tree-$policy
  echo; echo "$policy, temperature $temperature:"; echo
  .venv/bin/python experiments/smollm2/alpha_over_seeds.py --policy "$policy" --temperature $temperature \
    --draft-prefix "head seed" bench/results/$name.json
done > $out/alpha.md
cat $out/alpha.md
