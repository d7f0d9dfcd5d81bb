#!/bin/bash
# demo-real's reference head (stage 2) as `make demo-real` trains it, whole (480 steps, validated every 80), with
# the heap trimmed after validation batches too, alone on the cores: its anonymous peak over a whole run.
#   experiments/results/smollm2/validation-trim-whole/run.sh
cd "$(dirname "$0")/../../../.."
OUT=experiments/results/smollm2/validation-trim-whole
cmd=$(make --no-print-directory -n demo-real | grep "stage=ref")
HF_HUB_OFFLINE=1 WANDB_MODE=offline $cmd stage.tag=trim > /work/logs/trim-whole.out 2>&1
d=outputs/gsm8k/smollm2/seed0/ref-eagle3-trim-target-answers
cp $d/final/metrics.json $OUT/ref-metrics.json
cut -d, -f2-4 $d/logs/metrics.csv > $OUT/ref-memory.csv
git rev-parse HEAD > $OUT/commit.txt
