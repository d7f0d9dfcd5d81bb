"""`model.draft_kind=eagle3` through the stages and the evaluation on the tiny default: the head is built from
the target (its embedding, frozen), stage 2 distils it with forward KL, stage 3 selects tokens by ΔL against
the reference head, and the evaluation decodes and replays it exactly."""

from __future__ import annotations

import json

import pytest
import torch
from omegaconf import OmegaConf

from adaspec.artefacts import paths
from adaspec.config.rules import validate
from adaspec.distill.cache_build import build_cache
from adaspec.distill.feature_cache import FeatureCache
from adaspec.drafts import Eagle3Draft, load_draft
from adaspec.errors import UserError
from adaspec.evaluation.run import run_evaluation
from adaspec.models.build import load_model
from adaspec.training.pipeline import run_stage

EAGLE3 = ["model.draft_kind=eagle3", "stage.max_steps=20", "stage.monitor_every_n_steps=0"]


@pytest.fixture
def eagle3(tiny_cfg):
    """tiny_cfg with the target and the reference head trained."""
    run_stage(tiny_cfg("stage=target", "stage.max_steps=30"))
    run_stage(tiny_cfg("stage=ref", *EAGLE3))
    return tiny_cfg


def metrics(folder) -> list[dict]:
    import csv

    with open(folder / "logs" / "metrics.csv") as fh:
        return list(csv.DictReader(fh))


def test_the_stages_train_a_head_that_reads_the_target(eagle3):
    cfg = eagle3("stage=draft", "k=0.4", *EAGLE3)
    ref_folder = paths.of(cfg).ref_dir()
    ref = load_draft(paths.final(ref_folder))
    assert isinstance(ref, Eagle3Draft)
    target = load_model(paths.final(paths.of(cfg).target_dir()))
    assert torch.equal(ref.model.embed_tokens.weight, target.get_input_embeddings().weight)  # frozen all along
    init = load_draft(paths.final(paths.of(cfg).draft_init_dir()))
    assert not torch.equal(init.model.lm_head.weight, ref.model.lm_head.weight)
    kl = [float(r["train/loss"]) for r in metrics(ref_folder) if r["train/loss"]]
    assert sum(kl[-5:]) < sum(kl[:5])  # forward KL falls
    assert json.loads((paths.final(ref_folder) / "metrics.json").read_text())["parameters"] == sum(
        p.numel() for p in ref.model.parameters() if p.requires_grad)  # the frozen embedding is not counted

    run_stage(cfg)
    rows = [r for r in metrics(paths.of(cfg).draft_dir(0.4)) if r["train/selected_frac"]]
    assert rows and all(float(r["train/selected_frac"]) == pytest.approx(0.4, abs=0.05) for r in rows)
    # dL against the reference head (its value token by token: test_the_training_time_test_sums_each_pass_...)
    assert any(float(r["train/delta_mean"]) != 0 for r in rows)


def test_the_evaluation_decodes_the_head_exactly(eagle3):
    run_stage(eagle3("stage=draft", "k=1.0", *EAGLE3))
    cfg = eagle3(*EAGLE3, "eval.draft_ks=[1.0]", "eval.n_prompts=3", "decode.max_new_tokens=16",
                 "eval.num_threads=1")
    run_evaluation(cfg, progress=False)
    results = json.loads((paths.of(cfg).eval_dir() / "greedy-g5" / "results.json").read_text())
    row = results["drafts"]["k1"]
    assert row["draft"]["kind"] == "eagle3" and row["greedy_mismatches"] == 0
    assert row["acceptance_vs_gamma"]["replay_mismatches"] == 0  # the replay reads the target's features too

    compiled_cfg = eagle3(*EAGLE3, "eval.draft_ks=[1.0]", "eval.n_prompts=3", "decode.max_new_tokens=16",
                          "eval.num_threads=1", "decode.draft_compile=true", "eval.name=compiled")
    compiled = run_evaluation(compiled_cfg, progress=False)
    compiled_row = compiled["drafts"]["k1"]
    assert compiled["identity"]["decode"]["draft_compile"] is True and "draft_compile" not in results["identity"]["decode"]
    assert compiled_row["greedy_mismatches"] == 0 and compiled_row["acceptance_vs_gamma"]["replay_mismatches"] == 0
    assert compiled_row["tau"] == row["tau"]  # the compiled head's steps propose what the eager head's do


