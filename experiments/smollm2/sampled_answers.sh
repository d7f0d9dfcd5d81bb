#!/usr/bin/env bash
# Issue 46 item 6: is a head trained on the target's temperature-1 answers accepted more at temperature 1 than one
# trained on its greedy answers? demo-real's reference head (forward KL, 480 steps of 8, the head question's
# recipe: paper=smollm2_gsm8k_head) on the answers to the first N GSM8K training problems (the 64 after them
# validate), greedy (committed) against sampled at temperature 1 (seed 0, batches of 64, written as committed
# parts), each evaluated greedy on 40 test prompts (gamma 3, replayed) and at temperature 1 on 20.
#   [SEED=s] [STEPS=n] experiments/smollm2/sampled_answers.sh greedy|sampled|sampled-all [N=1024]
# sampled-all trains on every sampled answer, those unfinished within 256 tokens cut short there
# (distill.keep_unfinished_answers=true); greedy and sampled drop them.
# SEED (default 0) seeds the head (its initialisation and data order), the same in both arms so that seeds pair
# them; the sampled answers are always seed 0's. Results of seed s > 0 go to <arm>-n<N>-seed<s>/.
# STEPS trains the head that many steps of 8 instead of the recipe's 480 (its folder tagged steps<n>, results in
# <arm>-n<N>[-seed<s>]-steps<n>/), everything else the same: what more steps on the same answers add.
# LR=<rate> (e.g. 4e-3) trains the head at that peak learning rate instead of the recipe's 2e-3 (tagged lr<rate>,
# results in <arm>-n<N>[-seed<s>][-steps<n>]-lr<rate>/).
# PASSES=<n> (1 or 2) trains the head with n passes of the training-time test instead of the recipe's 3
# (distill.ttt_passes; tagged passes<n>, results in <arm>-n<N>[-seed<s>][-steps<k>][-lr<rate>]-passes<n>/): a
# cheaper step, so more of them in the same time (experiments/smollm2/head_passes_cost.py).
# WARMUP=<n> trains the first n steps on the first pass only, then every pass (distill.ttt_warmup_steps; its
# folders carry -warm<n>, results in <arm>-n<N>[-seed<s>][-steps<k>][-lr<rate>][-passes<p>]-warm<n>/).
# TREE=<shape> (e.g. k4-d4-n8) adds a temperature-1 evaluation of the head as that draft tree beside its chain
# (eval.trees, the same 20 prompts): t1-<shape>.json.
# Every step is resumable or skipped when done: run it again after a stop. Commit the sampled parts
# (experiments/results/smollm2-target-answers/gsm8k/chat-max256-t1-s0-b64/parts/) as they finish, and
# experiments/results/smollm2/sampled-answers/ at the end.
set -euo pipefail
cd "$(dirname "$0")/../.."
arm=$1 n=${2:-1024} seed=${SEED:-0} steps=${STEPS:-} lr=${LR:-} passes=${PASSES:-} warmup=${WARMUP:-} tree=${TREE:-}
PY=${PY:-.venv/bin/python}
export HF_HUB_OFFLINE=1 WANDB_MODE=offline
case $arm in
  greedy) sampling=() ;;
  sampled|sampled-all) sampling=(distill.answer_temperature=1 distill.answer_seed=0 distill.answer_batch_size=64) ;;
  *) echo "usage: $0 greedy|sampled|sampled-all [N]" >&2; exit 2 ;;
esac
kept=()
[ "$arm" = sampled-all ] && kept=(distill.keep_unfinished_answers=true)
common=(paper=smollm2_gsm8k_head "seed=$seed" "task.n_train=$n" "model.draft_name=n$n" "${sampling[@]}" "${kept[@]}")
tag="" trained=()
[ -z "$steps" ] || tag=steps$steps trained+=("stage.max_steps=$steps")
[ -z "$lr" ] || tag=${tag:+$tag-}lr$lr trained+=("stage.lr=$lr")
[ -z "$passes" ] || tag=${tag:+$tag-}passes$passes common+=("distill.ttt_passes=$passes")
named=$tag  # the warm-up's heads have folders of their own (paths.Layout.schedule): named in the results only
[ -z "$warmup" ] || named=${tag:+$tag-}warm$warmup common+=("distill.ttt_warmup_steps=$warmup")
tagged=() reading=() sfx=${named:+-$named}
[ -z "$tag" ] || tagged=("${trained[@]}" "stage.tag=$tag") reading=("distill.ref_tag=$tag")
out=experiments/results/smollm2/sampled-answers/$arm-n$n$([ "$seed" = 0 ] || echo "-seed$seed")$sfx
mkdir -p "$out"
step() { echo "=== $(date -u +%H:%M:%S) $*" | tee -a "$out/steps.log"; "$@"; }

if [ "$arm" != greedy ]; then  # the answers to problems 0..n+63 as committed parts of 256 problems, one at a time
  for part in $(seq 0 $(((n + 64 - 1) / 256))); do
    step make --no-print-directory answer-parts ARGS="distill.answer_parts=$part ${sampling[*]}"
  done
fi
step "$PY" -m adaspec.commands.cache "${common[@]}"
step "$PY" -m adaspec.commands.train "${common[@]}" stage=ref resume=true "${tagged[@]}"
head_eval=("$PY" -m adaspec.commands.evaluate "${common[@]}" "${reading[@]}" "eval.draft_ks=[]" eval.reference=true
           "eval.draft_tags=['']")
t1=(decode.temperature=1.0 eval.n_prompts=20 eval.gamma_sweep_prompts=0)
step "${head_eval[@]}" "eval.name=greedy$sfx"
step "${head_eval[@]}" "${t1[@]}" "eval.name=t1$sfx"
[ -z "$tree" ] || step "${head_eval[@]}" "${t1[@]}" "eval.trees=[$tree]" "eval.name=t1$sfx-$tree"
layout=$("$PY" -c "
import sys; from adaspec.toolkit import checked_config; from adaspec.artefacts import paths
layout = paths.of(checked_config(*sys.argv[1:])); print(layout.ref_dir(), layout.eval_dir())" "${common[@]}" stage=ref "${tagged[@]}")
read -r ref eval <<< "$layout"
cp "$ref/final/metrics.json" "$out/ref-metrics.json"
cp "$eval"/greedy-*-"greedy$sfx"/results.json "$out/greedy.json"  # <setting>-<eval.name>
cp "$eval"/t1-*-"t1$sfx"/results.json "$out/t1.json"
[ -z "$tree" ] || cp "$eval"/t1-*-"t1$sfx-$tree"/results.json "$out/t1-$tree.json"
echo "=== $(date -u +%H:%M:%S) done: $out" | tee -a "$out/steps.log"
