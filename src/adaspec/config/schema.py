"""Structured-config schemas, registered in Hydra's ConfigStore.

Types, choices (enums) and unknown keys are checked by OmegaConf while Hydra composes the config, so
`distill.selection=glob` fails there with the allowed values. Ranges and rules that tie fields together
are in `adaspec.config.rules`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from adaspec.config.identity import (
    TARGET_STAGES,
    Rule,
    always,
    counted,
    for_stages,
    never,
    unless_at,
)
from adaspec.decoding.config import DecodeConfig
from adaspec.distill.selection import RULES


class Choice(StrEnum):
    """Base of the choice enums whose values are not Python names (`global` is a keyword, `32-true` has a
    dash): OmegaConf matches a string to a member by name, so these are made with the functional API
    and every member's name is its value. YAML and the command line read `32` as an int; it means "32"."""

    @classmethod
    def _missing_(cls, value: object) -> Choice | None:
        if isinstance(value, int) and not isinstance(value, bool):
            return cls._value2member_map_.get(str(value))
        return None


class Divergence(StrEnum):
    forward_kl = "forward_kl"
    reverse_kl = "reverse_kl"
    tvd = "tvd"
    jsd = "jsd"  # GKD's generalised JSD, distill.jsd_beta (adaspec.distill.divergence)
    nla = "nla"  # -log of the expected acceptance 1 - TVD (vllm-project/speculators' `nla`)
    lk = "lk"  # speculators' LK hybrid: exp(-3 sg[alpha]) KL(p || q) + (1 - exp(-3 sg[alpha])) TVD


# the rules registered in adaspec.distill.selection (each one's docstring says what it keeps)
Selection = Choice("Selection", list(RULES))


class KSchedule(StrEnum):
    constant = "constant"
    linear = "linear"  # k from 1.0 down to `k` over the first distill.k_schedule_frac of the steps
# Lightning's precision names
Precision = Choice(
    "Precision",
    ["32-true", "bf16-mixed", "16-mixed", "bf16-true", "16-true", "64-true", "32", "16", "bf16", "64"],
)


class Normalize(StrEnum):
    all_tokens = "all_tokens"
    selected_tokens = "selected_tokens"


class StageName(StrEnum):
    pretrain_target = "pretrain_target"
    pretrain_draft = "pretrain_draft"
    target = "target"
    ref = "ref"
    draft = "draft"


PRETRAIN_STAGES = (StageName.pretrain_target, StageName.pretrain_draft)


class TaskKind(StrEnum):
    """Selects the score and the domain strategies."""

    math = "math"
    code = "code"


class ModelSource(StrEnum):
    scratch = "scratch"
    pretrained = "pretrained"


class PromptFormat(StrEnum):
    plain = "plain"  # the prompt text as it is, the answer ended by EOS
    chat = "chat"  # the tokenizer's chat template, the answer ended by its end-of-turn token


class Architecture(StrEnum):
    """Of models built from config (adaspec.models.build.scratch_model)."""

    gpt_neox = "gpt_neox"
    llama = "llama"  # tied embeddings


class DraftInit(StrEnum):
    """How a draft built from `model.draft` starts (adaspec.models.init_from_target)."""

    random = "random"
    target_embedding = "target_embedding"  # the target's embedding projected to the draft's width
    target_layers = "target_layers"  # the target's embedding, first model.draft.num_hidden_layers layers, head


class HeadOutputInit(StrEnum):
    """How an EAGLE-3 head's final norm and output layer start (adaspec.models.eagle3.Eagle3Head.from_target)."""

    random = "random"
    target = "target"  # the target's final norm and its output rows of the draft vocabulary (as speculators does)


class DraftKind(StrEnum):
    """What a draft is (adaspec.drafts): a small causal LM, or an EAGLE-3 head reading the target's hidden states."""

    model = "model"
    eagle3 = "eagle3"


class AttnImplementation(StrEnum):
    auto = "auto"
    sdpa = "sdpa"
    eager = "eager"
    flash_attention_2 = "flash_attention_2"