@pytest.mark.parametrize("override, key", [("pretrain=stdlib", "pretrain"),
                                           ("distill.data=draft", "distill.data")])
def test_what_a_head_cannot_train_with_is_one_line(tiny_cfg, override, key):
    with pytest.raises(UserError, match=key):
        validate(tiny_cfg("stage=draft", "model.draft_kind=eagle3", override))


def test_only_a_head_starts_its_output_from_the_target(tiny_cfg):
    with pytest.raises(UserError, match="model.head_output_init"):
        validate(tiny_cfg("stage=draft", "model.head_output_init=target"))
    validate(tiny_cfg("stage=draft", "model.draft_kind=eagle3", "model.head_output_init=target"))


def test_a_head_initialisation_remembers_how_its_output_started(tiny_cfg):
    """The setting is recorded with the initialisation, and a run asking for the other one is refused by name."""
    run_stage(tiny_cfg("stage=target", "stage.max_steps=2"))
    run_stage(tiny_cfg("stage=ref", *EAGLE3[:1], "stage.max_steps=1", "model.head_output_init=target"))
    with pytest.raises(UserError, match="model.head_output_init=target, not random"):
        run_stage(tiny_cfg("stage=ref", *EAGLE3[:1], "stage.max_steps=1", "overwrite=true"))


def test_heads_and_independent_drafts_share_the_target_never_a_folder(eagle3):
    head_ref = paths.of(eagle3("stage=ref", *EAGLE3)).ref_dir()
    weights = (paths.final(head_ref) / "model.safetensors").read_bytes()
    independent = run_stage(eagle3("stage=ref", "stage.max_steps=2"))
    assert independent.parent.name == "ref" and head_ref.name == "ref-eagle3"
    assert not isinstance(load_draft(independent), Eagle3Draft)
    assert (paths.final(head_ref) / "model.safetensors").read_bytes() == weights


def test_with_a_teacher_cache_the_head_reads_the_targets_features_from_a_cache_of_its_own(tiny_cfg):
    """distill.teacher=cache: stage 2 caches the target's features at the head's layers once (all positions,
    float16) and trains from them; a batch in shuffled order reads the live target's features back."""
    from tests.test_teacher_cache import shuffled_batch

    run_stage(tiny_cfg("stage=target", "stage.max_steps=30"))
    cfg = tiny_cfg("stage=ref", *EAGLE3, "distill.teacher=cache")
    build_cache(cfg)
    (folder,) = (paths.of(cfg).target_dir() / "feature_cache").iterdir()  # filled by the teacher cache's forward ...
    made = (folder / "features.f16").stat().st_mtime_ns
    final = run_stage(cfg)
    assert (folder / "features.f16").stat().st_mtime_ns == made  # ... and read by stage 2, not built again
    head = load_draft(final, target=load_model(paths.final(paths.of(cfg).target_dir())))
    assert folder.name == "layers" + "-".join(str(i) for i in head.target_layers)
    batch = shuffled_batch(cfg)
    cached = FeatureCache(folder).batch(batch["index"], batch["attention_mask"], torch.float32)
    live = head.features(batch["input_ids"], batch["attention_mask"])
    real = batch["attention_mask"].bool()
    torch.testing.assert_close(cached[real], live[real], atol=2e-2, rtol=1e-2)  # float16 storage
    assert (cached[~real] == 0).all()
    kl = [float(r["train/loss"]) for r in metrics(paths.of(cfg).ref_dir()) if r["train/loss"]]
    assert sum(kl[-5:]) < sum(kl[:5])


