#!/bin/bash
# Where the head's anonymous set jumps: demo-real's reference head (stage 2), 100 steps validated every 20, a row of
# metrics every step, with the code of checkout <src> (the heap trimmed after training steps only, or after
# validation batches too); <name> names the run.
#   experiments/results/smollm2/validation-trim-after/run.sh <name> <checkout> [overrides...]
cd /work/main
OUT=experiments/results/smollm2/validation-trim-after
cmd=$(make --no-print-directory -n demo-real | grep "stage=ref")
PYTHONPATH=$2/src HF_HUB_OFFLINE=1 WANDB_MODE=offline $cmd stage.max_steps=100 stage.val_every_n_steps=20 \
  stage.early_stop_patience=0 trainer.log_every_n_steps=1 stage.tag=vtrim$1 ${@:3} > /work/logs/vtrim-$1.out 2>&1
d=outputs/gsm8k/smollm2/seed0/ref-eagle3-vtrim$1-target-answers
cp $d/final/metrics.json $OUT/$1-metrics.json
cut -d, -f2-4 $d/logs/metrics.csv > $OUT/$1-memory.csv
