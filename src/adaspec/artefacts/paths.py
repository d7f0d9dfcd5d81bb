"""Where each stage's artefacts live, derived from the config alone.

    <paths.root>/<task>/<model>/seed<target_seed>/pretrain-target/  stage 0 (pretrain=stdlib only)
    <paths.root>/<task>/<model>/seed<seed>/pretrain-draft/       stage 0, the draft's, per seed
    <paths.root>/<task>/<model>/seed<target_seed>/target/        stage 1
    <paths.root>/<task>/<model>/seed<seed>/draft_init/final      the draft/reference initial weights
    <paths.root>/<task>/<model>/seed<seed>/ref/                  stage 2 (ref-eagle3/ for an EAGLE-3 head,
                                                                 ref-h256x6/ for model.draft_name=h256x6, ...)
    <paths.root>/<task>/<model>/seed<seed>/draft-k<k>/           stage 3, one folder per k

A stage folder holds `final/` (the save_pretrained artefact), `checkpoints/` and `logs/`. So
`make stage1 stage2 stage3` need no path arguments, and a sweep over k shares one target and one
reference.
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

CHECKPOINTS = "checkpoints"
LAST_CHECKPOINT = "last.ckpt"
# eval.draft_tags' name for the stage-2 reference's row, so no trained draft may carry it as stage.tag
REFERENCE_TAG = "ref"


def _model_root(cfg: DictConfig) -> Path:
    return Path(cfg.paths.root) / cfg.task.name / cfg.model.name


def _suffix(tag: str) -> str:
    return f"-{tag}" if tag else ""


def _kind(cfg: DictConfig) -> str:
    """The folder suffix of the kind of draft (model.draft_kind; `-eagle3` for an EAGLE-3 head), then
    `-<model.draft_name>` where set (drafts of other sizes, e.g. `-h256x6`): every kind and size of draft shares
    the target, its answers and caches, never a draft folder."""
    # the drafts load torch, which the commands that only find folders never need
    from adaspec.drafts import trained_kind

    kind = trained_kind(cfg.model.get("draft_kind", "model")).folder_suffix
    return kind + _suffix(cfg.model.get("draft_name") or "")


def _own_tag(cfg: DictConfig, stage: str) -> str:
    """stage.tag names the folder of the stage being trained only; the others are found untagged."""
    return cfg.stage.tag if cfg.stage.name == stage else ""


def format_k(k: float) -> str:
    return f"{float(k):g}"


def _data_suffix(cfg: DictConfig, data: str | None = None) -> str:
    """Drafts trained on the target's own answers (distill.data=target, or `data`) live beside the
    dataset-trained ones."""
    distill = cfg.get("distill")
    if data is None:
        data = distill.get("data") if distill is not None else None
    return "-target-answers" if data == "target" else ""


def fixed_answers(distill: DictConfig | None) -> str:
    """Whose answers the batches that are not on-policy hold: "target" for distill.data=target and for
    data=mixed with mixed_with=target, else "dataset" (what the teacher cache covers)."""
    if distill is None:
        return "dataset"
    data = distill.get("data", "dataset")
    if data == "mixed":
        return distill.get("mixed_with") or "dataset"
    return "target" if data == "target" else "dataset"


def reference_data(cfg: DictConfig) -> str | None:
    """What the reference was trained on: for stage 2 itself distill.data; for the stages that read it
    distill.ref_data when set (drafts on other data sharing one reference), else distill.data."""
    distill = cfg.get("distill")
    if distill is None:
        return None
    if cfg.stage.name == "ref":
        return distill.get("data")
    return distill.get("ref_data") or distill.get("data")


def target_dir(cfg: DictConfig) -> Path:
    tag = _own_tag(cfg, "target")
    return _model_root(cfg) / f"seed{cfg.target_seed}" / f"target{_suffix(tag)}"


def draft_init_dir(cfg: DictConfig) -> Path:
    return _model_root(cfg) / f"seed{cfg.seed}" / f"draft_init{_kind(cfg)}"


def ref_dir(cfg: DictConfig) -> Path:
    tag = _own_tag(cfg, "ref")
    return _model_root(cfg) / f"seed{cfg.seed}" / f"ref{_kind(cfg)}{_suffix(tag)}{_data_suffix(cfg, reference_data(cfg))}"


def draft_dir(cfg: DictConfig, k: float | None = None, tag: str | None = None, data: str | None = None) -> Path:
    """`data`: the distill.data the draft was trained with, when not the config's (eval.tag_data)."""
    k = cfg.k if k is None else k
    tag = _own_tag(cfg, "draft") if tag is None else tag
    return (_model_root(cfg) / f"seed{cfg.seed}"
            / f"draft-k{format_k(k)}{_kind(cfg)}{_suffix(tag)}{_data_suffix(cfg, data)}")


def pretrain_target_dir(cfg: DictConfig) -> Path:
    return _model_root(cfg) / f"seed{cfg.target_seed}" / "pretrain-target"


def pretrain_draft_dir(cfg: DictConfig) -> Path:
    return _model_root(cfg) / f"seed{cfg.seed}" / f"pretrain-draft{_kind(cfg)}"


def final(stage_folder: Path) -> Path:
    return stage_folder / "final"


def run_record(stage_folder: Path) -> Path:
    """The fingerprint of the run that writes a stage's checkpoints (a resume must match it)."""
    return stage_folder / "run.json"


def last_checkpoint(stage_folder: Path) -> Path:
    """Lightning's latest checkpoint of a stage (a folder under DeepSpeed)."""
    return stage_folder / CHECKPOINTS / LAST_CHECKPOINT


def teacher_cache_dir(cfg: DictConfig) -> Path:
    """The teacher cache belongs to the target it was computed from."""
    d = cfg.distill
    name = "exact" if d.cache_mode == "exact" else f"topk{d.cache_topk}"
    return target_dir(cfg) / "teacher_cache" / f"{_answers_prefix(cfg)}{name}"


def feature_cache_dir(cfg: DictConfig, layers: list[int]) -> Path:
    """The target's hidden states at `layers` for an EAGLE-3 head: beside the teacher cache, on the same data."""
    return target_dir(cfg) / "feature_cache" / f"{_answers_prefix(cfg)}layers{'-'.join(str(i) for i in layers)}"


def _answers_prefix(cfg: DictConfig) -> str:
    """Caches over the target's own answers (other tokens than the dataset's) say so, and how many training
    problems they cover: demo-real's first 500 and the whole answer set are other data for one target."""
    if fixed_answers(cfg.distill) != "target":
        return ""
    return f"target-answers-n{cfg.task.n_train if cfg.task.n_train is not None else 'all'}-"


def target_answers_dir(cfg: DictConfig) -> Path:
    """The target's generated answers to the training prompts (distill.data=target) belong to the target."""
    return target_dir(cfg) / "answers" / f"{cfg.task.prompt_format}-max{cfg.distill.answer_max_new_tokens}"


def eval_dir(cfg: DictConfig) -> Path:
    return _model_root(cfg) / f"seed{cfg.seed}" / f"eval{_kind(cfg)}{_data_suffix(cfg)}"