def test_stage_3_reads_the_reference_heads_divergence_from_a_cache_built_once(tiny_cfg):
    """distill.cache_ref_kl=true with heads: the reference head's divergence, summed over its training-time-test
    passes on the target's cached features, is computed once and read back row for row; it equals what stage 3
    computes live from the reference head (float16 features: to 2e-3)."""
    import numpy as np

    from adaspec.stages.draft import SelectiveDistill
    from adaspec.stages.stage_run import StageRun
    from tests.test_teacher_cache import shuffled_batch

    passes = [*EAGLE3, "distill.ttt_passes=3", "distill.teacher=cache"]
    run_stage(tiny_cfg("stage=target", "stage.max_steps=30"))
    build_cache(tiny_cfg("stage=ref", *passes))
    run_stage(tiny_cfg("stage=ref", *passes))
    cached_cfg = tiny_cfg("stage=draft", "k=0.4", *passes, "distill.cache_ref_kl=true", "stage.max_steps=4")
    final = run_stage(cached_cfg)
    (folder,) = (paths.of(cached_cfg).ref_dir() / "teacher_kl").iterdir()
    assert json.loads((folder / "ref_kl.json").read_text())["ttt_passes"] == "3"
    assert json.loads((final / "metrics.json").read_text())["steps"] == 4

    from adaspec.training.pipeline import build_data, resolve_stage_config

    resolved, splits = resolve_stage_config(tiny_cfg("stage=draft", "k=0.4", *passes, "stage.max_steps=4"))
    data, _, _ = build_data(StageRun.of(resolved), splits)
    live = SelectiveDistill.build(StageRun.of(resolved), data.tokenizer, data)  # runs the reference head
    cached = SelectiveDistill.build(StageRun.of(cached_cfg), data.tokenizer, data)  # reads it
    assert live.reference is not None and cached.reference is None
    batch = shuffled_batch(cached_cfg)
    with torch.no_grad():
        _, live_delta, _ = live.token_deltas(batch)
        _, cached_delta, _ = cached.token_deltas(batch)
    assert live_delta.numel() > 0 and np.isfinite(cached_delta.numpy()).all()
    torch.testing.assert_close(cached_delta, live_delta, atol=2e-3, rtol=2e-3)


def test_under_mixed_precision_the_cache_holds_the_reference_head_as_stage_3_runs_it_live(tiny_cfg):
    """trainer.precision=bf16-mixed: the reference head's divergence is cached under bfloat16 autocast, as stage 3
    runs the live reference (its identity says so); the float32 cache, read by the same mixed-precision stage 3,
    is the control: further from the live reference."""
    from adaspec.stages.draft import SelectiveDistill
    from adaspec.stages.stage_run import StageRun
    from adaspec.training.pipeline import build_data, resolve_stage_config
    from tests.test_teacher_cache import shuffled_batch

    passes = [*EAGLE3, "distill.ttt_passes=3", "distill.teacher=cache"]
    run_stage(tiny_cfg("stage=target", "stage.max_steps=30"))
    build_cache(tiny_cfg("stage=ref", *passes))
    run_stage(tiny_cfg("stage=ref", *passes))
    draft = ["stage=draft", "k=0.4", *passes, "stage.max_steps=2"]
    mixed = tiny_cfg(*draft, "trainer.precision=bf16-mixed")
    run_stage(tiny_cfg(*draft, "trainer.precision=bf16-mixed", "distill.cache_ref_kl=true"))  # stage 3 runs on it
    resolved, splits = resolve_stage_config(mixed)
    data, _, _ = build_data(StageRun.of(resolved), splits)
    live = SelectiveDistill.build(StageRun.of(resolved), data.tokenizer, data)
    batch = shuffled_batch(mixed)

    def error_of_cache(precision: str) -> float:
        cfg = tiny_cfg(*draft, f"trainer.precision={precision}", "distill.cache_ref_kl=true")
        # builds the cache at this precision (another precision's is rebuilt, never read) and reads it
        cached = SelectiveDistill.build(StageRun.of(cfg), data.tokenizer, data)
        (folder,) = (paths.of(cfg).ref_dir() / "teacher_kl").iterdir()
        assert json.loads((folder / "ref_kl.json").read_text()).get("precision") == (
            precision if precision.endswith("mixed") else None)
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            _, live_delta, _ = live.token_deltas(batch)
            _, cached_delta, _ = cached.token_deltas(batch)
        return float((cached_delta - live_delta).abs().max())

    error_bf16, error_float32 = error_of_cache("bf16-mixed"), error_of_cache("32-true")
    print(f"max |cached - live| dL: bf16 cache {error_bf16:.2e}, float32 cache {error_float32:.2e}")
    assert error_bf16 < error_float32 / 4


