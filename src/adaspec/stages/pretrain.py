"""Stage 0 (`pretrain=stdlib`): plain causal-LM training from random weights on the code corpus, for the
target (stage=pretrain_target, once) and the draft initialisation (stage=pretrain_draft, per seed)."""

from __future__ import annotations

from omegaconf import DictConfig
from transformers import PreTrainedTokenizerBase

from adaspec.data.datamodule import TaskDataModule
from adaspec.data.tokenizer import padded_vocab_size
from adaspec.models.build import scratch_model
from adaspec.stages.base import attn_implementation
from adaspec.stages.target import TargetFinetune


class Pretrain(TargetFinetune):
    """The loss is stage 1's: the corpus examples have empty prompts, so every token is an answer token."""

    @classmethod
    def from_config(cls, cfg: DictConfig, tokenizer: PreTrainedTokenizerBase, data: TaskDataModule):
        role, seed = (
            ("target", cfg.target_seed) if cfg.stage.name == "pretrain_target" else ("draft", cfg.seed)
        )
        student = scratch_model(
            cfg.model[role],
            vocab_size=padded_vocab_size(tokenizer),
            max_positions=cfg.model.max_position_embeddings,
            seed=seed,
            tokenizer=tokenizer,
            attn_implementation=attn_implementation(cfg),
        )
        return cls(student, cfg.stage)