class TeacherSource(StrEnum):
    live = "live"  # run the target on every batch
    cache = "cache"  # read the teacher cache (`make cache`)


class DistillData(StrEnum):
    dataset = "dataset"  # the task's reference answers
    target = "target"  # answers the target generated for the training prompts (adaspec.data.target_answers)
    draft = "draft"  # on-policy: the student samples every batch's answers (adaspec.distill.on_policy)
    mixed = "mixed"  # on-policy on a share distill.on_policy_fraction of the steps, the dataset's answers else


class CacheMode(StrEnum):
    exact = "exact"  # full float16 log-probs
    topk = "topk"  # the top `cache_topk` log-probs and the remaining mass


class Corpus(StrEnum):
    none = "none"
    stdlib = "stdlib"  # adaspec.data.stdlib_corpus


class PretrainObjective(StrEnum):
    lm = "lm"  # causal-LM training from random weights: from-scratch presets, target and draft (pretrain=stdlib)
    kd = "kd"  # the draft distils the stage-1 target on the corpus: pretrained targets (pretrain=distill)


class WandbMode(StrEnum):
    offline = "offline"
    online = "online"
    disabled = "disabled"


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
    """Domain strategies of the practice note. Off here; conf/task/<task>.yaml turns on its task's flavour
    (math: digit and operator weights; code: whitespace tokens and API names). src/adaspec/distill/
    token_classes.py says which tokens are digits, operators or whitespace. Each option is ablatable on
    the command line, e.g. task.domain.digit_weight=1.

    The weights (stages 2-3) apply to the divergence of the answer token being predicted (the label).
    The note's "2x learning rate for numbers" is realised as a loss weight: a token's gradient scales
    with its weight, so under SGD a weight of 2 is exactly a 2x learning rate on that token's contribution
    (Adam keeps the ratio between tokens). The weighted sum is divided by the number of tokens (as without
    weights: all answer tokens, or the selected ones with distill.normalize=selected_tokens), not by the
    sum of the weights, so other tokens keep their step size and weights of 1.0 give exactly the
    unweighted loss. Selection still ranks tokens by the unweighted dL.

    operator_embedding (stage 3): a learned vector per operator type (plus, minus, times, divide, equals),
    zero at the start, added to the draft's input-embedding rows of that type's tokens (the note's
    "special positional encoding for operators"): a torch parametrization of the embedding weight during
    training, merged into the plain embedding when training ends, so the saved draft is an ordinary
    Hugging Face model.
    """

    # Each option counts in the fingerprint of the stages it changes only, so an ablation such as
    # task.domain.digit_weight=1 reuses the target (and a stage-3-only option the reference).
    # stages 2-3: loss weight of tokens made only of digits ("7", " 42")
    digit_weight: float = counted(1.0, when=for_stages("ref", "draft"))
    # stages 2-3: loss weight of + - * / = (and "x" as times) tokens
    operator_weight: float = counted(1.0, when=for_stages("ref", "draft"))
    operator_embedding: bool = counted(False, when=for_stages("draft"))  # stage 3: a vector per operator type
    # stage 3: newline/indentation tokens are always selected (code: on)
    keep_whitespace_tokens: bool = counted(False, when=for_stages("draft"))
    # stage 1, from-scratch tokenizers: add the N most frequent dotted names (code: 64)
    api_vocab_size: int = 0


def _target_n_train_counts(stage: str, task: dict, cfg: dict) -> bool:
    return stage == "target" and task.get("target_n_train") is not None


