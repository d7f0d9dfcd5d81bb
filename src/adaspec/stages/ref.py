"""Stage 2: distil the reference from the frozen target with a per-token divergence (forward KL).

The student is a `TrainedDraft` of model.draft_kind: one with a reduced vocabulary (model.draft_vocab_size)
maps its inputs to draft ids itself and is compared with the teacher over its support
(`adaspec.stages.teachers.SupportTeacher`); so is the frozen reference of stage 3, which shares its map.
"""

from __future__ import annotations

import time

import lightning.pytorch as pl
import torch
from omegaconf import DictConfig
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from adaspec.callbacks.acceptance import AcceptanceMonitor, prompt_ids
from adaspec.callbacks.best_validation import KeepBestValidation
from adaspec.data.datamodule import TaskDataModule
from adaspec.data.encoding import stop_token_id
from adaspec.decoding.tree_shape import monitor_tree
from adaspec.distill.draft_divergence import draft_divergence
from adaspec.distill.on_policy import is_on_policy_step, student_continuations
from adaspec.distill.teacher import LiveTeacher
from adaspec.distill.token_classes import domain_tables
from adaspec.distill.tokens import answer_mask, answer_targets
from adaspec.drafts import FeatureSource, TrainedDraft, load_draft
from adaspec.stages.base import StageModule, attn_implementation
from adaspec.stages.draft_init import ensure_draft_init
from adaspec.stages.stage_run import StageRun
from adaspec.stages.teachers import cached_teacher, feature_cache, for_draft, frozen_artefact


class ReferenceDistill(StageModule):
    def __init__(
        self,
        student: TrainedDraft,
        stage: DictConfig,
        distill: DictConfig,
        target: PreTrainedModel | None,
        frozen: dict[str, PreTrainedModel] | None = None,
        teacher=None,
        token_weights: torch.Tensor | None = None,
        on_policy: dict | None = None,
    ):
        """`teacher` (a LiveTeacher or CachedTeacher) defaults to running `target` live. With a cached
        teacher, `target` may be None, or kept only for callbacks that decode with it. `token_weights` [V]:
        the loss weight of each label token id (task.domain digit/operator weights; None: all 1).
        `on_policy` (distill.data=draft|mixed): fraction, seed, stop_id, pad_id and max_new_tokens of the
        steps that train on the student's own samples, against `target` run live."""
        models = {"target": target} if target is not None else {}
        super().__init__(student.model, stage, frozen={**models, **(frozen or {})})
        self.draft = student  # the student as a draft: its id map and how it is called (not a submodule)
        self.distill_cfg = distill
        live = LiveTeacher(target, distill.divergence, distill.chunk_size, distill.jsd_beta) if target else None
        self.teacher = for_draft(teacher or live, student)
        self.live_teacher = for_draft(live, student) if live else None
        self.on_policy = on_policy
        self.register_buffer("token_weights", token_weights, persistent=False)

    @classmethod
    def build(cls, run: StageRun, tokenizer: PreTrainedTokenizerBase, data: TaskDataModule):
        teacher, target, student = distillation_models(run, tokenizer, data)
        weights = domain_tables(run.task.domain, tokenizer, run.stage.name).token_weights
        return cls(student, run.stage, run.distill, target, teacher=teacher, token_weights=weights,
                   on_policy=on_policy_settings(run, tokenizer))

    def callbacks(self, run: StageRun, data: TaskDataModule) -> list[pl.Callback]:
        """Early stopping on val/kl (stage.early_stop_patience, counted from the end of a head's warm-up), then
        the acceptance monitor: real speculative decoding against the target every n steps."""
        stage, warmup = run.stage, int(run.distill.get("ttt_warmup_steps", 0))
        stopping = [KeepBestValidation(stage.early_stop_patience, counted_after_step=warmup)
                    ] if stage.early_stop_patience else []
        prompts = prompt_ids(data.val_set, stage.monitor_prompts)
        if stage.monitor_every_n_steps <= 0 or not prompts:
            return stopping
        monitor = AcceptanceMonitor(
            prompts,
            every_n_steps=stage.monitor_every_n_steps,
            gamma=run.decode.gamma,
            eos_token_id=stop_token_id(data.tokenizer, str(run.task.prompt_format)),  # a target id
            target_dtype=str(run.decode.target_dtype),
            tree=monitor_tree(run.decode.get("tree", "off")),
        )
        return [*stopping, monitor]

    @property
    def artefact(self) -> TrainedDraft:
        return self.draft

    def draft_divergence(self, draft, batch: dict[str, torch.Tensor], mask: torch.Tensor, signal, teacher):
        """[N] divergence of a draft's answer tokens from the teacher's signal (adaspec.distill.draft_divergence,
        over distill.ttt_passes passes for an EAGLE-3 head; the first pass only in the training steps before
        distill.ttt_warmup_steps, for the head and its reference alike)."""
        return draft_divergence(draft, batch, mask, signal, teacher, self.ttt_passes_now())

    def ttt_passes_now(self) -> int:
        passes = int(self.distill_cfg.get("ttt_passes", 1))
        warming = self.training and self.global_step < int(self.distill_cfg.get("ttt_warmup_steps", 0))
        return 1 if warming else passes

    def teacher_signal(self, batch: dict[str, torch.Tensor], teacher):
        """(the teacher's signal for the batch's answer tokens, answer mask [B, T-1])."""
        mask = answer_mask(batch["labels"])
        with torch.no_grad():
            return teacher.signal(batch, mask), mask

    def student_divergence(self, batch: dict[str, torch.Tensor], teacher=None):
        """(per-token divergence of the student [N], the teacher's signal for the batch, answer mask [B, T-1])."""
        teacher = teacher or self.teacher
        signal, mask = self.teacher_signal(batch, teacher)
        return self.draft_divergence(self.draft, batch, mask, signal, teacher), signal, mask

    def training_batch(self, batch: dict[str, torch.Tensor]):
        """(batch, teacher, metrics) of this optimiser step: the loader's batch and the configured teacher,
        or on an on-policy step (distill.data=draft|mixed) the student's own continuations of the same
        prompts and the target run live on them."""
        settings = self.on_policy
        if settings is None or not is_on_policy_step(settings["fraction"], settings["seed"], self.global_step):
            return batch, self.teacher, ({"on_policy": 0.0} if settings else {})
        started = time.perf_counter()
        sampled = student_continuations(
            self.draft, batch, stop_id=settings["stop_id"], pad_id=settings["pad_id"],
            max_new_tokens=settings["max_new_tokens"], seed=settings["seed"], step=self.global_step,
        )
        return sampled, self.live_teacher, {"on_policy": 1.0, "generation_s": time.perf_counter() - started}

    def answer_weights(self, batch: dict[str, torch.Tensor], mask: torch.Tensor) -> torch.Tensor | None:
        """[N] loss weight of each answer token's label, or None when every weight is 1. The weighted sum is
        divided by a token count, never by the sum of weights, so a weight of 2 doubles that token's step."""
        if self.token_weights is None:
            return None
        return self.token_weights[answer_targets(batch["labels"], mask)].float()

    def loss(self, batch):
        batch, teacher, metrics = self.training_batch(batch)
        kl, _, mask = self.student_divergence(batch, teacher)
        weights = self.answer_weights(batch, mask)
        if weights is None:
            return kl.mean(), metrics
        return (kl * weights).sum() / max(kl.numel(), 1), metrics

    def val_metrics(self, batch):
        kl, _, _ = self.student_divergence(batch)
        return {"kl": kl.mean()}


