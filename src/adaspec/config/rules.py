"""The config rules the schema's types and enums cannot express: ranges (k in (0, 1], positive learning
rates, ...) and rules that tie fields together. `validate` runs once per command: by the entry points
(`adaspec.cli.hydra_entry`) before they load any data or model or write anything.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from omegaconf import DictConfig, ListConfig

from adaspec.artefacts.paths import REFERENCE_TAG, fixed_answers
from adaspec.config.schema import (
    PRETRAIN_STAGES,
    Corpus,
    DistillData,
    DraftInit,
    DraftKind,
    HeadOutputInit,
    ModelSource,
    PretrainObjective,
    StageName,
    TeacherSource,
)
from adaspec.decoding.tree_shape import is_auto, tree_shape
from adaspec.errors import UserError
from adaspec.models.attention import check_attn_implementation

GAMMA_RANGE = (1, 32)  # draft tokens per block; beyond ~10 almost no block is accepted whole


def _check(ok: bool, key: str, value: Any, allowed: str) -> None:
    if not ok:
        if isinstance(value, ListConfig):
            value = list(value)
        elif isinstance(value, StrEnum):
            value = str(value)
        raise UserError(f"config key `{key}`={value!r} is invalid: {allowed}")


def _in_gamma_range(gamma: int) -> bool:
    return GAMMA_RANGE[0] <= gamma <= GAMMA_RANGE[1]


def _validate_k_and_gamma(k: float, gamma: Any) -> None:
    _check(0.0 < k <= 1.0, "k", k, "must be in (0, 1], e.g. k=0.4 (AdaSPEC) or k=1.0 (DistillSpec)")
    low, high = GAMMA_RANGE
    _check(_in_gamma_range(gamma), "gamma", gamma, f"must be an integer in {low}..{high}, e.g. gamma=5")


def _validate_task(task: DictConfig) -> None:
    # with distill=adaspec, k defaults to task.default_k, so it comes first: a bad one is not reported as k
    _check(0.0 < task.default_k <= 1.0, "task.default_k", task.default_k, "must be in (0, 1], e.g. 0.4")
    _check(task.max_length >= 16, "task.max_length", task.max_length, "must be >= 16")
    _check(task.vocab_size >= 300, "task.vocab_size", task.vocab_size, "must be >= 300 (256 bytes + merges)")
    for key in ("digit_weight", "operator_weight"):
        weight = task.domain[key]
        _check(weight > 0, f"task.domain.{key}", weight, "must be > 0 (1.0 turns the weighting off)")
    api = task.domain.api_vocab_size
    _check(api >= 0, "task.domain.api_vocab_size", api, "must be >= 0 (0: off)")
    target_n = task.target_n_train
    _check(target_n is None or target_n >= 1, "task.target_n_train", target_n, "must be >= 1, or null for task.n_train")


def _validate_model(model: DictConfig) -> None:
    if model.source == ModelSource.pretrained:  # model.draft_path null: the draft is built from model.draft
        _check(
            bool(model.target_path),
            "model.target_path",
            model.target_path,
            "pretrained models need a Hub id, a local folder or a .gguf file",
        )
    # from-scratch sizes (pretrained presets ignore them, but a negative size is a mistake either way)
    for role in ("target", "draft"):
        arch = model[role]
        for key in ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size"):
            _check(arch[key] >= 1, f"model.{role}.{key}", arch[key], "must be >= 1")
        _check(
            arch.hidden_size % arch.num_attention_heads == 0,
            f"model.{role}.hidden_size",
            arch.hidden_size,
            f"must be divisible by model.{role}.num_attention_heads={arch.num_attention_heads}",
        )
    positions = model.max_position_embeddings
    _check(positions >= 1, "model.max_position_embeddings", positions, "must be >= 1")
    size = model.draft_vocab_size
    _check(size >= 0, "model.draft_vocab_size", size, "must be >= 0 (0: the target's full vocabulary)")
    _check(
        model.draft_init == DraftInit.random or not model.draft_path,
        "model.draft_init",
        model.draft_init,
        "applies to drafts built from model.draft: set model.draft_path=null, or model.draft_init=random",
    )
    # flash_attention_2 without the flash-attn package or a CUDA GPU: fail here, before any model loads
    check_attn_implementation(model.attn_implementation)


def _validate_stage(stage: DictConfig) -> None:
    _check(stage.tag != REFERENCE_TAG, "stage.tag", stage.tag,
           f"'{REFERENCE_TAG}' names the reference's row in eval.draft_tags: choose another tag")
    _check(stage.lr > 0, "stage.lr", stage.lr, "must be > 0")
    _check(stage.weight_decay >= 0, "stage.weight_decay", stage.weight_decay, "must be >= 0")
    for key in ("batch_size", "max_epochs", "accumulate_grad_batches", "checkpoint_every_n_steps"):
        _check(stage[key] >= 1, f"stage.{key}", stage[key], "must be >= 1")
    _check(
        stage.max_steps >= -1,
        "stage.max_steps",
        stage.max_steps,
        "must be -1 (max_epochs decides), 0 (save the starting model untrained) or >= 1",
    )
    _check(0 <= stage.warmup_frac < 1, "stage.warmup_frac", stage.warmup_frac, "must be in [0, 1)")
    _check(0 < stage.min_lr_ratio <= 1, "stage.min_lr_ratio", stage.min_lr_ratio, "must be in (0, 1]")
    _check(
        stage.warmup_frac < stage.decay_end_frac <= 1,
        "stage.decay_end_frac",
        stage.decay_end_frac,
        "must be in (stage.warmup_frac, 1]",
    )
    for key in ("val_every_n_steps", "monitor_every_n_steps", "early_stop_patience", "group_by_length"):
        _check(stage[key] >= 0, f"stage.{key}", stage[key], "must be >= 0 (0: off)")
    _check(
        stage.monitor_prompts >= 0,
        "stage.monitor_prompts",
        stage.monitor_prompts,
        "must be >= 0 (0: no monitor)",
    )


def _validate_distill(distill: DictConfig) -> None:
    for key in ("refresh_every_n_steps", "calibration_batches", "chunk_size", "cache_topk",
                "answer_max_new_tokens", "answer_batch_size"):
        _check(distill[key] >= 1, f"distill.{key}", distill[key], "must be >= 1")
    _check(distill.answer_temperature >= 0, "distill.answer_temperature", distill.answer_temperature,
           "must be >= 0 (0: the target's greedy answers)")
    _check(not distill.keep_unfinished_answers or fixed_answers(distill) == "target",
           "distill.keep_unfinished_answers", distill.keep_unfinished_answers,
           "acts on the target's answers only: set distill.data=target (or data=mixed mixed_with=target)")
    _check(
        not (distill.cache_ref_kl and distill.teacher != TeacherSource.cache),
        "distill.cache_ref_kl",
        distill.cache_ref_kl,
        "needs distill.teacher=cache",
    )
    _check(distill.mixed_with in (DistillData.dataset, DistillData.target), "distill.mixed_with", distill.mixed_with,
           "the answers of data=mixed's other steps: dataset or target")
    _check(0.0 <= distill.on_policy_fraction <= 1.0, "distill.on_policy_fraction", distill.on_policy_fraction,
           "must be in [0, 1]")
    _check(
        not (distill.cache_ref_kl and distill.data in (DistillData.draft, DistillData.mixed)),
        "distill.cache_ref_kl", distill.cache_ref_kl,
        "cannot serve on-policy batches (distill.data=draft|mixed), whose tokens are sampled during training; "
        "set it false",
    )
    budget_k = distill.budget_k
    if budget_k is not None:
        _check(0.0 < budget_k <= 1.0, "distill.budget_k", budget_k, "must be in (0, 1] or null (the run's k)")
    for key in ("jsd_beta", "threshold_ema"):
        _check(0.0 <= distill[key] <= 1.0, f"distill.{key}", distill[key], "must be in [0, 1]")
    frac = distill.k_schedule_frac
    _check(0.0 < frac <= 1.0, "distill.k_schedule_frac", frac, "must be in (0, 1], e.g. 0.2")
    temperature = distill.soft_temperature
    _check(temperature > 0, "distill.soft_temperature", temperature, "must be > 0, e.g. 0.05")


def _validate_draft_build(model: DictConfig, pretrain: DictConfig, task: DictConfig, distill: DictConfig) -> None:
    """model.draft_init and model.draft_vocab_size against the other groups."""
    _check(
        model.draft_init == DraftInit.random
        or pretrain.corpus == Corpus.none
        or pretrain.objective == PretrainObjective.kd,  # a distilling stage 0 starts from model.draft_init
        "model.draft_init",
        model.draft_init,
        "with stage 0 (pretrain=stdlib) the draft starts from its pre-trained weights: use model.draft_init=random",
    )
    _check(
        model.draft_vocab_size == 0 or not task.domain.operator_embedding,
        "task.domain.operator_embedding",
        True,
        "needs the full draft vocabulary: set task.domain.operator_embedding=false or model.draft_vocab_size=0",
    )
    passes = distill.ttt_passes
    _check(passes >= 1, "distill.ttt_passes", passes, "must be >= 1 (1: no training-time test)")
    _check(passes == 1 or model.draft_kind == DraftKind.eagle3, "distill.ttt_passes", passes,
           "the training-time test is for EAGLE-3 heads: set model.draft_kind=eagle3 or distill.ttt_passes=1")
    _check(model.head_output_init == HeadOutputInit.random or model.draft_kind == DraftKind.eagle3,
           "model.head_output_init", model.head_output_init,
           "starts an EAGLE-3 head's output layer: set model.draft_kind=eagle3 or model.head_output_init=random")
    if model.draft_kind == DraftKind.eagle3:
        _check(pretrain.corpus == Corpus.none, "pretrain", pretrain.corpus,
               "stage 0 trains an independent draft; an EAGLE-3 head starts from the target: use pretrain=none")
        _check(not model.draft_path, "model.draft_path", model.draft_path,
               "an EAGLE-3 head is built from the target: set model.draft_path=null")
        _check(str(distill.data) in ("dataset", "target"), "distill.data", distill.data,
               "an EAGLE-3 head does not sample continuations on its own: use distill.data=dataset or target")
        _check(not task.domain.operator_embedding, "task.domain.operator_embedding", True,
               "an EAGLE-3 head keeps the target's embedding: set task.domain.operator_embedding=false")


def _validate_ttt_warmup(distill: DictConfig, stage: DictConfig) -> None:
    warmup = distill.ttt_warmup_steps
    _check(warmup >= 0, "distill.ttt_warmup_steps", warmup, "must be >= 0 (0: every step runs every pass)")
    if warmup == 0:
        return
    _check(distill.ttt_passes > 1, "distill.ttt_warmup_steps", warmup,
           "warms up the training-time test's passes: set distill.ttt_passes > 1 or distill.ttt_warmup_steps=0")
    _check(not distill.cache_ref_kl, "distill.ttt_warmup_steps", warmup,
           "the cached reference divergence (distill.cache_ref_kl) sums every pass: set one of them off")
    trains_a_head = stage.name in ("ref", "draft") and stage.max_steps > 0
    _check(not trains_a_head or warmup < stage.max_steps, "distill.ttt_warmup_steps", warmup,
           f"is not below stage.max_steps={stage.max_steps}, so the passes after the first would never train: "
           "lower it or raise stage.max_steps")


def _validate_pretrain(p: DictConfig, stage: str, model: DictConfig) -> None:
    if stage in PRETRAIN_STAGES:
        _check(
            p.corpus != Corpus.none,
            "pretrain.corpus",
            p.corpus,
            f"stage={stage} (stage 0) needs a corpus: add pretrain=stdlib",
        )
    if p.corpus == Corpus.none:
        return
    scratch = model.source == ModelSource.scratch
    _check(
        scratch == (p.objective == PretrainObjective.lm),
        "pretrain.objective",
        p.objective,
        "stage 0 pre-trains from-scratch presets with objective=lm (pretrain=stdlib); a pretrained target's "
        "draft distils it with objective=kd (pretrain=distill)",
    )
    if p.objective == PretrainObjective.kd:
        _check(
            stage != StageName.pretrain_target,
            "stage",
            stage,
            "a pretrained target has no stage 0: only its draft distils it (stage=pretrain_draft)",
        )
    _check(p.task_prompts >= 0, "pretrain.task_prompts", p.task_prompts, "must be >= 0")
    for key in ("max_chars", "block_chars", "n_val", "batch_size", "max_epochs"):
        _check(p[key] >= 1, f"pretrain.{key}", p[key], "must be >= 1")
    _check(p.lr > 0, "pretrain.lr", p.lr, "must be > 0")


def _valid_devices(devices: Any) -> bool:
    """Lightning's forms: a number of devices, -1 or "auto" (every device), device indices as a list or "0,1"."""
    if isinstance(devices, str) and "," in devices:
        devices = [part.strip() for part in devices.split(",") if part.strip()]
        return bool(devices) and all(part.isdigit() for part in devices)
    if isinstance(devices, ListConfig | list | tuple):
        return bool(devices) and all(type(d) is int and d >= 0 for d in devices)
    if isinstance(devices, str):
        return devices.strip() in ("auto", "-1") or (devices.strip().isdigit() and int(devices) >= 1)
    return type(devices) is int and (devices >= 1 or devices == -1)


