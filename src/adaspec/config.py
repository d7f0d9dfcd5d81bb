"""Structured-config schemas, registered in Hydra's ConfigStore, and value validation.

Types, enums and unknown keys are checked by OmegaConf when Hydra composes the config. Ranges
(k in (0, 1], positive learning rates, ...) are checked by `validate`, which every entry point
calls before it loads any data or model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf

from adaspec.decoding.config import DecodeConfig
from adaspec.errors import UserError


class Divergence(StrEnum):
    forward_kl = "forward_kl"
    reverse_kl = "reverse_kl"
    tvd = "tvd"


class Selection(StrEnum):
    # `global` is a Python keyword, so it cannot be an enum member name, which OmegaConf matches on;
    # the config field is therefore a plain string checked by `validate`.
    batch = "batch"
    sequence = "sequence"
    global_ = "global"


class Normalize(StrEnum):
    all_tokens = "all_tokens"
    selected_tokens = "selected_tokens"


STAGES = ("pretrain_target", "pretrain_draft", "target", "ref", "draft")
PRETRAIN_STAGES = ("pretrain_target", "pretrain_draft")


@dataclass
class ArithConfig:
    n_train: int = 4000
    n_test: int = 200
    min_steps: int = 2
    max_steps: int = 3
    max_number: int = 50
    seed: int = 1234


@dataclass
class DomainConfig:
    """Domain strategies of the practice note. Off here; conf/task/<task>.yaml turns on its task's defaults
    (documented there). Each one is ablatable on the command line, e.g. task.domain.digit_weight=1."""

    digit_weight: float = 1.0  # stages 2-3: loss weight of answer tokens that are digits (math: 2.0)
    operator_weight: float = 1.0  # stages 2-3: loss weight of operator tokens + - * / = x (math: 1.5)
    # stage 3: learned vector per operator type added to the draft's input rows
    operator_embedding: bool = False
    keep_whitespace_tokens: bool = False  # stage 3: newline/indentation tokens are always selected (code: on)
    # stage 1, from-scratch tokenizers: add the N most frequent dotted names (code: 64)
    api_vocab_size: int = 0


# The stages each task.domain option changes; the others leave it out of their artefact fingerprint, so an
# ablation such as task.domain.digit_weight=1 reuses the target (and stage-3-only options the reference).
DOMAIN_OPTION_STAGES = {
    "digit_weight": ("ref", "draft"),
    "operator_weight": ("ref", "draft"),
    "operator_embedding": ("draft",),
    "keep_whitespace_tokens": ("draft",),
    "api_vocab_size": ("pretrain_target", "pretrain_draft", "target", "ref", "draft"),
}


@dataclass
class TaskConfig:
    name: str = MISSING
    kind: str = "math"  # math | code: selects the score and the domain strategies
    local_dir: str | None = None  # folder of JSONL files instead of the Hugging Face Hub
    hub_path: str | None = None
    hub_name: str | None = None
    max_length: int = 256  # prompt + answer tokens; longer examples are truncated
    vocab_size: int = 1024  # BPE vocabulary of from-scratch models
    n_train: int | None = None  # use only the first n training records (None: all)
    n_test: int | None = None
    n_val: int = 64  # held-out examples (from the test split) for the validation loss
    arith: ArithConfig = field(default_factory=ArithConfig)
    # stage 3's token-selection ratio for this task: distill=adaspec makes it the default of the top-level
    # `k` (distill=distillspec: 1.0; `k=...` on the command line wins). MBPP: 0.33.
    default_k: float = 0.4
    domain: DomainConfig = field(default_factory=DomainConfig)


@dataclass
class ArchConfig:
    hidden_size: int = 64
    num_hidden_layers: int = 2
    num_attention_heads: int = 2
    intermediate_size: int = 256


@dataclass
class ModelConfig:
    name: str = MISSING
    source: str = "scratch"  # scratch | pretrained
    target: ArchConfig = field(default_factory=ArchConfig)
    draft: ArchConfig = field(default_factory=ArchConfig)
    target_path: str | None = None  # pretrained presets: Hub id or local folder
    draft_path: str | None = None
    max_position_embeddings: int = 1024
    # auto: flash_attention_2 when the flash-attn package and a CUDA GPU are there (and training runs in
    # bf16/fp16), else sdpa. Asking for flash_attention_2 without them is an error before any model loads.
    attn_implementation: str = "auto"
    gradient_checkpointing: bool = False  # recompute activations in the backward pass of the trained model


@dataclass
class StageConfig:
    name: str = MISSING  # target | ref | draft
    lr: float = 1e-3
    weight_decay: float = 0.0
    batch_size: int = 16
    max_epochs: int = 1
    max_steps: int = -1  # -1: max_epochs decides
    warmup_frac: float = 0.1
    min_lr_ratio: float = 0.1  # cosine decays to min_lr_ratio * lr ...
    decay_end_frac: float = 0.9  # ... at this fraction of the steps, and stays there
    gradient_clip_val: float = 1.0
    accumulate_grad_batches: int = 1
    val_every_n_steps: int = 0  # 0: validate once per epoch
    checkpoint_every_n_steps: int = 50
    # Stages 2 and 3: measure the draft's acceptance against the frozen target with real speculative
    # decoding every n optimiser steps and at the end of training, on monitor_prompts held-out
    # prompts; either set to 0 turns the monitor off. See adaspec.callbacks.acceptance.
    monitor_every_n_steps: int = 1000
    monitor_prompts: int = 16
    tag: str = ""  # suffix of the artefact folder, to keep variants apart


@dataclass
class DistillConfig:
    name: str = MISSING
    k_default: float = 0.4  # the top-level `k` defaults to this
    divergence: Divergence = Divergence.forward_kl
    selection: str = Selection.batch.value  # batch | sequence | global
    normalize: Normalize = Normalize.all_tokens
    refresh_every_n_steps: int = 1000  # selection=global: threshold refresh period
    calibration_batches: int = 8  # selection=global: batches used to estimate the threshold
    chunk_size: int = 1024  # tokens per chunk of the per-token divergence
    # selection=batch under data parallelism: False takes the top-k quantile of each device's batch (as the
    # official code); True all-gathers dL from every device and thresholds at the quantile of the global batch.
    global_quantile: bool = False
    teacher: str = "live"  # live: run the target every batch; cache: read the teacher cache (`make cache`)
    cache_mode: str = "exact"  # exact: full float16 log-probs; topk: top `cache_topk` + remaining mass
    cache_topk: int = 64
    cache_ref_kl: bool = False  # stage 3 with teacher=cache: also cache the reference's per-token KL
    # Stage 3 budget of the official AdaSPEC scripts (see adaspec.distill.budget): batch_size / budget_k
    # sequences per step for the number of steps the stage would take at stage.batch_size, so the selected
    # tokens per step match the reference's and the draft sees 1/budget_k times the data.
    match_token_budget: bool = False
    budget_k: float | None = None  # the k whose budget to match; None: the run's own k


@dataclass
class PretrainConfig:
    """Stage 0 (from-scratch presets only): pre-train the target and the draft initialisation on a code
    corpus before the task. Its own lr, batch and epochs: the corpus is not the task, so stage.* of the
    task's stages do not apply (stage.max_steps still caps it)."""

    corpus: str = "none"  # none | stdlib (adaspec.data.stdlib_corpus)
    max_chars: int = 3_000_000  # characters of source taken (about 1M tokens with a 4k BPE)
    block_chars: int = 1200  # characters per training example, whole lines
    n_val: int = 64  # blocks held out for the validation loss
    seed: int = 0  # which files make the corpus (a seeded shuffle of the stdlib's files)
    lr: float = 2e-3
    batch_size: int = 32
    max_epochs: int = 1