def distillation_models(run: StageRun, tokenizer: PreTrainedTokenizerBase, data: TaskDataModule):
    """(cached teacher or None, frozen target or None, student) of stages 2 and 3. With a cached teacher the
    target is loaded only for the acceptance monitor, which decodes with it, and for an EAGLE-3 head. The student
    starts from the seed's draft initialisation (a `TrainedDraft` of model.draft_kind, with its id map when its
    vocabulary is reduced; one that reads the target's hidden states reads them from a `FeatureSource`)."""
    attn = attn_implementation(run)
    teacher = cached_teacher(run, data)
    student = load_draft(ensure_draft_init(run.init_spec, tokenizer, run.init_made_by), attn)
    reads_target = bool(student.target_layers)  # it trains on the target's hidden states (an EAGLE-3 head)
    needs_target = (teacher is None or run.stage.monitor_every_n_steps > 0 or on_policy_settings(run, tokenizer)
                    or reads_target)
    target = frozen_artefact(run.layout.target_dir(), attn) if needs_target else None
    if reads_target:
        cache = None  # the target's hidden states are cached where the teacher is
        if teacher is not None:
            cache = feature_cache(run, data, target, student.target_layers, tokenizer.pad_token_id)
        student.attach_training(FeatureSource(target, cache))
    return teacher, target, student


def on_policy_settings(run: StageRun, tokenizer: PreTrainedTokenizerBase) -> dict | None:
    """What ReferenceDistill needs for on-policy steps (distill.data=draft|mixed); None for fixed data."""
    data = str(run.distill.data)
    if data not in ("draft", "mixed"):
        return None
    return {
        "fraction": 1.0 if data == "draft" else float(run.distill.on_policy_fraction),
        "seed": int(run.seed),
        "stop_id": stop_token_id(tokenizer, str(run.task.prompt_format)),
        "pad_id": tokenizer.pad_token_id,
        "max_new_tokens": int(run.distill.answer_max_new_tokens),
    }