@dataclass
class TaskConfig:
    name: str = MISSING
    kind: TaskKind = TaskKind.math
    local_dir: str | None = None  # folder of JSONL files instead of the Hugging Face Hub
    hub_path: str | None = None
    hub_name: str | None = None
    max_length: int = 256  # prompt + answer tokens; longer examples are truncated
    vocab_size: int = 1024  # BPE vocabulary of from-scratch models
    n_train: int | None = None  # use only the first n training records (None: all)
    # stage 1 alone trains on the first N training records instead (a target fine-tuned on more problems than
    # the drafts distil on); None: task.n_train's
    target_n_train: int | None = counted(None, when=_target_n_train_counts)
    n_test: int | None = None
    n_val: int = 64  # held-out examples (from the test split) for the validation loss
    arith: ArithConfig = field(default_factory=ArithConfig)
    # stage 3's token-selection ratio for this task, the default of the top-level `k` (conf/config.yaml;
    # distill=distillspec sets k=1.0 instead, and `k=...` on the command line wins). MBPP: 0.33.
    default_k: float = counted(0.4, when=never)  # acts through `k`
    domain: DomainConfig = field(default_factory=DomainConfig)
    # adaspec.data.encoding; the model preset decides by default (model=smollm2: chat)
    prompt_format: PromptFormat = "${model.prompt_format}"  # type: ignore[assignment]


@dataclass
class ArchConfig:
    architecture: Architecture = Architecture.gpt_neox
    hidden_size: int = 64
    num_hidden_layers: int = 2
    num_attention_heads: int = 2
    intermediate_size: int = 256


def _draft_build_key(name: str, default: Any) -> Rule:
    """The draft's initialisation never changes the target, and at its default leaves every fingerprint
    as it was before the key existed."""
    at_default = unless_at(default, name)
    return lambda stage, section, cfg: stage not in TARGET_STAGES and at_default(stage, section, cfg)


@dataclass
class ModelConfig:
    name: str = MISSING
    source: ModelSource = ModelSource.scratch
    target: ArchConfig = field(default_factory=ArchConfig)
    draft: ArchConfig = field(default_factory=ArchConfig)
    # pretrained presets: a Hub id, a local folder, or a .gguf file (or a folder with one), converted once
    target_path: str | None = None
    draft_path: str | None = None  # null: the draft is built from `draft`, with the target's tokenizer
    max_position_embeddings: int = 1024
    # auto: flash_attention_2 when the flash-attn package and a CUDA GPU are there (and training runs in
    # bf16/fp16), else sdpa. Asking for flash_attention_2 without them is an error before any model loads.
    attn_implementation: AttnImplementation = AttnImplementation.auto
    gradient_checkpointing: bool = False  # recompute activations in the backward pass of the trained model
    prompt_format: PromptFormat = PromptFormat.plain  # the default of task.prompt_format
    # drafts built from `draft` (draft_path null, no stage 0): their initial weights, from the target artefact
    draft_init: DraftInit = counted(DraftInit.random, when=_draft_build_key("draft_init", "random"))
    # > 0: the draft's embedding and head cover only the N most frequent target tokens of the training split
    # (adaspec.models.draft_vocab, saved as draft_vocab.json with every draft); 0: the full vocabulary
    draft_vocab_size: int = counted(0, when=_draft_build_key("draft_vocab_size", 0))
    # eagle3: the draft is one decoder layer at the target's width over its hidden states (adaspec.models.eagle3),
    # not built from `draft`; model.draft_vocab_size still sets its output vocabulary
    draft_kind: DraftKind = counted(DraftKind.model, when=_draft_build_key("draft_kind", "model"))
    # eagle3: `target` starts the head's final norm and output layer as the target's (its output rows of the
    # draft vocabulary), so training begins in the target's output space; `random` as before the key existed
    head_output_init: HeadOutputInit = counted(
        HeadOutputInit.random, when=_draft_build_key("head_output_init", "random")
    )
    # a name for drafts built from another `draft` than the preset's (e.g. h256x6): their stage folders get
    # the suffix -<draft_name>, so drafts of several sizes share one target and its caches. Only where they
    # live: the fingerprint records `draft` itself
    draft_name: str = counted("", when=never)


