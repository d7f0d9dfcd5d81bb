"""pretrain=distill: stage 0 of a pretrained target, on the test-size model=smollm2 pipeline of
test_smollm2_pipeline. The draft initialisation distils the target on the stdlib corpus and training
prompts; the reference starts from it; the target is the same artefact with and without stage 0."""

from __future__ import annotations

import json
import shutil

import lightning.pytorch as pl
import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoTokenizer

from adaspec.artefacts import paths
from adaspec.artefacts.store import fingerprint, read_meta
from adaspec.config.rules import validate
from adaspec.data.stdlib_corpus import corpus_blocks
from adaspec.data.tasks import first_training_examples, load_task
from adaspec.errors import UserError
from adaspec.stages import stage_module
from adaspec.stages.pretrain import DistilPretrain
from adaspec.stages.stage_run import StageRun
from adaspec.training.pipeline import build_data, run_stage
from tests.conftest import compose_config
from tests.test_smollm2_pipeline import overrides_at_test_size, tiny_instruct_target

STAGE0 = [
    "pretrain=distill",
    "pretrain.max_chars=6000",
    "pretrain.task_prompts=6",
    "pretrain.n_val=2",
    "pretrain.batch_size=4",
    "pretrain.lr=3e-3",
    "stage.max_steps=6",
    "distill.teacher=live",
    "trainer.enable_progress_bar=false",
]


@pytest.fixture(scope="module")
def setup(tmp_path_factory, one_torch_thread):
    tmp = tmp_path_factory.mktemp("distil_pretrain")
    overrides = overrides_at_test_size(tmp) + ["stage.monitor_every_n_steps=0"]

    def cfg(*more: str):
        return validate(compose_config(*overrides, *more))

    tiny_instruct_target(tmp / "instruct", load_task(cfg().task)["train"])
    run_stage(cfg("stage=target", "stage.max_steps=0"))
    yield cfg
    shutil.rmtree(tmp, ignore_errors=True)


def validation_kl(cfg) -> float:
    """val/kl of what stage 0 starts from: its module before any step, validated by a real trainer."""
    data, _, _ = build_data(StageRun.of(cfg), None)
    module = DistilPretrain.build(StageRun.of(cfg), data.tokenizer, data)
    trainer = pl.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False)
    return trainer.validate(module, datamodule=data, verbose=False)[0]["val/kl"]


def test_stage_0_distils_the_target_and_the_reference_starts_from_it(setup):
    stage0 = setup("stage=pretrain_draft", *STAGE0)
    assert stage_module(StageRun.of(stage0)) is DistilPretrain
    before = validation_kl(stage0)
    final = run_stage(stage0)
    meta, metrics = read_meta(final), json.loads((final / "metrics.json").read_text())
    assert metrics["val/kl"] < before  # it learned the target's distribution on the corpus
    assert meta["upstream"]["target"] == read_meta(paths.final(paths.of(stage0).target_dir()))["weights"]
    assert corpus_blocks(stage0.pretrain, stage0.task)[-6:] == [e.prompt for e in first_training_examples(stage0.task, 6)]
    assert (final / "draft_vocab.json").is_file()  # the reduced vocabulary, as model.draft_vocab_size makes it

    ref = setup("stage=ref", *STAGE0)
    run_stage(ref)
    init = paths.final(paths.of(ref).draft_init_dir())
    assert read_meta(init)["upstream"]["pretrain_draft"] == meta["weights"]
    stage0_weights, init_weights = load_file(final / "model.safetensors"), load_file(init / "model.safetensors")
    assert all(torch.equal(stage0_weights[k], init_weights[k]) for k in stage0_weights)
    assert (init / "draft_vocab.json").read_text() == (final / "draft_vocab.json").read_text()


def test_the_target_is_the_same_artefact_with_and_without_stage_0(setup):
    without = [o for o in STAGE0 if not o.startswith("pretrain")]
    assert fingerprint(setup("stage=target", *without), "target") == fingerprint(setup("stage=target", *STAGE0), "target")
    assert fingerprint(setup("stage=ref", *without), "ref") != fingerprint(setup("stage=ref", *STAGE0), "ref")


def test_a_reference_without_stage_0_refuses_an_initialisation_made_from_it(setup):
    stage0 = setup("stage=pretrain_draft", *STAGE0)
    run_stage(stage0)
    run_stage(setup("stage=ref", *STAGE0))
    with pytest.raises(UserError, match="made from stage 0's draft"):
        run_stage(setup("stage=ref", "distill.teacher=live", "overwrite=true"))


@pytest.mark.parametrize(
    "overrides, key",
    [
        (("pretrain=stdlib",), "pretrain.objective"),  # a pretrained target's stage 0 distils it
        (("pretrain=distill", "stage=pretrain_target"), "`stage`"),
        (("pretrain=distill", "pretrain.task_prompts=-1"), "pretrain.task_prompts"),
    ],
)
def test_bad_stage_0_settings_name_the_key(setup, overrides, key):
    with pytest.raises(UserError, match=key.replace(".", r"\.")):
        setup(*overrides)


def test_tokenizer_of_stage_0_is_the_targets(setup):
    stage0 = setup("stage=pretrain_draft", *STAGE0)
    data, _, _ = build_data(StageRun.of(stage0), None)
    target = AutoTokenizer.from_pretrained(str(paths.final(paths.of(stage0).target_dir())))
    assert data.tokenizer.get_vocab() == target.get_vocab()
