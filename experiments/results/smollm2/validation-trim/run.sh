#!/bin/bash
# Stage 3's anonymous peak around validations: demo-real's stage 3 (the reference live), 30 steps validated every
# 10, alone on the cores; <name> names the run (the code as checked out at the time: see the README beside).
#   experiments/results/smollm2/validation-trim/run.sh <name>
cd /work/main
OUT=experiments/results/smollm2/validation-trim
cmd=$(make --no-print-directory -n demo-real | grep "stage=draft")
HF_HUB_OFFLINE=1 WANDB_MODE=offline $cmd stage.max_steps=30 stage.val_every_n_steps=10 stage.early_stop_patience=0 \
  stage.tag=valtrim$1 ${@:2} > /work/logs/valtrim-$1.out 2>&1
cp outputs/gsm8k/smollm2/seed0/draft-k0.4-eagle3-valtrim$1-target-answers/final/metrics.json $OUT/$1-metrics.json
