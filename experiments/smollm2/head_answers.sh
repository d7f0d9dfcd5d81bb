#!/usr/bin/env bash
# Issue 30: is the EAGLE-3 head data-limited? make demo-real's reference head (DistillSpec: forward KL on every
# answer token, 6 epochs, three training-time-test passes, bfloat16 autocast) trained on the target's answers to
# the first N GSM8K training problems instead of 500, then timed in one bench-real process against demo-real's
# head (N=500) on the 40 test prompts, greedy and at temperature 1, gamma 3, both heads in bfloat16.
#   experiments/smollm2/head_answers.sh 1000 [bench-real options, e.g. --prompts 20]
#   STEPS=train ... / STEPS=bench ...   one half only (default: both)
#   DRY_RUN=1 ...                       prints the commands instead
#   HEAD=<final folder> ...             the head to time against (default: demo-real's reference head)
#   ALSO="n1000 ..." ...                bench these earlier runs' heads (outputs/head-answers/<tag>) in the same
#                                       process too, against one set of target-only runs
#   EPOCHS=E ...                        the reference head trains E epochs instead of demo-real's 6, in
#                                       outputs/head-answers/n<N>-e<E> (the steps control: N=500 EPOCHS=12 takes
#                                       the 120 optimizer steps that N=1000 takes in 6)
# The training steps are demo-real's own (`make -n demo-real`, up to the reference head) with
# paths.root=outputs/head-answers/n<N> task.n_train=N: their own target folder, answers, caches. The answers
# committed in parts (make answer-parts) are adopted when they name the target; any beyond are generated
# (resumable, about 2.6 s each here). Validation stays the next 64 problems' answers (1000-1063 for N=1000).
# Every step resumes: rerun after an interruption. Writes bench/results/head-answers-<tag>[+<ALSO>]-g3.json.
set -euo pipefail
cd "$(dirname "$0")/../.."
n=${1:?usage: experiments/smollm2/head_answers.sh N [bench-real options]}; shift
[[ $n =~ ^[0-9]+$ ]] || { echo "head_answers.sh: N must be a number of training problems, got '$n'" >&2; exit 2; }
tag=n$n
overrides="task.n_train=$n"
if [ -n "${EPOCHS:-}" ]; then
  [[ $EPOCHS =~ ^[0-9]+$ ]] || { echo "head_answers.sh: EPOCHS must be a number of epochs, got '$EPOCHS'" >&2; exit 2; }
  tag=n$n-e$EPOCHS overrides="$overrides stage.max_epochs=$EPOCHS"
fi
root=outputs/head-answers/$tag
run() { if [ -n "${DRY_RUN:-}" ]; then echo "$*"; else echo "+ $*" >&2; "$@"; fi; }

if [ "${STEPS:-all}" != bench ]; then
  # demo-real's steps up to the reference head; stage 3 (AdaSPEC k=0.4) and the evaluation are not needed here
  mapfile -t steps < <(make -n --no-print-directory demo-real ARGS="paths.root=$root $overrides" \
    | grep -E 'adaspec\.commands\.(train stage=(target|ref)|answers|cache) ')
  [ ${#steps[@]} -eq 4 ] || { echo "head_answers.sh: expected 4 steps in make -n demo-real, found ${#steps[@]}" >&2; exit 1; }
  for step in "${steps[@]}"; do read -ra argv <<<"$step"; run "${argv[@]}"; done
fi

if [ "${STEPS:-all}" != train ]; then
  head=${HEAD:-outputs/gsm8k/smollm2/seed0/ref-eagle3-target-answers/final}
  [ -f "$head/meta.json" ] || { echo "head_answers.sh: no finished head at $head: run make demo-real first" >&2; exit 1; }
  drafts=(--draft "head-n500=$head")
  name=head-answers-$tag
  for t in $tag ${ALSO:-}; do
    folder=outputs/head-answers/$t/gsm8k/smollm2/seed0/ref-eagle3-target-answers/final
    [ -n "${DRY_RUN:-}" ] || [ -f "$folder/meta.json" ] || { echo "head_answers.sh: no finished head at $folder: run head_answers.sh for $t first" >&2; exit 1; }
    drafts+=(--draft "head-$t=$folder")
  done
  [ -z "${ALSO:-}" ] || name=$name+$(echo $ALSO | tr ' ' '+')
  mapfile -t real < <(make -n --no-print-directory bench-real | grep -oE 'model=smollm2 .*' | tr ' ' '\n' | grep -v '^$')
  run .venv/bin/python -m adaspec.commands.bench_real --name "$name-g3" --prompts 40 --gammas 3 \
    --temperatures 0,1 --no-adaptive --serving bfloat16-compiled --servings float32-compiled,bfloat16-compiled-w2 \
    "${drafts[@]}" \
    --draft-dtype bfloat16 "$@" "${real[@]}"
fi
