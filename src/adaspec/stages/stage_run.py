"""What a stage's module reads of the run's config, built once by the pipeline (`StageRun.of`): the groups a stage
trains with, where the run's artefacts are, its seeds, and the record its draft initialisation is saved with. No
logger, trainer strategy, evaluation or baseline settings reach a stage."""

from __future__ import annotations

from dataclasses import dataclass

from omegaconf import DictConfig

from adaspec.artefacts import paths
from adaspec.artefacts.store import Provenance, provenance
from adaspec.data.target_answers import AnswerSpec
from adaspec.stages.draft_init import InitSpec
from adaspec.toolkit import device_for


@dataclass(frozen=True)
class StageRun:
    layout: paths.Layout
    stage: DictConfig
    model: DictConfig
    task: DictConfig
    distill: DictConfig
    decode: DictConfig
    pretrain: DictConfig | None
    k: float
    seed: int
    target_seed: int
    models_dir: str  # paths.models: where pretrained checkpoints are
    precision: str  # trainer.precision: the attention kernel depends on it
    overwrite: bool  # rebuild the caches a stage makes on first use
    init_made_by: Provenance  # what the draft initialisation records, when this stage saves it
    answers: AnswerSpec  # the target's answers, where the stage trains on them

    @classmethod
    def of(cls, cfg: DictConfig) -> StageRun:
        layout = paths.of(cfg)
        answers = AnswerSpec(layout, cfg.model, cfg.task, cfg.distill, device_for(cfg.trainer))
        return cls(layout, cfg.stage, cfg.model, cfg.task, cfg.distill, cfg.decode, cfg.get("pretrain"),
                   cfg.k, cfg.seed, cfg.target_seed, str(cfg.paths.models), str(cfg.trainer.precision),
                   bool(cfg.overwrite), provenance(cfg, "draft_init"), answers)

    @property
    def init_spec(self) -> InitSpec:
        return InitSpec(self.model, self.task, self.pretrain, self.layout, self.models_dir, self.seed)
