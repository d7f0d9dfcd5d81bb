#!/bin/bash
# demo-real's AdaSPEC head (stage 3, k = 0.4) as `make demo-real` trains it, whole (480 steps, validated every 80),
# with the heap trimmed after validation batches too, alone on the cores: its anonymous peak over a whole run.
# Its reference is validation-trim-whole's (stage.tag=trim), rebuilt first when absent (resume=true skips it when done).
#   experiments/results/smollm2/validation-trim-whole-draft/run.sh
set -euo pipefail
cd "$(dirname "$0")/../../../.."
OUT=experiments/results/smollm2/validation-trim-whole-draft
ref=$(make --no-print-directory -n demo-real | grep "stage=ref")
draft=$(make --no-print-directory -n demo-real | grep "stage=draft")
export HF_HUB_OFFLINE=1 WANDB_MODE=offline
[ -f outputs/gsm8k/smollm2/seed0/ref-eagle3-trim-target-answers/final/metrics.json ] || $ref stage.tag=trim
$draft stage.tag=trim distill.ref_tag=trim
d=outputs/gsm8k/smollm2/seed0/draft-k0.4-eagle3-trim-target-answers
cp "$d/final/metrics.json" $OUT/draft-metrics.json
cut -d, -f2-4 "$d/logs/metrics.csv" > $OUT/draft-memory.csv
git rev-parse HEAD > $OUT/commit.txt