@dataclass
class StageConfig:
    name: StageName = MISSING
    lr: float = 1e-3
    weight_decay: float = 0.0
    batch_size: int = 16
    max_epochs: int = 1
    max_steps: int = -1  # -1: max_epochs decides; 0: no training, the starting model is saved as it is
    warmup_frac: float = 0.1
    min_lr_ratio: float = 0.1  # cosine decays to min_lr_ratio * lr ...
    decay_end_frac: float = 0.9  # ... at this fraction of the steps, and stays there
    gradient_clip_val: float = 1.0
    accumulate_grad_batches: int = 1
    # how often to validate, checkpoint or measure acceptance never changes the trained weights: not counted
    val_every_n_steps: int = counted(0, when=never)  # 0: validate once per epoch
    checkpoint_every_n_steps: int = counted(50, when=never)
    # Stages 2 and 3: measure the draft's acceptance against the frozen target with real speculative
    # decoding every n optimiser steps and at the end of training, on monitor_prompts held-out
    # prompts; either set to 0 turns the monitor off. See adaspec.callbacks.acceptance.
    monitor_every_n_steps: int = counted(1000, when=never)
    monitor_prompts: int = counted(16, when=never)
    tag: str = ""  # suffix of the artefact folder, to keep variants apart
    # Stages 2 and 3: stop after this many validations in a row without a lower val/kl and keep the best
    # validated weights (the paper's "optimal epoch" setting; max_epochs is the cap); 0: off
    early_stop_patience: int = counted(0, when=unless_at(0, "early_stop_patience"))
    # each run of this many batches of the shuffled order sorted by length, longest first, so that a batch pads
    # less (HF Trainer's group_by_length; single-process runs); 0: off. The same loss, other batches
    group_by_length: int = counted(0, when=unless_at(0, "group_by_length"))


def _kd_stage_0(cfg: dict) -> bool:
    pretrain = cfg.get("pretrain") or {}
    return pretrain.get("corpus", "none") != "none" and pretrain.get("objective") == "kd"


def _reads_answers(stage: str, distill: dict, cfg: dict) -> bool:
    """The data-source keys act on stages 2-3 only where they train on other answers than the dataset's."""
    return stage in ("ref", "draft") and distill.get("data", "dataset") != "dataset"


def _sampled_answers(stage: str, distill: dict, cfg: dict) -> bool:
    """The sampling keys count only away from greedy answers (artefacts made before them keep their identity)."""
    return _reads_answers(stage, distill, cfg) and float(distill.get("answer_temperature", 0.0) or 0.0) > 0


def _keeps_unfinished(stage: str, distill: dict, cfg: dict) -> bool:
    """Counts only when kept (artefacts made before the key keep their identity)."""
    return _reads_answers(stage, distill, cfg) and bool(distill.get("keep_unfinished_answers", False))


def _divergence_counts(stage: str, distill: dict, cfg: dict) -> bool:
    # the reference counts it away from the forward KL only (references made before it counted keep theirs)
    return {"draft": True, "ref": distill.get("divergence") != "forward_kl", "pretrain_draft": _kd_stage_0(cfg)}.get(
        stage, False
    )


def _jsd_beta_counts(stage: str, distill: dict, cfg: dict) -> bool:
    return stage == "draft" or (distill.get("divergence") == "jsd" and _divergence_counts(stage, distill, cfg))


def _cache_topk_counts(stage: str, distill: dict, cfg: dict) -> bool:
    # a top-K teacher cache is a truncated teacher: it changes the reference too
    return stage == "draft" or (stage == "ref" and distill.get("teacher") == "cache" and distill.get("cache_mode") == "topk")


def _mixed_keys_count(stage: str, distill: dict, cfg: dict) -> bool:
    return _reads_answers(stage, distill, cfg) and distill.get("data") == "mixed"


def _mixed_with_counts(stage: str, distill: dict, cfg: dict) -> bool:
    return _mixed_keys_count(stage, distill, cfg) and distill.get("mixed_with", "dataset") != "dataset"


def _ttt_passes_count(stage: str, distill: dict, cfg: dict) -> bool:
    return stage in ("ref", "draft") and distill.get("ttt_passes", 1) != 1


def _ttt_warmup_counts(stage: str, distill: dict, cfg: dict) -> bool:
    return stage in ("ref", "draft") and distill.get("ttt_warmup_steps", 0) != 0


