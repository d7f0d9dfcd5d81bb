"""One LightningModule per stage. A stage is its module here plus its config in conf/stage/."""

from __future__ import annotations

from adaspec.stages.base import StageModule
from adaspec.stages.draft import SelectiveDistill
from adaspec.stages.pretrain import DistilPretrain, Pretrain
from adaspec.stages.ref import ReferenceDistill
from adaspec.stages.stage_run import StageRun
from adaspec.stages.target import TargetFinetune

STAGE_MODULES: dict[str, type[StageModule]] = {
    "pretrain_target": Pretrain,
    "pretrain_draft": Pretrain,
    "target": TargetFinetune,
    "ref": ReferenceDistill,
    "draft": SelectiveDistill,
}


def stage_module(run: StageRun) -> type[StageModule]:
    """The module that trains `run`'s stage: STAGE_MODULES', or a distilling stage 0 (pretrain.objective=kd)."""
    if run.stage.name == "pretrain_draft" and run.pretrain.objective == "kd":
        return DistilPretrain
    return STAGE_MODULES[run.stage.name]
