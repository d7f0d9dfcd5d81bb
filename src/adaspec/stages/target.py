"""Stage 1: fine-tune the target with cross-entropy on answer tokens only."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers import PreTrainedTokenizerBase

from adaspec.artefacts import paths
from adaspec.data.datamodule import TaskDataModule
from adaspec.data.tokenizer import padded_vocab_size
from adaspec.distill.tokens import answer_logits, answer_mask, answer_targets
from adaspec.models.build import load_model, pretrained_tokenizer, resize_embeddings, scratch_model
from adaspec.models.fetch import resolve_pretrained
from adaspec.stages.base import StageModule, attn_implementation
from adaspec.stages.stage_run import StageRun
from adaspec.training.stage_specs import pretrains_target


class TargetFinetune(StageModule):
    @classmethod
    def build(cls, run: StageRun, tokenizer: PreTrainedTokenizerBase, data: TaskDataModule):
        """From stage 0's target, a pretrained model (model.target_path resolved: a pinned checkpoint under
        paths.models, fetched and converted on first use; embeddings resized for the tokens the tokenizer
        gained), or random weights. stage.max_steps=0 saves it as it starts: a pretrained target as it is."""
        attn = attn_implementation(run)
        if pretrains_target(run.pretrain):
            student = load_model(paths.final(run.layout.pretrain_target_dir()), attn)
        elif run.model.source == "pretrained":
            source = resolve_pretrained(run.model.target_path, run.models_dir)
            n_added = pretrained_tokenizer(source)[1]
            student = resize_embeddings(load_model(source, attn), tokenizer, n_added)
        else:
            student = scratch_model(
                run.model.target,
                vocab_size=padded_vocab_size(tokenizer),
                max_positions=run.model.max_position_embeddings,
                seed=run.target_seed,
                tokenizer=tokenizer,
                attn_implementation=attn,
            )
        return cls(student, run.stage)

    def _cross_entropy(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        logits = self.student(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        mask = answer_mask(batch["labels"])
        return F.cross_entropy(answer_logits(logits, mask).float(), answer_targets(batch["labels"], mask))

    def loss(self, batch):
        return self._cross_entropy(batch), {}

    def val_metrics(self, batch):
        return {"ce": self._cross_entropy(batch)}