def _ref_data_counts(stage: str, distill: dict, cfg: dict) -> bool:
    return stage == "draft" and distill.get("ref_data") not in (None, distill.get("data", "dataset"))


def _ref_tag_counts(stage: str, distill: dict, cfg: dict) -> bool:
    return stage == "draft" and bool(distill.get("ref_tag"))


@dataclass
class DistillConfig:
    # fields not declared otherwise count for stage 3's drafts only
    IDENTITY_DEFAULT: ClassVar[Rule] = for_stages("draft")

    divergence: Divergence = counted(Divergence.forward_kl, when=_divergence_counts)
    selection: Selection = Selection.batch  # type: ignore[valid-type]
    normalize: Normalize = Normalize.all_tokens
    refresh_every_n_steps: int = 1000  # selection=global: threshold refresh period
    calibration_batches: int = 8  # selection=global: batches used to estimate the threshold
    chunk_size: int = 1024  # tokens per chunk of the per-token divergence
    # selection=batch under data parallelism: False takes the top-k quantile of each device's batch (as the
    # official code); True all-gathers dL from every device and thresholds at the quantile of the global batch.
    global_quantile: bool = False
    teacher: TeacherSource = TeacherSource.live
    cache_mode: CacheMode = CacheMode.exact
    cache_topk: int = counted(64, when=_cache_topk_counts)
    cache_ref_kl: bool = False  # stage 3 with teacher=cache: also cache the reference's per-token KL
    # Stage 3 budget of the official AdaSPEC scripts (see adaspec.distill.budget): batch_size / budget_k
    # sequences per step for the number of steps the stage would take at stage.batch_size, so the selected
    # tokens per step match the reference's and the draft sees 1/budget_k times the data.
    match_token_budget: bool = False
    budget_k: float | None = None  # the k whose budget to match; None: the run's own k
    jsd_beta: float = counted(0.5, when=_jsd_beta_counts)  # divergence=jsd: 0 is the forward KL, 1 the reverse KL (GKD's beta)
    # selection=global: weight of each batch's (1 - k) quantile of dL in the running threshold, so that it
    # follows the draft as it learns; 0 keeps the calibrated threshold until the next refresh
    threshold_ema: float = 0.3
    k_schedule: KSchedule = KSchedule.constant
    k_schedule_frac: float = 0.2  # k_schedule=linear: the fraction of the steps over which k falls to `k`
    # what stages 2-3 train on: the dataset's answers, or the target's own greedy answers to the training
    # prompts (sequence-level distillation, generated once and cached beside the target; `make answers`)
    data: DistillData = counted(DistillData.dataset, when=_reads_answers)
    # data=target: answers not finished within this many tokens are dropped
    answer_max_new_tokens: int = counted(256, when=_reads_answers)
    # data=target: prompts per generation batch (no effect on greedy answers; sampled ones draw per batch)
    answer_batch_size: int = counted(16, when=_sampled_answers)
    # data=target: 0 the target's greedy answers; above 0 answers it samples at this temperature from its whole
    # distribution (no top-k or top-p), seeded by answer_seed per batch of a fixed composition: other data, in
    # other folders (`-t<T>-s<seed>-b<batch>`). What a head served at temperature 1 is queried on (issue 46 item 6)
    answer_temperature: float = counted(0.0, when=_sampled_answers)
    answer_seed: int = counted(0, when=_sampled_answers)
    # data=target: also train on the answers not finished within answer_max_new_tokens, truncated there and
    # with no stop token learnt after them (other data, in folders ending -unfinished). Dropping them keeps a
    # biased subset of the target's samples: at temperature 1, 39 % of GSM8K answers finish within 256 tokens
    keep_unfinished_answers: bool = counted(False, when=_keeps_unfinished)
    # the answers command only: instead of the run's training prompts, write these parts of the answers to the
    # task's whole training file into the repository (all, P or A-B; adaspec.data.answer_parts)
    answer_parts: str | None = counted(None, when=never)
    # data=mixed: the share of steps trained on student samples (GKD's lambda)
    on_policy_fraction: float = counted(0.5, when=_mixed_keys_count)
    # data=mixed: the answers of the other steps (dataset|target)
    mixed_with: DistillData = counted(DistillData.dataset, when=_mixed_with_counts)
    # stage 3: the data the reference it distils against was trained on (its folder); null: `data` (stage 2
    # itself always trains on `data`, into that data's folder). Lets
    # drafts on different data share one reference, e.g. distill.data=dataset distill.ref_data=target
    ref_data: DistillData | None = counted(None, when=_ref_data_counts)
    # stage 3 and the evaluation's reference row: the stage.tag of the reference to read ("": the untagged one;
    # stage.tag names only the folder of the stage being trained), e.g. stage=ref stage.tag=b8, then stage=draft
    # stage.tag=b8 distill.ref_tag=b8 for a draft against that reference
    ref_tag: str = counted("", when=_ref_tag_counts)
    # an EAGLE-3 head (model.draft_kind=eagle3): passes of EAGLE-3's training-time test per step; a token's
    # divergence is then sum_k 0.8^k * that of pass k (the head reading its own outputs k positions back), for
    # the head and its reference alike, so dL compares like with like. 1: the first proposal's only
    ttt_passes: int = counted(1, when=_ttt_passes_count)
    # the first n optimiser steps train the first pass only (a third of a 3-pass step's cost here), then all
    # ttt_passes; validation always runs every pass. 0: every step runs every pass (EAGLE-3's recipe)
    ttt_warmup_steps: int = counted(0, when=_ttt_warmup_counts)
    soft_temperature: float = 0.05  # selection=soft: width of the sigmoid over the rank, in fractions of N


