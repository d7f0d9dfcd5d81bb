"""Stage 0 on the code corpus: plain causal-LM training from random weights of the target
(stage=pretrain_target, once) and the draft initialisation (stage=pretrain_draft, per seed) of from-scratch
presets (`pretrain=stdlib`), or distillation of a pretrained target into the draft initialisation
(`pretrain=distill`)."""

from __future__ import annotations

from transformers import PreTrainedTokenizerBase

from adaspec.data.datamodule import TaskDataModule
from adaspec.data.tokenizer import padded_vocab_size
from adaspec.models.build import scratch_model
from adaspec.stages.base import attn_implementation
from adaspec.stages.draft_init import initial_draft
from adaspec.stages.ref import ReferenceDistill
from adaspec.stages.stage_run import StageRun
from adaspec.stages.target import TargetFinetune
from adaspec.stages.teachers import frozen_artefact


class Pretrain(TargetFinetune):
    """The loss is stage 1's: the corpus examples have empty prompts, so every token is an answer token."""

    @classmethod
    def build(cls, run: StageRun, tokenizer: PreTrainedTokenizerBase, data: TaskDataModule):
        role, seed = ("target", run.target_seed) if run.stage.name == "pretrain_target" else ("draft", run.seed)
        student = scratch_model(
            run.model[role],
            vocab_size=padded_vocab_size(tokenizer),
            max_positions=run.model.max_position_embeddings,
            seed=seed,
            tokenizer=tokenizer,
            attn_implementation=attn_implementation(run),
        )
        return cls(student, run.stage)


class DistilPretrain(ReferenceDistill):
    """pretrain.objective=kd: the draft, as model.draft_init makes it, learns the frozen stage-1 target's
    distribution (distill.divergence, target run live) on every corpus token; stage 2 then starts from it.
    Stage 2's loss on more text than the task's answers, and nothing task-specific: no domain weights, no
    acceptance monitor (the corpus has no prompts to decode from)."""

    @classmethod
    def build(cls, run: StageRun, tokenizer: PreTrainedTokenizerBase, data: TaskDataModule):
        student, _ = initial_draft(run.init_spec, tokenizer, from_stage0=False)
        target = frozen_artefact(run.layout.target_dir(), attn_implementation(run))
        return cls(student, run.stage, run.distill, target)

    def callbacks(self, run: StageRun, data: TaskDataModule) -> list:
        return []
