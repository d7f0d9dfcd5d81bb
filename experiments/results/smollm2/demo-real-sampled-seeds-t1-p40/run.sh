#!/usr/bin/env bash
# The three sampled-answer head seeds of make demo-real (trained as experiments/smollm2/README.md, "The default head:
# sampled answers", says) at temperature 1 on 40 prompts, in one bench-real run; alone on the cores.
set -euo pipefail
out=experiments/results/smollm2/demo-real-sampled-seeds-t1-p40
{ date -u; lscpu | grep -E "^CPU\(s\)|Model name"; lscpu | grep -o -E "amx[a-z_]*|avx512_bf16" | sort -u; } > $out/machine.txt
d=outputs/gsm8k/smollm2
run=draft-k0.4-eagle3-warm540-target-answers-t1-s0-b64-unfinished/final
.venv/bin/python -m adaspec.commands.bench_real --name smollm2-demo-real-sampled-seeds-t1-p40 --prompts 40 --gammas 3 \
  --no-adaptive --temperatures 1 --trees k4-d3-n12+lookup8+sample --serving bfloat16-compiled \
  --servings bfloat16-compiled-w2 \
  --draft "head seed 0=$d/seed0/$run" --draft "head seed 1=$d/seed1/$run" --draft "head seed 2=$d/seed2/$run" \
  model=smollm2 task=gsm8k task.local_dir=../shared/data/gsm8k task.n_train=500 task.n_val=64 distill.data=target \
  distill.teacher=cache distill.cache_mode=topk pretrain=none model.draft_kind=eagle3 distill.ttt_passes=3 \
  distill.ttt_warmup_steps=540 task.n_train=7409 \
  decode.draft_dtype=bfloat16 decode.draft_compile=true
.venv/bin/python experiments/smollm2/alpha_over_seeds.py --policy tree-k4-d3-n12+lookup8+sample --temperature 1 \
  --draft-prefix "head seed" bench/results/smollm2-demo-real-sampled-seeds-t1-p40.json