@dataclass
class PretrainConfig:
    """Stage 0: before the task, pre-train the target and the draft initialisation on a code corpus
    (objective=lm, from-scratch presets), or distil the stage-1 target into the draft initialisation on
    the corpus and the task's training prompts (objective=kd, pretrained targets). Its own lr, batch and
    epochs: the corpus is not the task, so stage.* of the task's stages do not apply (stage.max_steps still
    caps it)."""

    corpus: Corpus = Corpus.none
    objective: PretrainObjective = PretrainObjective.lm
    task_prompts: int = 0  # objective=kd: the first n prompts of the task's whole training split join the corpus
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
    devices: Any = 1  # a number of devices, -1 or "auto" (all of them), or a list of device indices
    num_nodes: int = 1
    strategy: str = "auto"
    precision: Precision = Precision["32-true"]  # type: ignore[valid-type]
    # precision=16-mixed: initial dynamic loss scale (the practice note: 128; torch's default is 65536).
    fp16_init_scale: float = 128.0
    deterministic: bool = False
    log_every_n_steps: int = 10
    enable_progress_bar: bool = True


@dataclass
class WandbConfig:
    enabled: bool = False
    mode: WandbMode = WandbMode.offline
    project: str = "adaspec"
    entity: str | None = None


@dataclass
class LoggerConfig:
    wandb: WandbConfig = field(default_factory=WandbConfig)


@dataclass
class PathsConfig:
    root: str = "outputs"
    models: str = "models"  # pretrained checkpoints fetched and converted once (adaspec.models.fetch)


