"""Stage 3: selective distillation. Train the draft only on the top-k fraction of answer tokens by
dL = L_draft - L_ref, the tokens where the draft lags furthest behind what the reference reached.

The loss sums the selected tokens' divergence through a mask (`torch.where`), never by multiplying every
token by its 0/1 selection, so a non-finite value of an unselected token cannot reach it.
"""

from __future__ import annotations

from dataclasses import replace

import lightning.pytorch as pl
import numpy as np
import torch
from omegaconf import DictConfig
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from adaspec.callbacks.selection_stats import SelectionStats
from adaspec.callbacks.threshold import ThresholdRefresh
from adaspec.config.schema import Normalize
from adaspec.data.datamodule import TaskDataModule
from adaspec.distill.k_schedule import k_at_step
from adaspec.distill.selection import SelectionState, select
from adaspec.distill.token_classes import domain_tables
from adaspec.distill.tokens import answer_targets
from adaspec.drafts import TrainedDraft
from adaspec.models.operator_embedding import add_operator_embedding, merge_parametrizations
from adaspec.stages.base import attn_implementation
from adaspec.stages.ref import ReferenceDistill, distillation_models, on_policy_settings
from adaspec.stages.stage_run import StageRun
from adaspec.stages.teachers import cached_ref_kl, frozen_draft
from adaspec.training.stage_specs import stage_dir


