"""Stage 2: distil the reference from the frozen target with a per-token divergence (forward KL).

A draft with a reduced vocabulary (`draft_vocab`, model.draft_vocab_size) reads its inputs as draft ids and
is compared with the teacher over its support (`adaspec.stages.teachers.SupportTeacher`); so is the frozen
reference of stage 3, which shares its map.
"""

from __future__ import annotations

import lightning.pytorch as pl
import torch
from omegaconf import DictConfig
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from adaspec import paths
from adaspec.callbacks.acceptance import AcceptanceMonitor, prompt_ids
from adaspec.data.datamodule import TaskDataModule
from adaspec.data.encoding import stop_token_id
from adaspec.distill.teacher import LiveTeacher
from adaspec.distill.token_classes import domain_tables
from adaspec.distill.tokens import answer_logits, answer_mask, answer_targets
from adaspec.models.vocab import draft_vocab_of, load_draft
from adaspec.stages.base import StageModule, attn_implementation
from adaspec.stages.draft_init import ensure_draft_init
from adaspec.stages.teachers import cached_teacher, for_draft, frozen_artefact


class ReferenceDistill(StageModule):
    def __init__(
        self,
        student: PreTrainedModel,
        stage: DictConfig,
        distill: DictConfig,
        target: PreTrainedModel | None,
        frozen: dict[str, PreTrainedModel] | None = None,
        teacher=None,
        token_weights: torch.Tensor | None = None,
    ):
        """`teacher` (a LiveTeacher or CachedTeacher) defaults to running `target` live. With a cached
        teacher, `target` may be None, or kept only for callbacks that decode with it. `token_weights` [V]:
        the loss weight of each label token id (task.domain digit/operator weights; None: all 1)."""
        models = {"target": target} if target is not None else {}
        super().__init__(student, stage, frozen={**models, **(frozen or {})})
        self.distill_cfg = distill
        teacher = teacher or LiveTeacher(target, distill.divergence, distill.chunk_size, distill.jsd_beta)
        self.teacher = for_draft(teacher, draft_vocab_of(student))
        self.register_buffer("token_weights", token_weights, persistent=False)

    @classmethod
    def from_config(cls, cfg: DictConfig, tokenizer: PreTrainedTokenizerBase, data: TaskDataModule):
        teacher, target, student = distillation_models(cfg, tokenizer, data)
        weights = domain_tables(cfg.task.domain, tokenizer, cfg.stage.name).token_weights
        return cls(student, cfg.stage, cfg.distill, target, teacher=teacher, token_weights=weights)

    def callbacks(self, cfg: DictConfig, data: TaskDataModule) -> list[pl.Callback]:
        """The acceptance monitor: real speculative decoding against the target every n steps."""
        prompts = prompt_ids(data.val_set, cfg.stage.monitor_prompts)
        if cfg.stage.monitor_every_n_steps <= 0 or not prompts:
            return []
        monitor = AcceptanceMonitor(
            prompts,
            every_n_steps=cfg.stage.monitor_every_n_steps,
            gamma=cfg.decode.gamma,
            eos_token_id=stop_token_id(data.tokenizer, str(cfg.task.prompt_format)),  # a target id
        )
        return [monitor]

    def _answer_logits(
        self, model: PreTrainedModel, batch: dict[str, torch.Tensor], mask: torch.Tensor
    ) -> torch.Tensor:
        """[N, vocabulary] answer logits of a draft (student or reference); a reduced draft reads draft ids."""
        vocab, ids = draft_vocab_of(model), batch["input_ids"]
        if vocab is not None:
            ids = vocab.to(ids.device).to_draft(ids)
        logits = model(input_ids=ids, attention_mask=batch["attention_mask"]).logits
        return answer_logits(logits, mask)

    def student_divergence(self, batch: dict[str, torch.Tensor]):
        """(per-token divergence of the student [N], the teacher's signal for the batch, answer mask [B, T-1])."""
        mask = answer_mask(batch["labels"])
        with torch.no_grad():
            signal = self.teacher.signal(batch, mask)
        return self.teacher.divergence(signal, self._answer_logits(self.student, batch, mask)), signal, mask

    def answer_weights(self, batch: dict[str, torch.Tensor], mask: torch.Tensor) -> torch.Tensor | None:
        """[N] loss weight of each answer token's label, or None when every weight is 1. The weighted sum is
        divided by a token count, never by the sum of weights, so a weight of 2 doubles that token's step."""
        if self.token_weights is None:
            return None
        return self.token_weights[answer_targets(batch["labels"], mask)].float()

    def loss(self, batch):
        kl, _, mask = self.student_divergence(batch)
        weights = self.answer_weights(batch, mask)
        if weights is None:
            return kl.mean(), {}
        return (kl * weights).sum() / max(kl.numel(), 1), {}

    def val_metrics(self, batch):
        kl, _, _ = self.student_divergence(batch)
        return {"kl": kl.mean()}


def distillation_models(cfg: DictConfig, tokenizer: PreTrainedTokenizerBase, data: TaskDataModule):
    """(cached teacher or None, frozen target or None, student) of stages 2 and 3. With a cached teacher the
    target is loaded only for the acceptance monitor, which decodes with it. The student starts from the
    seed's draft initialisation (with its id map as `draft_vocab` when its vocabulary is reduced)."""
    attn = attn_implementation(cfg)
    teacher = cached_teacher(cfg, data)
    needs_target = teacher is None or cfg.stage.monitor_every_n_steps > 0
    target = frozen_artefact(paths.target_dir(cfg), attn) if needs_target else None
    student = load_draft(ensure_draft_init(cfg, tokenizer), attn)
    return teacher, target, student
