"""Small real models and batches for stage tests."""

from __future__ import annotations

import lightning.pytorch as pl
from torch.utils.data import DataLoader

from adaspec.data.datamodule import encode_all
from adaspec.data.encoding import collate
from adaspec.data.tasks import load_task
from adaspec.data.tokenizer import padded_vocab_size, train_bpe_tokenizer
from adaspec.models.build import freeze, scratch_model
from adaspec.stages.tokenizer_source import training_texts


def tokenizer_and_batch(cfg, batch_size=8):
    splits = load_task(cfg.task)
    tokenizer = train_bpe_tokenizer(training_texts(splits["train"]), cfg.task.vocab_size)
    encoded = encode_all(tokenizer, splits["train"][:batch_size], cfg.task.max_length)
    return tokenizer, collate(encoded, tokenizer.pad_token_id)


def model(cfg, tokenizer, role: str, seed: int, frozen: bool = False):
    m = scratch_model(
        cfg.model[role], vocab_size=padded_vocab_size(tokenizer), max_positions=256, seed=seed, tokenizer=tokenizer
    )
    return freeze(m) if frozen else m


class LossRecorder(pl.Callback):
    def __init__(self):
        self.losses: list[float] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.losses.append(float(outputs["loss"]))


def fit_on_fixed_batch(module, batch, steps: int, tmp_path, callbacks=()) -> list[float]:
    """Train `module` for `steps` real Lightning steps on the same batch (with `callbacks` too); return the
    losses."""
    recorder = LossRecorder()
    trainer = pl.Trainer(
        max_steps=steps,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[recorder, *callbacks],
        default_root_dir=str(tmp_path),
    )
    loader = DataLoader([batch] * steps, batch_size=None)
    trainer.fit(module, train_dataloaders=loader)
    return recorder.losses