@dataclass
class EvalConfig:
    n_prompts: int = 50  # the first n test prompts of the task
    draft_ks: list[float] = field(default_factory=lambda: [0.4, 1.0])
    # stage.tag of the evaluated drafts; every k is evaluated with every tag ("": untagged), e.g.
    # ["", "matched"] also evaluates draft-k<k>-matched (stage.tag=matched)
    draft_tags: list[str] = field(default_factory=lambda: [""])
    # tag -> its own ks instead of draft_ks, e.g. {matched: [0.33, 1.0]} (a tag whose arm trained fewer ks)
    tag_ks: dict[str, list[float]] = field(default_factory=dict)
    # tag -> the distill.data its drafts were trained with, where not this run's (it names their folder), e.g.
    # {dataset: dataset} beside drafts on the target's answers
    tag_data: dict[str, DistillData] = field(default_factory=dict)
    name: str = ""  # suffix of the results folder, e.g. eval/greedy-g5-ksweep, to keep evaluations apart
    # also evaluate the stage-2 reference (row `ref`). It is DistillSpec: stage 3 at k = 1 with the
    # reference's stage settings reproduces its weights bit for bit, so draft_ks=[0.4] with reference=true
    # compares AdaSPEC with DistillSpec without training the reference twice
    reference: bool = False
    compare_hf_assisted: bool = True
    # Acceptance against gamma (fixed gamma). Greedy decoding replays the target's output against the
    # draft's predictions, exactly and for all prompts at the cost of one draft forward per prompt;
    # with temperature > 0 it runs real speculative decoding on the first gamma_sweep_prompts prompts.
    gammas: list[int] = field(default_factory=lambda: [1, 2, 3, 5, 8])
    gamma_sweep_prompts: int = 8
    # Greedy only: time the first timed_prompts prompts (target-only, ours, HF) and replay the others from
    # the target's greedy output, so acceptance covers every prompt at one target run plus one draft forward
    # each; speed-ups are over the timed prompts. None: time every prompt. Sampling always times them all.
    timed_prompts: int | None = None
    num_threads: int = 0  # torch threads during the benchmark; 0: keep torch's default
    # target-only decoding also timed in these serving configurations (<dtype>[-static|-compiled]); every
    # speedup_vs_target is against the fastest of them and the evaluation's own (decode.target_dtype, ...)
    target_servings: list[str] = field(default_factory=list)
    # every trained draft and baseline also decoded with draft trees of each shape (`k4-d4-n16`, `+lookup`: the
    # hybrid), a row each named <draft>@<shape>, beside the rows of decode.tree (adaspec.decoding.tree)
    trees: list[str] = field(default_factory=list)
    # decode.tree=auto: the shapes it weighs beside the chain of decode.gamma, and how many test prompts after the
    # evaluated ones calibrate their acceptance (adaspec.evaluation.tree_choice)
    # (three node counts: a compiled target compiles a verification graph for each)
    tree_candidates: list[str] = field(default_factory=lambda: [
        "k4-d3-n8", "k4-d3-n12", "k4-d4-n16", "k4-d5-n16", "k4-d3-n8+lookup8", "k4-d3-n12+lookup8",
        "k4-d4-n16+lookup12"])
    tree_calibration_prompts: int = 4


def _pretrain_counts(stage: str, pretrain: dict | None, cfg: dict) -> bool:
    """Stage 0 changes every later stage, but not a target it does not pre-train."""
    p = cfg.get("pretrain") or {}
    return p.get("corpus", "none") != "none" and (stage != "target" or p.get("objective") == "lm")


@dataclass
class Config:
    # the sections and values that make an artefact are declared with `counted`; the others never count
    IDENTITY_DEFAULT: ClassVar[Rule] = never

    task: TaskConfig = counted(MISSING, when=always)
    model: ModelConfig = counted(MISSING, when=always)
    stage: StageConfig = counted(MISSING, when=always)
    # stage 0's distillation records its divergence at the top level (as it did first)
    distill: DistillConfig = counted(MISSING, when=for_stages("draft", "ref", "pretrain_draft"),
                                     flat_for=("pretrain_draft",))
    decode: DecodeConfig = MISSING
    trainer: TrainerConfig = MISSING
    logger: LoggerConfig = MISSING
    pretrain: PretrainConfig = counted(MISSING, when=_pretrain_counts)
    paths: PathsConfig = field(default_factory=PathsConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    # training-free drafts evaluated beside the trained ones, name -> constructor (`_target_` and arguments);
    # composed from conf/baseline/ (default [prompt_lookup]; baseline=[] for none)
    baseline: dict[str, Any] = field(default_factory=dict)
    k: float = counted(0.4, when=for_stages("draft"))
    gamma: int = 5
    seed: int = counted(0, when=lambda stage, cfg, _: stage not in TARGET_STAGES)
    # the target is shared by every seed of the reference and draft
    target_seed: int = counted(0, when=for_stages(*TARGET_STAGES))
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