def tiny_head_and_batch():
    """(a tiny GPT-NeoX target, an EAGLE-3 head on it, a batch of 2 rows whose last 6 of 12 tokens are answers)."""
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    from adaspec.models.eagle3 import Eagle3Head

    torch.manual_seed(0)
    target = GPTNeoXForCausalLM(GPTNeoXConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2,
                                              num_attention_heads=4, intermediate_size=64)).eval()
    draft = Eagle3Draft(Eagle3Head.from_target(target, 64), target=target)
    ids = torch.randint(0, 64, (2, 12))
    labels = ids.clone()
    labels[:, :6] = -100
    return target, draft, {"input_ids": ids, "labels": labels, "attention_mask": torch.ones_like(ids)}


def test_the_training_time_test_sums_each_pass_divergence_weighted_as_eagle3(tiny_cfg):
    """distill.ttt_passes=3: a token's divergence is sum_k 0.8^k KL(target || pass k), for the head and its
    reference alike (stage 3's dL); passes=1 is the first proposal's KL alone."""
    from adaspec.distill.tokens import answer_logits, answer_mask
    from adaspec.models.eagle3 import Eagle3Head
    from adaspec.stages.ref import ReferenceDistill

    target, draft, batch = tiny_head_and_batch()
    ids, labels = batch["input_ids"], batch["labels"]
    mask = answer_mask(labels)
    p = torch.log_softmax(answer_logits(target(ids).logits, mask), -1)

    def kl(logits):
        q = torch.log_softmax(answer_logits(logits, mask), -1)
        return (p.exp() * (p - q)).sum(-1)

    passes = draft.unrolled_logits(ids, 3)
    for n, expected in ((1, kl(passes[0])), (3, kl(passes[0]) + 0.8 * kl(passes[1]) + 0.64 * kl(passes[2]))):
        cfg = tiny_cfg("stage=ref", "model.draft_kind=eagle3", f"distill.ttt_passes={n}")
        module = ReferenceDistill(draft, cfg.stage, cfg.distill, target)
        torch.testing.assert_close(module.student_divergence(batch)[0], expected, atol=1e-5, rtol=1e-4)
    # stage 3's dL for a head: that divergence for the head minus the same for its reference head, token by token
    from adaspec.stages.draft import SelectiveDistill

    torch.manual_seed(1)
    reference = Eagle3Draft(Eagle3Head.from_target(target, 64), target=target)
    ref_passes = reference.unrolled_logits(ids, 3)
    weighted = lambda ps: kl(ps[0]) + 0.8 * kl(ps[1]) + 0.64 * kl(ps[2])  # noqa: E731
    cfg = tiny_cfg("stage=draft", "k=0.4", "model.draft_kind=eagle3", "distill.ttt_passes=3")
    module = SelectiveDistill(draft, cfg.stage, cfg.distill, target, reference, k=0.4)
    loss, metrics, _ = module.step(batch)
    delta = weighted(passes) - weighted(ref_passes)
    assert delta.abs().min() > 0  # two different heads: no token's dL is 0 by construction
    torch.testing.assert_close(metrics["delta_mean"], delta.mean(), atol=1e-5, rtol=1e-4)
    with pytest.raises(UserError, match="distill.ttt_passes"):
        validate(tiny_cfg("stage=ref", "distill.ttt_passes=3"))