@dataclass
class TrainerConfig:
    _target_: str = "lightning.pytorch.Trainer"
    accelerator: str = "cpu"
    devices: Any = 1
    num_nodes: int = 1
    strategy: str = "auto"
    precision: str = "32-true"
    # precision=16-mixed: initial dynamic loss scale (the practice note: 128; torch's default is 65536).
    fp16_init_scale: float = 128.0
    deterministic: bool = False
    log_every_n_steps: int = 10
    enable_progress_bar: bool = True


@dataclass
class WandbConfig:
    enabled: bool = False
    mode: str = "offline"  # offline | online | disabled
    project: str = "adaspec"
    entity: str | None = None


@dataclass
class LoggerConfig:
    name: str = MISSING
    wandb: WandbConfig = field(default_factory=WandbConfig)


@dataclass
class PathsConfig:
    root: str = "outputs"


@dataclass
class EvalConfig:
    n_prompts: int = 50  # the first n test prompts of the task
    draft_ks: list[float] = field(default_factory=lambda: [0.4, 1.0])
    # stage.tag of the evaluated drafts; every k is evaluated with every tag ("": untagged), e.g.
    # ["", "matched"] also evaluates draft-k<k>-matched (stage.tag=matched)
    draft_tags: list[str] = field(default_factory=lambda: [""])
    # tag -> its own ks instead of draft_ks, e.g. {matched: [0.33, 1.0]} (a tag whose arm trained fewer ks)
    tag_ks: dict[str, list[float]] = field(default_factory=dict)
    name: str = ""  # suffix of the results folder, e.g. eval/greedy-g5-ksweep, to keep evaluations apart
    compare_hf_assisted: bool = True
    # Acceptance against gamma (fixed gamma). Greedy decoding replays the target's output against the
    # draft's predictions, exactly and for all prompts at the cost of one draft forward per prompt;
    # with temperature > 0 it runs real speculative decoding on the first gamma_sweep_prompts prompts.
    gammas: list[int] = field(default_factory=lambda: [1, 2, 3, 5, 8])
    gamma_sweep_prompts: int = 8
    num_threads: int = 0  # torch threads during the benchmark; 0: keep torch's default


