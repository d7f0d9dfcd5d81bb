#!/usr/bin/env bash
# Re-collect every committed experiment summary from the committed per-evaluation files (an empty run root:
# each step keeps its collected file when it records the step's settings) into a copy of
# experiments/results/, and diff the copy with the original. Exit 0 when every collection ran and every file re-collects byte
# for byte (a collection that fails says why on stderr). Usage: bash bench/recollect_committed.sh   (from the repository root; about 2 minutes)
set -euo pipefail
PY=${PY:-.venv/bin/python}
copy=$(mktemp -d)/results
root=$(mktemp -d)
cp -r experiments/results "$copy"
status=0
collect() { HF_HUB_OFFLINE=1 WANDB_MODE=offline "$PY" -m adaspec.commands.paper --collect-only "$@" paths.root="$root" >/dev/null || status=1; }
collect --results "$copy"
collect --tasks smollm2_gsm8k smollm2_mbpp --seeds 0 1 2 --results "$copy/smollm2-paper-stage0"
collect --tasks smollm2_gsm8k --seeds 0 1 --results "$copy/smollm2-paper-no-stage0" pretrain=none
collect --tasks smollm2_gsm8k_beyond --seeds 0 1 2 --results "$copy/smollm2-beyond"
diff -r experiments/results "$copy" || status=1
exit $status