class SelectiveDistill(ReferenceDistill):
    def __init__(
        self,
        student: TrainedDraft,
        stage: DictConfig,
        distill: DictConfig,
        target: PreTrainedModel,
        reference: TrainedDraft | None,
        k: float,
        teacher=None,
        ref_kl: np.ndarray | None = None,
        token_weights: torch.Tensor | None = None,
        always_keep: torch.Tensor | None = None,
        on_policy: dict | None = None,
    ):
        """With `ref_kl` (per cache row, see adaspec.distill.ref_kl_cache) the reference is never run.
        `always_keep` [V] bool: label token ids selected whatever their dL (task.domain.keep_whitespace_tokens),
        in addition to the top-k, which still ranks every token by the unweighted dL."""
        frozen = {"reference": reference.model} if reference is not None else {}
        super().__init__(
            student, stage, distill, target, frozen=frozen, teacher=teacher, token_weights=token_weights,
            on_policy=on_policy,
        )
        self.register_buffer("always_keep", always_keep, persistent=False)
        self.reference = reference
        self.ref_kl = ref_kl
        self.k = k  # the target k; `current_k` applies distill.k_schedule
        # what the selection rule reads beyond dL (selection=global: the threshold ThresholdRefresh keeps)
        self.selection_state = SelectionState(temperature=distill.soft_temperature)

    @classmethod
    def build(cls, run: StageRun, tokenizer: PreTrainedTokenizerBase, data: TaskDataModule):
        teacher, target, student = distillation_models(run, tokenizer, data)
        domain = domain_tables(run.task.domain, tokenizer, run.stage.name)  # loss weights, kept tokens
        if domain.operator_types is not None:
            add_operator_embedding(student.model, domain.operator_types)
        source = student.feature_source  # the reference reads the target's hidden states where its student does
        ref_kl = cached_ref_kl(run, teacher, data, tokenizer, source) if run.distill.cache_ref_kl else None
        reference = None if ref_kl is not None else frozen_draft(run.layout.ref_dir(), attn_implementation(run), source)
        return cls(
            student,
            run.stage,
            run.distill,
            target,
            reference,
            run.k,
            teacher=teacher,
            ref_kl=ref_kl,
            token_weights=domain.token_weights,
            always_keep=domain.always_keep,
            on_policy=on_policy_settings(run, tokenizer),
        )

    def callbacks(self, run: StageRun, data: TaskDataModule) -> list[pl.Callback]:
        """Threshold refresh (selection=global), selection statistics, then the reference's acceptance
        monitor."""
        callbacks: list[pl.Callback] = []
        distill = run.distill
        if distill.selection == "global" and run.k < 1:
            callbacks.append(
                ThresholdRefresh(
                    data.calibration_dataloader(),
                    distill.calibration_batches,
                    distill.refresh_every_n_steps,
                    ema=distill.threshold_ema,
                )
            )
        # most often selected / filtered tokens -> <draft stage folder>/selected_tokens.*
        callbacks.append(SelectionStats(data.tokenizer, stage_dir(run.layout)))
        return callbacks + super().callbacks(run, data)

    def token_deltas(self, batch: dict[str, torch.Tensor], teacher=None):
        """(L_draft [N] with gradients, dL [N] without, answer mask [B, T-1]); `teacher` (default the
        configured one) gives both divergences."""
        teacher = teacher or self.teacher
        signal, mask = self.teacher_signal(batch, teacher)
        if self.ref_kl is not None:  # cached per-token KL of the frozen reference, aligned with the teacher cache
            kl_ref = torch.from_numpy(np.asarray(self.ref_kl[signal.rows], dtype=np.float32))
        else:  # the reference first, so that its forward's buffers are freed before the draft's graph is built
            with torch.no_grad():
                kl_ref = self.draft_divergence(self.reference, batch, mask, signal, teacher)
        kl_draft = self.draft_divergence(self.draft, batch, mask, signal, teacher)
        kl_ref = kl_ref.to(kl_draft.device)
        return kl_draft, kl_draft.detach() - kl_ref, mask

    def current_k(self) -> float:
        """k at this optimiser step (distill.k_schedule; the target k when no trainer is attached)."""
        schedule = self.distill_cfg.get("k_schedule", "constant")
        if str(schedule) == "constant" or self._trainer is None:
            return self.k
        total = max(1, self.trainer.max_steps)
        return k_at_step(self.k, self.global_step, total, schedule, self.distill_cfg.k_schedule_frac)

    def setup(self, stage: str) -> None:
        if self.distill_cfg.get("global_quantile", False) and _world_size() > 1:
            self.selection_state.gather = self.gather_deltas  # selection=batch over every device's tokens

    def step(self, batch):
        """The loss over the tokens the selection rule keeps; the rule's record goes to the callbacks."""
        batch, teacher, step_metrics = self.training_batch(batch)
        kl_draft, delta, mask = self.token_deltas(batch, teacher)
        k = self.current_k()
        record = select(str(self.distill_cfg.selection), delta, k, mask, self.selection_state)
        selected, soft = record.selected, record.weights
        answer_ids = answer_targets(batch["labels"], mask)  # an on-policy step samples its own labels
        if self.always_keep is not None:
            kept = self.always_keep[answer_ids]
            selected = selected | kept
            if soft is not None:  # always-kept tokens weigh at least 1
                soft = torch.where(kept, soft.clamp_min(1.0), soft)
        record = replace(record, selected=selected, weights=soft, answer_ids=answer_ids)
        if soft is None:
            denominator = selected.sum()
            per_token = kl_draft
        else:
            denominator, per_token = soft.sum(), kl_draft * soft
        if self.distill_cfg.normalize == Normalize.all_tokens.value:
            denominator = kl_draft.numel()
        weights = self.answer_weights(batch, mask)
        if weights is not None:
            per_token = per_token * weights
        keep = selected if soft is None else soft > 0
        loss = torch.where(keep, per_token, 0.0).sum() / max(float(denominator), 1.0)
        metrics = {"selected_frac": selected.float().mean(), "delta_mean": delta.mean(),
                   "threshold": record.threshold, **step_metrics}
        if str(self.distill_cfg.get("k_schedule", "constant")) != "constant":
            metrics["k"] = k
        return loss, metrics, {"selection": record}

    def loss(self, batch):
        loss, metrics, _ = self.step(batch)
        return loss, metrics

    def gather_deltas(self, delta: torch.Tensor) -> torch.Tensor:
        """distill.global_quantile: the answer tokens' dL of all devices' batches (all-gathered; per-device
        counts differ, so padded)."""
        sizes = self.all_gather(torch.tensor([delta.numel()], device=delta.device)).flatten()
        padded = torch.full((int(sizes.max()),), float("-inf"), device=delta.device, dtype=torch.float32)
        padded[: delta.numel()] = delta.float()
        gathered = self.all_gather(padded).reshape(len(sizes), -1)
        return torch.cat([row[: int(n)] for row, n in zip(gathered, sizes, strict=True)])

    def on_fit_end(self) -> None:
        # task.domain.operator_embedding: fold the operator-type vectors into the embedding weight, so the
        # student that gets validated and saved is a plain Hugging Face model
        merge_parametrizations(self.student)

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["selection_threshold"] = self.selection_state.threshold

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        self.selection_state.threshold = checkpoint.get("selection_threshold")


def _world_size() -> int:
    dist = torch.distributed
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
