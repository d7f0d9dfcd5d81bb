"""One LightningModule per stage. A stage is its module here plus its config in conf/stage/."""

from __future__ import annotations

from adaspec.stages.base import StageModule
from adaspec.stages.draft import SelectiveDistill
from adaspec.stages.pretrain import Pretrain
from adaspec.stages.ref import ReferenceDistill
from adaspec.stages.target import TargetFinetune

STAGE_MODULES: dict[str, type[StageModule]] = {
    "pretrain_target": Pretrain,
    "pretrain_draft": Pretrain,
    "target": TargetFinetune,
    "ref": ReferenceDistill,
    "draft": SelectiveDistill,
}