def _validate_trainer(trainer: DictConfig) -> None:
    _check(
        _valid_devices(trainer.devices),
        "trainer.devices",
        trainer.devices,
        "must be a number of devices >= 1, -1 or 'auto' (every device), or a non-empty list of device indices "
        "such as [0,1]",
    )
    _check(trainer.num_nodes >= 1, "trainer.num_nodes", trainer.num_nodes, "must be >= 1")
    init_scale = trainer.fp16_init_scale
    _check(init_scale > 0, "trainer.fp16_init_scale", init_scale, "must be > 0, e.g. 128")
    _check(
        trainer.log_every_n_steps >= 1, "trainer.log_every_n_steps", trainer.log_every_n_steps, "must be >= 1"
    )


def _validate_decode(decode: DictConfig) -> None:
    low, high = GAMMA_RANGE
    _check(
        _in_gamma_range(decode.gamma), "decode.gamma", decode.gamma, f"must be an integer in {low}..{high}"
    )
    _check(decode.temperature >= 0, "decode.temperature", decode.temperature, "must be >= 0")
    draft_temperature = decode.get("draft_temperature")
    _check(draft_temperature is None or draft_temperature > 0, "decode.draft_temperature", draft_temperature,
           "must be > 0 (the temperature the draft proposes at), or null for decode.temperature")
    _check(decode.max_new_tokens >= 1, "decode.max_new_tokens", decode.max_new_tokens, "must be >= 1")
    _check(decode.adaptive_window >= 1, "decode.adaptive_window", decode.adaptive_window, "must be >= 1")
    threshold = decode.long_context_threshold
    _check(threshold >= 1, "decode.long_context_threshold", threshold, "must be >= 1")
    reduction = decode.long_context_reduction
    _check(reduction in (1, 2), "decode.long_context_reduction", reduction, "must be 1 or 2")
    _check(not decode.compile or decode.kv_cache == "static", "decode.compile", decode.compile,
           "a compiled target decodes on a preallocated cache: add decode.kv_cache=static")
    tree = decode.get("tree", "off")
    try:
        tree_shape(tree) if not is_auto(tree) else None
    except (ValueError, TypeError) as error:
        _check(False, "decode.tree", tree, f"{error}; allowed: off, auto, "
               "k<top_k>-d<depth>-n<nodes>[+lookup][+sample[-last|-all]] (e.g. k4-d4-n16) or "
               "{top_k: 4, depth: 4, nodes: 16, lookup: false, sample: false}")