def test_the_warm_up_trains_the_first_pass_only_and_validation_every_pass(tiny_cfg):
    """distill.ttt_warmup_steps=n: a training step before n is the first proposal's divergence alone, the head's
    and its reference's alike; validation (eval mode) and every step without a warm-up sum every pass."""
    from adaspec.distill.tokens import answer_mask
    from adaspec.models.eagle3 import Eagle3Head
    from adaspec.stages.draft import SelectiveDistill
    from adaspec.stages.ref import ReferenceDistill

    target, draft, batch = tiny_head_and_batch()
    labels = batch["labels"]
    assert answer_mask(labels).sum() > 0

    def divergence(*overrides: str, training: bool) -> torch.Tensor:
        cfg = tiny_cfg("stage=ref", "model.draft_kind=eagle3", *overrides)
        module = ReferenceDistill(draft, cfg.stage, cfg.distill, target).train(training)
        with torch.no_grad():
            return module.student_divergence(batch)[0]

    one, three = divergence("distill.ttt_passes=1", training=True), divergence("distill.ttt_passes=3", training=True)
    assert (three > one).all()  # the later passes add to every token's divergence
    warm = ["distill.ttt_passes=3", "distill.ttt_warmup_steps=2"]
    torch.testing.assert_close(divergence(*warm, training=True), one)  # step 0 < 2: the first pass only
    torch.testing.assert_close(divergence(*warm, training=False), three)  # validation: every pass
    torch.testing.assert_close(divergence("distill.ttt_passes=3", "distill.ttt_warmup_steps=0", training=True), three)
    # stage 3: the head and its reference both on the first pass while warming up (dL compares like with like)
    torch.manual_seed(1)
    reference = Eagle3Draft(Eagle3Head.from_target(target, 64), target=target)
    cfg = tiny_cfg("stage=draft", "k=0.4", "model.draft_kind=eagle3", *warm)
    module = SelectiveDistill(draft, cfg.stage, cfg.distill, target, reference, k=0.4).train()
    ref_cfg = tiny_cfg("stage=ref", "model.draft_kind=eagle3", "distill.ttt_passes=1")
    ref_one = ReferenceDistill(reference, ref_cfg.stage, ref_cfg.distill, target).train().student_divergence(batch)[0]
    with torch.no_grad():
        _, metrics, _ = module.step(batch)
    torch.testing.assert_close(metrics["delta_mean"], (one - ref_one.detach()).mean(), atol=1e-5, rtol=1e-4)


def test_the_warm_up_is_refused_without_passes_to_warm_beside_a_cached_reference_or_past_the_last_step(tiny_cfg):
    with pytest.raises(UserError, match="distill.ttt_warmup_steps"):
        validate(tiny_cfg("stage=ref", *EAGLE3, "distill.ttt_warmup_steps=5"))  # one pass: nothing to warm up
    with pytest.raises(UserError, match="distill.ttt_warmup_steps"):
        validate(tiny_cfg("stage=ref", *EAGLE3, "distill.ttt_passes=3", "distill.ttt_warmup_steps=-1"))
    with pytest.raises(UserError, match="distill.ttt_warmup_steps"):
        validate(tiny_cfg("stage=draft", "k=0.4", *EAGLE3, "distill.ttt_passes=3", "distill.ttt_warmup_steps=5",
                          "distill.teacher=cache", "distill.cache_ref_kl=true"))
    with pytest.raises(UserError, match="stage.max_steps=5"):  # the later passes would never train
        validate(tiny_cfg("stage=ref", *EAGLE3, "distill.ttt_passes=3", "distill.ttt_warmup_steps=5",
                          "stage.max_steps=5"))
    validate(tiny_cfg("stage=ref", *EAGLE3, "distill.ttt_passes=3", "distill.ttt_warmup_steps=5",
                      "stage.max_steps=6", "stage.early_stop_patience=3"))  # early stopping counts from step 5


