#!/usr/bin/env bash
# T=1 alpha with intervals: the three sampled-answer head seeds in one bench-real run, 40 prompts; after the parts loop stops
cd /work/main
while ! grep -q stopped /work/logs/s74.times; do sleep 10; done
out=experiments/results/smollm2/demo-real-sampled-seeds-t1-p40
mkdir -p $out
{ date -u; lscpu | grep -E "^CPU\(s\)|Model name"; lscpu | grep -o -E "amx[a-z_]*|avx512_bf16" | sort -u; } > $out/machine.txt
echo "=== $(date +%H:%M:%S) bench start" >> /work/logs/bench74.times
d=outputs/gsm8k/smollm2
run=draft-k0.4-eagle3-warm540-target-answers-t1-s0-b64-unfinished/final
.venv/bin/python -m adaspec.commands.bench_real --name smollm2-demo-real-sampled-seeds-t1-p40 --prompts 40 --gammas 3 \
  --no-adaptive --temperatures 1 --trees k4-d3-n12+lookup8+sample --serving bfloat16-compiled \
  --servings bfloat16-compiled-w2 \
  --draft "head seed 0=$d/seed0/$run" --draft "head seed 1=$d/seed1/$run" --draft "head seed 2=$d/seed2/$run" \
  model=smollm2 task=gsm8k task.local_dir=../shared/data/gsm8k task.n_train=500 task.n_val=64 distill.data=target \
  distill.teacher=cache distill.cache_mode=topk pretrain=none model.draft_kind=eagle3 distill.ttt_passes=3 \
  distill.ttt_warmup_steps=540 task.n_train=7409 \
  decode.draft_dtype=bfloat16 decode.draft_compile=true > /work/logs/bench74.out 2>&1
echo "=== $(date +%H:%M:%S) bench done rc=$?" >> /work/logs/bench74.times
