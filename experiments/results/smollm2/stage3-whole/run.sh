#!/bin/bash
# demo-real's stage 3 exactly as `make demo-real` runs it (the AdaSPEC head, the reference live), a process of its
# own, alone on the cores: its whole-run anonymous peak and tokens/s. The head is written beside demo-real's
# (stage.tag=whole), so demo-real's own folder is untouched.
cd /work/main
OUT=experiments/results/smollm2/stage3-whole
lscpu | grep "Model name" > $OUT/machine.txt; git rev-parse HEAD >> $OUT/machine.txt
cmd=$(make --no-print-directory -n demo-real | grep "stage=draft")
echo "$cmd stage.tag=whole" > $OUT/command.txt
HF_HUB_OFFLINE=1 WANDB_MODE=offline /usr/bin/time -o $OUT/time.txt -f "wall %e s, user %U s, sys %S s, maxrss %M KB" \
  $cmd stage.tag=whole > /work/logs/stage3-whole.out 2>&1
cp outputs/gsm8k/smollm2/seed0/draft-k0.4-eagle3-whole-target-answers/final/metrics.json $OUT/metrics.json