def test_early_stopping_counts_the_validations_after_the_warm_up_only(tiny_cfg):
    """An absurd learning rate makes the held-out KL rise from the first validations: counted from step 0, patience
    1 would stop the head inside its warm-up, keeping weights whose later passes never trained."""
    from tests.test_early_stopping import validations

    run_stage(tiny_cfg("stage=target", "stage.max_steps=30"))
    cfg = validate(tiny_cfg("stage=ref", *EAGLE3, "distill.ttt_passes=3", "distill.ttt_warmup_steps=6",
                            "stage.max_steps=16", "stage.max_epochs=100", "stage.lr=0.5", "stage.warmup_frac=0",
                            "stage.val_every_n_steps=2", "stage.early_stop_patience=1"))
    run_stage(cfg)
    folder = paths.of(cfg).ref_dir()
    assert folder.name.startswith("ref-eagle3-warm6")  # a folder of its own
    result = json.loads((paths.final(folder) / "metrics.json").read_text())
    counted = [(step, kl) for step, kl in validations(folder)[:-1] if step > 6]
    assert counted, "stopped inside the warm-up"
    best_step, best = min(counted, key=lambda sv: sv[1])
    assert result["early_stop/best_step"] == best_step > 6 and result["early_stop/best_val_kl"] == best
    assert result["steps"] >= 10  # two validations after the warm-up at least: the first, then one without a gain


def test_stage_3_trains_a_head_with_the_training_time_test(tiny_cfg):
    passes = [*EAGLE3, "distill.ttt_passes=3"]
    run_stage(tiny_cfg("stage=target", "stage.max_steps=30"))
    run_stage(tiny_cfg("stage=ref", *passes))
    cfg = tiny_cfg("stage=draft", "k=0.4", *passes)
    run_stage(cfg)
    rows = [r for r in metrics(paths.of(cfg).draft_dir(0.4)) if r["train/selected_frac"]]
    assert rows and all(float(r["train/selected_frac"]) == pytest.approx(0.4, abs=0.05) for r in rows)
    saved = OmegaConf.load(paths.final(paths.of(cfg).draft_dir(0.4)) / "config.yaml")
    assert saved.distill.ttt_passes == 3 and saved.model.draft_kind == "eagle3"  # the config it trained with


def test_the_teacher_caches_forward_writes_the_same_features_as_a_pass_of_their_own(tiny_cfg):
    import numpy as np
    from transformers import AutoTokenizer

    from adaspec.artefacts.rules import cache_identity
    from adaspec.data.datamodule import TaskDataModule
    from adaspec.data.tasks import load_task
    from adaspec.distill.feature_cache import feature_identity, write_feature_cache

    run_stage(tiny_cfg("stage=target", "stage.max_steps=5"))
    cfg = tiny_cfg("stage=ref", *EAGLE3, "distill.teacher=cache")
    build_cache(cfg)
    (shared,) = (paths.of(cfg).target_dir() / "feature_cache").iterdir()
    target_final = paths.final(paths.of(cfg).target_dir())
    tokenizer = AutoTokenizer.from_pretrained(str(target_final))
    data = TaskDataModule(tokenizer, load_task(cfg.task), batch_size=cfg.stage.batch_size,
                          max_length=cfg.task.max_length, n_val=cfg.task.n_val, seed=cfg.seed)
    encoded = data.train_set + data.val_set
    layers = FeatureCache(shared).meta["layers"]
    own = write_feature_cache(load_model(target_final), encoded, layers, shared.with_name("own"),
                              feature_identity(cache_identity(paths.of(cfg), cfg.task, encoded), layers), batch_size=cfg.stage.batch_size,
                              pad_id=tokenizer.pad_token_id, progress=False)
    assert FeatureCache(shared).meta == own.meta
    assert np.array_equal(np.asarray(FeatureCache(shared).features), np.asarray(own.features))
    assert np.array_equal(FeatureCache(shared).offsets, own.offsets)
