#!/bin/bash
# Stage 3's anonymous peak with the reference run before the draft (main at 44a58ce) and after it (the same commit
# with only that order reverted, a worktree): demo-real's stage 3, 40 steps, the reference live, alone on the cores.
#   experiments/results/smollm2/stage3-order/run.sh <repo folder> <name>
cd "$1"
OUT=/work/main/experiments/results/smollm2/stage3-order
cmd=$(make --no-print-directory -n demo-real | grep "stage=draft")
PYTHONPATH="$1/src" HF_HUB_OFFLINE=1 WANDB_MODE=offline $cmd stage.max_steps=40 stage.val_every_n_steps=40 \
  stage.early_stop_patience=0 stage.tag=order$2 > /work/logs/stage3-order-$2.out 2>&1
cp outputs/gsm8k/smollm2/seed0/draft-k0.4-eagle3-order$2-target-answers/final/metrics.json $OUT/$2-metrics.json
