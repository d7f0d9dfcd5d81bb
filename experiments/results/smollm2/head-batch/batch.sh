#!/bin/bash
# demo-real's reference head at the same sequences seen (3,840) and the same validations (every 640 sequences),
# in smaller batches: more optimiser steps for about the same compute. Arguments: BATCH:STEPS:VAL_EVERY ...
# (this session ran 16:240:40 8:480:80, then 4:960:160), from the repository's root, after make demo-real.
cd "$(dirname "$0")/../../../.."
COMMON="stage=ref model=smollm2 task=gsm8k task.local_dir=../shared/data/gsm8k task.n_train=500 task.n_val=64 distill.data=target distill.teacher=cache distill.cache_mode=topk pretrain=none model.draft_kind=eagle3 distill.ttt_passes=3 task.n_train=7409 resume=true stage.early_stop_patience=3 stage.group_by_length=4 trainer.precision=bf16-mixed"
specs=("$@")
[ ${#specs[@]} -gt 0 ] || specs=(16:240:40 8:480:80)
for spec in "${specs[@]}"; do
  IFS=: read -r batch steps every <<< "$spec"
  date; echo "batch $batch steps $steps"
  HF_HUB_OFFLINE=1 WANDB_MODE=offline /usr/bin/time -v .venv/bin/python -m adaspec.commands.train $COMMON \
    stage.batch_size=$batch stage.max_steps=$steps stage.val_every_n_steps=$every stage.tag=b$batch 2>&1 \
    | grep -E "\[adaspec\]|Elapsed|Maximum resident|Error|error"
done
date
