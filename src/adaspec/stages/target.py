"""Stage 1: fine-tune the target with cross-entropy on answer tokens only."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from omegaconf import DictConfig
from transformers import PreTrainedTokenizerBase

from adaspec.artefacts import paths
from adaspec.data.datamodule import TaskDataModule
from adaspec.data.tokenizer import padded_vocab_size
from adaspec.distill.tokens import answer_logits, answer_mask, answer_targets
from adaspec.models.build import load_model, pretrained_tokenizer, resize_embeddings, scratch_model
from adaspec.models.fetch import resolve_pretrained
from adaspec.stages.base import StageModule, attn_implementation
from adaspec.training.stage_specs import pretrains_target


class TargetFinetune(StageModule):
    @classmethod
    def from_config(cls, cfg: DictConfig, tokenizer: PreTrainedTokenizerBase, data: TaskDataModule):
        """From stage 0's target, a pretrained model (model.target_path resolved: a pinned checkpoint under
        paths.models, fetched and converted on first use; embeddings resized for the tokens the tokenizer
        gained), or random weights. stage.max_steps=0 saves it as it starts: a pretrained target as it is."""
        attn = attn_implementation(cfg)
        if pretrains_target(cfg):
            student = load_model(paths.final(paths.pretrain_target_dir(cfg)), attn)
        elif cfg.model.source == "pretrained":
            source = resolve_pretrained(cfg.model.target_path, cfg.paths.models)
            n_added = pretrained_tokenizer(source)[1]
            student = resize_embeddings(load_model(source, attn), tokenizer, n_added)
        else:
            student = scratch_model(
                cfg.model.target,
                vocab_size=padded_vocab_size(tokenizer),
                max_positions=cfg.model.max_position_embeddings,
                seed=cfg.target_seed,
                tokenizer=tokenizer,
                attn_implementation=attn,
            )
        return cls(student, cfg.stage)

    def _cross_entropy(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        logits = self.student(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        mask = answer_mask(batch["labels"])
        return F.cross_entropy(answer_logits(logits, mask).float(), answer_targets(batch["labels"], mask))

    def loss(self, batch):
        return self._cross_entropy(batch), {}

    def val_metrics(self, batch):
        return {"ce": self._cross_entropy(batch)}
