"""Where each stage's artefacts live, derived from the config alone.

    <paths.root>/<task>/<model>/seed<target_seed>/pretrain-target/  stage 0 (pretrain=stdlib only)
    <paths.root>/<task>/<model>/seed<seed>/pretrain-draft/       stage 0, the draft's, per seed
    <paths.root>/<task>/<model>/seed<target_seed>/target/        stage 1
    <paths.root>/<task>/<model>/seed<seed>/draft_init/final      the draft/reference initial weights
    <paths.root>/<task>/<model>/seed<seed>/ref/                  stage 2 (ref-eagle3/ for an EAGLE-3 head,
                                                                 ref-h256x6/ for model.draft_name=h256x6,
                                                                 ref-eagle3-warm540/ for a head warmed up, ...)
    <paths.root>/<task>/<model>/seed<seed>/draft-k<k>/           stage 3, one folder per k

A stage folder holds `final/` (the save_pretrained artefact), `checkpoints/` and `logs/`. So
`make stage1 stage2 stage3` need no path arguments, and a sweep over k shares one target and one
reference. The config is read once, at the top (`paths.of(cfg)`): what is below takes the `Layout`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig

CHECKPOINTS = "checkpoints"
LAST_CHECKPOINT = "last.ckpt"
# eval.draft_tags' name for the stage-2 reference's row, so no trained draft may carry it as stage.tag
REFERENCE_TAG = "ref"


def _suffix(tag: str) -> str:
    return f"-{tag}" if tag else ""


def schedule_suffix(warmup_steps: int) -> str:
    """The folder suffix of heads trained with distill.ttt_warmup_steps=warmup_steps: `-warm<n>`, "" for none."""
    return f"-warm{warmup_steps}" if warmup_steps else ""


def format_k(k: float) -> str:
    return f"{float(k):g}"


def fixed_answers(distill: DictConfig | None) -> str:
    """Whose answers the batches that are not on-policy hold: "target" for distill.data=target and for
    data=mixed with mixed_with=target, else "dataset" (what the teacher cache covers)."""
    if distill is None:
        return "dataset"
    data = distill.get("data", "dataset")
    if data == "mixed":
        return distill.get("mixed_with") or "dataset"
    return "target" if data == "target" else "dataset"


def sampled_answers(distill: DictConfig | None) -> bool:
    """Whether distill.data=target's answers are sampled (distill.answer_temperature above 0), not greedy."""
    return distill is not None and float(distill.get("answer_temperature", 0.0) or 0.0) > 0


def answers_sampling(distill: DictConfig | None) -> str:
    """"" for the target's greedy answers; `-t<T>-s<seed>-b<batch>` for answers it sampled
    (distill.answer_temperature, answer_seed, answer_batch_size: the draws depend on a batch's rows): other data,
    in other folders."""
    if not sampled_answers(distill):
        return ""
    temperature = float(distill.answer_temperature)
    return f"-t{temperature:g}-s{distill.get('answer_seed', 0)}-b{distill.get('answer_batch_size', 16)}"


def keeps_unfinished_answers(distill: DictConfig | None) -> bool:
    """Whether the target's answers unfinished within their budget are trained on, cut short
    (distill.keep_unfinished_answers), not dropped."""
    return distill is not None and bool(distill.get("keep_unfinished_answers", False))


def training_answers(distill: DictConfig | None) -> str:
    """What the target-answer data of the caches, stages and evaluations is named after: how the answers were
    drawn (`answers_sampling`), then `-unfinished` where the unfinished ones are kept: the same answers
    folder, other training data."""
    return answers_sampling(distill) + ("-unfinished" if keeps_unfinished_answers(distill) else "")


def _data_suffix(data: str | None, sampling: str = "") -> str:
    """Drafts trained on the target's own answers (distill.data=target) live beside the dataset-trained ones."""
    return f"-target-answers{sampling}" if data == "target" else ""