@dataclass
class Config:
    task: TaskConfig = MISSING
    model: ModelConfig = MISSING
    stage: StageConfig = MISSING
    distill: DistillConfig = MISSING
    decode: DecodeConfig = MISSING
    trainer: TrainerConfig = MISSING
    logger: LoggerConfig = MISSING
    pretrain: PretrainConfig = MISSING
    paths: PathsConfig = field(default_factory=PathsConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    k: float = 0.4
    gamma: int = 5
    seed: int = 0
    target_seed: int = 0  # the target is shared by every seed of the reference and draft
    resume: bool = False  # continue this stage from its last Lightning checkpoint
    overwrite: bool = False  # retrain a stage whose artefact exists with another config


def register_configs() -> None:
    cs = ConfigStore.instance()
    cs.store(name="config_schema", node=Config)
    for group, node in [
        ("task", TaskConfig),
        ("model", ModelConfig),
        ("stage", StageConfig),
        ("distill", DistillConfig),
        ("decode", DecodeConfig),
        ("trainer", TrainerConfig),
        ("logger", LoggerConfig),
        ("pretrain", PretrainConfig),
    ]:
        cs.store(group=group, name=f"{group}_schema", node=node)


register_configs()


def _check(ok: bool, key: str, value: Any, allowed: str) -> None:
    if not ok:
        raise UserError(f"config key `{key}`={value!r} is invalid: {allowed}")


def validate(cfg: DictConfig) -> DictConfig:
    """Check value ranges that the schema types cannot express. Raises UserError naming the key."""
    # first: with distill=adaspec, k defaults to task.default_k, so a bad one would be reported as a bad k
    dk = cfg.task.default_k
    _check(0.0 < dk <= 1.0, "task.default_k", dk, "must be in (0, 1], e.g. 0.4")
    _check(0.0 < cfg.k <= 1.0, "k", cfg.k, "must be in (0, 1], e.g. k=0.4 (AdaSPEC) or k=1.0 (DistillSpec)")
    _check(cfg.gamma >= 1, "gamma", cfg.gamma, "must be an integer >= 1, e.g. gamma=5")
    st = cfg.stage
    _check(st.name in STAGES, "stage.name", st.name, f"must be one of {', '.join(STAGES)}")
    _check(st.lr > 0, "stage.lr", st.lr, "must be > 0")
    _check(st.weight_decay >= 0, "stage.weight_decay", st.weight_decay, "must be >= 0")
    _check(st.batch_size >= 1, "stage.batch_size", st.batch_size, "must be >= 1")
    _check(st.max_epochs >= 1, "stage.max_epochs", st.max_epochs, "must be >= 1")
    _check(st.max_steps == -1 or st.max_steps >= 1, "stage.max_steps", st.max_steps, "must be -1 or >= 1")
    _check(0 <= st.warmup_frac < 1, "stage.warmup_frac", st.warmup_frac, "must be in [0, 1)")
    _check(0 < st.min_lr_ratio <= 1, "stage.min_lr_ratio", st.min_lr_ratio, "must be in (0, 1]")
    _check(
        st.warmup_frac < st.decay_end_frac <= 1,
        "stage.decay_end_frac",
        st.decay_end_frac,
        "must be in (stage.warmup_frac, 1]",
    )
    d = cfg.distill
    selections = [m.value for m in Selection]
    _check(
        d.selection in selections, "distill.selection", d.selection, f"must be one of {', '.join(selections)}"
    )
    _check(
        d.refresh_every_n_steps >= 1, "distill.refresh_every_n_steps", d.refresh_every_n_steps, "must be >= 1"
    )
    _check(d.calibration_batches >= 1, "distill.calibration_batches", d.calibration_batches, "must be >= 1")
    _check(d.chunk_size >= 1, "distill.chunk_size", d.chunk_size, "must be >= 1")
    _check(d.teacher in ("live", "cache"), "distill.teacher", d.teacher, "must be 'live' or 'cache'")
    _check(d.cache_mode in ("exact", "topk"), "distill.cache_mode", d.cache_mode, "must be 'exact' or 'topk'")
    _check(d.cache_topk >= 1, "distill.cache_topk", d.cache_topk, "must be >= 1")
    _check(
        not (d.teacher == "cache" and d.cache_mode == "topk" and d.divergence != "forward_kl"),
        "distill.divergence",
        d.divergence,
        "the topk teacher cache supports only forward_kl; use distill.cache_mode=exact",
    )
    if d.budget_k is not None:
        _check(
            0.0 < d.budget_k <= 1.0, "distill.budget_k", d.budget_k, "must be in (0, 1] or null (the run's k)"
        )
    _check(
        not (d.cache_ref_kl and d.teacher != "cache"),
        "distill.cache_ref_kl",
        d.cache_ref_kl,
        "needs distill.teacher=cache",
    )
    p = cfg.pretrain
    _check(
        p.corpus in ("none", "stdlib"),
        "pretrain.corpus",
        p.corpus,
        "must be 'none' or 'stdlib' (pretrain=stdlib)",
    )
    if st.name in PRETRAIN_STAGES:
        _check(
            p.corpus != "none",
            "pretrain.corpus",
            p.corpus,
            f"stage={st.name} (stage 0) needs a corpus: add pretrain=stdlib",
        )
    if p.corpus != "none":
        _check(
            cfg.model.source == "scratch",
            "pretrain.corpus",
            p.corpus,
            "stage 0 is for from-scratch presets; pretrained models need pretrain=none",
        )
        for key in ("max_chars", "block_chars", "batch_size", "max_epochs"):
            _check(p[key] >= 1, f"pretrain.{key}", p[key], "must be >= 1")
        _check(p.n_val >= 1, "pretrain.n_val", p.n_val, "must be >= 1")
        _check(p.lr > 0, "pretrain.lr", p.lr, "must be > 0")
    t = cfg.task
    _check(t.kind in ("math", "code"), "task.kind", t.kind, "must be 'math' or 'code'")
    _check(t.max_length >= 16, "task.max_length", t.max_length, "must be >= 16")
    _check(t.vocab_size >= 300, "task.vocab_size", t.vocab_size, "must be >= 300 (256 bytes + merges)")
    dom = t.domain
    for key in ("digit_weight", "operator_weight"):
        _check(dom[key] > 0, f"task.domain.{key}", dom[key], "must be > 0 (1.0 turns the weighting off)")
    _check(dom.api_vocab_size >= 0, "task.domain.api_vocab_size", dom.api_vocab_size, "must be >= 0 (0: off)")
    m = cfg.model
    _check(
        m.source in ("scratch", "pretrained"), "model.source", m.source, "must be 'scratch' or 'pretrained'"
    )
    _check(
        m.attn_implementation in ("auto", "sdpa", "eager", "flash_attention_2"),
        "model.attn_implementation",
        m.attn_implementation,
        "must be one of auto, sdpa, eager, flash_attention_2",
    )
    if m.source == "pretrained":
        for key in ("target_path", "draft_path"):
            _check(bool(m[key]), f"model.{key}", m[key], "pretrained models need a Hub id or a local folder")
    tr = cfg.trainer
    precisions = (
        "32-true",
        "bf16-mixed",
        "16-mixed",
        "bf16-true",
        "16-true",
        "64-true",
        "32",
        "16",
        "bf16",
        "64",
    )
    _check(
        str(tr.precision) in precisions,
        "trainer.precision",
        tr.precision,
        f"must be one of {', '.join(precisions)}",
    )
    _check(tr.fp16_init_scale > 0, "trainer.fp16_init_scale", tr.fp16_init_scale, "must be > 0, e.g. 128")
    _check(tr.num_nodes >= 1, "trainer.num_nodes", tr.num_nodes, "must be >= 1")
    from adaspec.models.attention import check_attn_implementation

    check_attn_implementation(m.attn_implementation)  # flash_attention_2 without flash-attn/CUDA: fail here
    for role in ("target", "draft"):
        arch = m[role]
        _check(
            arch.hidden_size % arch.num_attention_heads == 0,
            f"model.{role}.hidden_size",
            arch.hidden_size,
            f"must be divisible by model.{role}.num_attention_heads={arch.num_attention_heads}",
        )
    _check(cfg.decode.temperature >= 0, "decode.temperature", cfg.decode.temperature, "must be >= 0")
    _check(cfg.eval.n_prompts >= 1, "eval.n_prompts", cfg.eval.n_prompts, "must be >= 1")
    for kk in cfg.eval.draft_ks:
        _check(0.0 < kk <= 1.0, "eval.draft_ks", list(cfg.eval.draft_ks), "every k must be in (0, 1]")
    _check(len(cfg.eval.draft_ks) >= 1, "eval.draft_ks", list(cfg.eval.draft_ks), "name at least one k")
    _check(
        len(cfg.eval.draft_tags) >= 1,
        "eval.draft_tags",
        list(cfg.eval.draft_tags),
        'name at least one tag ("": untagged)',
    )
    _check(
        all(g >= 1 for g in cfg.eval.gammas), "eval.gammas", list(cfg.eval.gammas), "every gamma must be >= 1"
    )
    _check(
        cfg.eval.gamma_sweep_prompts >= 0,
        "eval.gamma_sweep_prompts",
        cfg.eval.gamma_sweep_prompts,
        "must be >= 0",
    )
    _check(
        cfg.eval.num_threads >= 0,
        "eval.num_threads",
        cfg.eval.num_threads,
        "must be >= 0 (0: torch's default)",
    )
    _check(cfg.decode.max_new_tokens >= 1, "decode.max_new_tokens", cfg.decode.max_new_tokens, "must be >= 1")
    _check(
        st.monitor_every_n_steps >= 0, "stage.monitor_every_n_steps", st.monitor_every_n_steps, "must be >= 0"
    )
    _check(
        st.monitor_prompts >= 0, "stage.monitor_prompts", st.monitor_prompts, "must be >= 0 (0: no monitor)"
    )
    return cfg


def to_yaml(cfg: DictConfig) -> str:
    return OmegaConf.to_yaml(cfg, resolve=True)