def _validate_eval(ev: DictConfig) -> None:
    for name in ev.get("trees", []):
        try:
            tree_shape(str(name))
        except ValueError as error:
            _check(False, "eval.trees", list(ev.trees), f"{error} (each a shape such as k4-d4-n16 or k4-d4-n16+lookup)")
    for name in ev.get("tree_candidates", []):
        try:
            tree_shape(str(name))
        except ValueError as error:
            _check(False, "eval.tree_candidates", list(ev.tree_candidates),
                   f"{error} (each a shape such as k4-d4-n16 or k4-d4-n16+lookup)")
    _check(ev.get("tree_calibration_prompts", 1) >= 1, "eval.tree_calibration_prompts",
           ev.get("tree_calibration_prompts"), "must be >= 1 (the held-out prompts decode.tree=auto measures on)")
    _check(ev.n_prompts >= 1, "eval.n_prompts", ev.n_prompts, "must be >= 1")
    _check(len(ev.draft_ks) >= 1 or ev.reference, "eval.draft_ks", ev.draft_ks,
           "name at least one k, or add eval.reference=true to evaluate the reference alone")
    _check(
        all(0.0 < k <= 1.0 for k in ev.draft_ks), "eval.draft_ks", ev.draft_ks, "every k must be in (0, 1]"
    )
    for tag, ks in ev.tag_ks.items():
        _check(all(0.0 < k <= 1.0 for k in ks), f"eval.tag_ks.{tag}", ks, "every k must be in (0, 1]")
    _check(len(ev.draft_tags) >= 1, "eval.draft_tags", ev.draft_tags, 'name at least one tag ("": untagged)')
    low, high = GAMMA_RANGE
    _check(
        all(_in_gamma_range(g) for g in ev.gammas),
        "eval.gammas",
        ev.gammas,
        f"every gamma must be in {low}..{high}",
    )
    sweep = ev.gamma_sweep_prompts
    _check(sweep >= 0, "eval.gamma_sweep_prompts", sweep, "must be >= 0")
    timed = ev.timed_prompts
    _check(timed is None or timed >= 1, "eval.timed_prompts", timed, "must be >= 1, or null to time every prompt")
    _check(ev.num_threads >= 0, "eval.num_threads", ev.num_threads, "must be >= 0 (0: torch's default)")


def validate(cfg: DictConfig) -> DictConfig:
    """The ranges and cross-field rules the schema's types and enums cannot express, group by group.
    Raises UserError naming the first bad key; returns `cfg`. Runs once per command, before anything is
    loaded or written (see adaspec.cli)."""
    _validate_task(cfg.task)
    _validate_k_and_gamma(cfg.k, cfg.gamma)
    _validate_stage(cfg.stage)
    _validate_distill(cfg.distill)
    _validate_pretrain(cfg.pretrain, cfg.stage.name, cfg.model)
    _validate_model(cfg.model)
    _validate_draft_build(cfg.model, cfg.pretrain, cfg.task, cfg.distill)
    _validate_ttt_warmup(cfg.distill, cfg.stage)
    _validate_trainer(cfg.trainer)
    _validate_decode(cfg.decode)
    _validate_eval(cfg.eval)
    return cfg