@dataclass(frozen=True)
class Layout:
    """What one run's artefact folders are named after, read from its config once (`of`)."""

    root: Path  # paths.root
    task: str
    model: str
    seed: int
    target_seed: int
    kind: str  # the draft kind's folder suffix (`-eagle3` for a head), then `-<model.draft_name>` where set
    stage: str  # the stage being trained: stage.tag names its folder only, the others are found untagged
    tag: str
    ref_tag: str  # but the reference: distill.ref_tag names the one the other stages read
    k: float
    data: str | None  # distill.data
    reference_data: str | None  # what the reference was trained on (`of`)
    answers_prefix: str  # the caches' over the target's own answers (`of`)
    cache_name: str  # exact | topk<K>
    answers_name: str  # <task.prompt_format>-max<distill.answer_max_new_tokens>[-t<T>-s<seed>-b<batch>]
    answers_variant: str = ""  # training_answers(distill)
    # `-warm<n>` for heads trained with distill.ttt_warmup_steps=n: their own folders (stages and evaluation),
    # so a warm-up never meets the default's head under one name (fingerprint refusal) nor needs a stage.tag
    schedule: str = ""

    @property
    def model_root(self) -> Path:
        return self.root / self.task / self.model

    @property
    def names(self) -> str:
        """The overrides that name the run's task and model, for the commands a message suggests."""
        return f"task={self.task} model={self.model}"

    def _own_tag(self, stage: str) -> str:
        return self.tag if self.stage == stage else ""

    def target_dir(self) -> Path:
        return self.model_root / f"seed{self.target_seed}" / f"target{_suffix(self._own_tag('target'))}"

    def draft_init_dir(self) -> Path:
        return self.model_root / f"seed{self.seed}" / f"draft_init{self.kind}"

    def ref_dir(self) -> Path:
        tag = _suffix(self.tag if self.stage == "ref" else self.ref_tag)
        data = _data_suffix(self.reference_data, self.answers_variant)
        return self.model_root / f"seed{self.seed}" / f"ref{self.kind}{self.schedule}{tag}{data}"

    def draft_dir(self, k: float | None = None, tag: str | None = None, data: str | None = None) -> Path:
        """`data`: the distill.data the draft was trained with, when not the config's (eval.tag_data)."""
        k = self.k if k is None else k
        tag = self._own_tag("draft") if tag is None else tag
        data = self.data if data is None else data
        data = _data_suffix(data, self.answers_variant)
        name = f"draft-k{format_k(k)}{self.kind}{self.schedule}{_suffix(tag)}{data}"
        return self.model_root / f"seed{self.seed}" / name

    def pretrain_target_dir(self) -> Path:
        return self.model_root / f"seed{self.target_seed}" / "pretrain-target"

    def pretrain_draft_dir(self) -> Path:
        return self.model_root / f"seed{self.seed}" / f"pretrain-draft{self.kind}"

    def teacher_cache_dir(self) -> Path:
        """The teacher cache belongs to the target it was computed from."""
        return self.target_dir() / "teacher_cache" / f"{self.answers_prefix}{self.cache_name}"

    def feature_cache_dir(self, layers: list[int]) -> Path:
        """The target's hidden states at `layers` for an EAGLE-3 head: beside the teacher cache, on the same
        data."""
        return self.target_dir() / "feature_cache" / f"{self.answers_prefix}layers{'-'.join(map(str, layers))}"

    def target_answers_dir(self) -> Path:
        """The target's generated answers to the training prompts (distill.data=target) belong to the target."""
        return self.target_dir() / "answers" / self.answers_name

    def eval_dir(self) -> Path:
        data = _data_suffix(self.data, self.answers_variant)
        return self.model_root / f"seed{self.seed}" / f"eval{self.kind}{self.schedule}{data}"


def of(cfg: DictConfig) -> Layout:
    """The run's layout: the one place the artefact folders read the whole config."""
    # the drafts load torch, which the commands that only find folders never need
    from adaspec.drafts import trained_kind

    distill = cfg.get("distill")
    data = distill.get("data") if distill is not None else None
    # the reference: for stage 2 itself distill.data; for the stages that read it distill.ref_data when set
    # (drafts on other data sharing one reference), else distill.data
    reference_data = data if cfg.stage.name == "ref" or distill is None else distill.get("ref_data") or data
    # caches over the target's own answers (other tokens than the dataset's) say so, and how many training
    # problems they cover: demo-real's first 500 and the whole answer set are other data for one target
    n_train = cfg.task.n_train if cfg.task.n_train is not None else "all"
    sampling, variant = answers_sampling(distill), training_answers(distill)
    answers_prefix = f"target-answers{variant}-n{n_train}-" if fixed_answers(distill) == "target" else ""
    kind = trained_kind(cfg.model.get("draft_kind", "model")).folder_suffix
    kind += _suffix(cfg.model.get("draft_name") or "")
    warmup = 0 if distill is None else int(distill.get("ttt_warmup_steps", 0))
    return Layout(
        root=Path(cfg.paths.root),
        task=str(cfg.task.name),
        model=str(cfg.model.name),
        seed=cfg.seed,
        target_seed=cfg.target_seed,
        kind=kind,
        stage=str(cfg.stage.name),
        tag=cfg.stage.tag or "",
        ref_tag="" if distill is None else distill.get("ref_tag") or "",
        k=cfg.k,
        data=data,
        reference_data=reference_data,
        answers_prefix=answers_prefix,
        cache_name="" if distill is None else
        "exact" if distill.cache_mode == "exact" else f"topk{distill.cache_topk}",
        answers_name="" if distill is None else
        f"{cfg.task.prompt_format}-max{distill.answer_max_new_tokens}{sampling}",
        answers_variant=variant,
        schedule=schedule_suffix(warmup),
    )


def final(stage_folder: Path) -> Path:
    return stage_folder / "final"


def run_record(stage_folder: Path) -> Path:
    """The fingerprint of the run that writes a stage's checkpoints (a resume must match it)."""
    return stage_folder / "run.json"


def last_checkpoint(stage_folder: Path) -> Path:
    """Lightning's latest checkpoint of a stage (a folder under DeepSpeed)."""
    return stage_folder / CHECKPOINTS / LAST_CHECKPOINT
