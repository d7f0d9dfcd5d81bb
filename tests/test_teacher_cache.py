"""Teacher-signal cache: equal to the live target up to float16, refused when made for other inputs."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from transformers import AutoTokenizer

from adaspec.artefacts import paths
from adaspec.data.datamodule import TaskDataModule
from adaspec.data.encoding import collate
from adaspec.data.tasks import load_task
from adaspec.distill.cache_build import build_cache
from adaspec.distill.selection import select
from adaspec.distill.teacher import CachedTeacher, LiveTeacher
from adaspec.distill.teacher_cache import TeacherCache, topk_forward_kl
from adaspec.distill.tokens import answer_logits, answer_mask
from adaspec.errors import UserError
from adaspec.models.build import freeze, load_model
from adaspec.training.pipeline import run_stage


@pytest.fixture
def trained(tiny_cfg):
    run_stage(tiny_cfg("stage=target"))
    run_stage(tiny_cfg("stage=ref"))
    return tiny_cfg


def shuffled_batch(cfg):
    tokenizer = AutoTokenizer.from_pretrained(str(paths.final(paths.of(cfg).target_dir())))
    data = TaskDataModule(tokenizer, load_task(cfg.task), batch_size=8, max_length=cfg.task.max_length, n_val=8, seed=3)
    examples = [data.train_set[i] for i in (5, 0, 17, 3)] + [data.val_set[1]]
    return collate(examples, tokenizer.pad_token_id)


def test_exact_cache_matches_the_live_target(trained):
    cfg = trained("stage=draft", "distill.teacher=cache")
    folder = build_cache(cfg)
    assert paths.of(cfg).target_dir() in folder.parents
    batch = shuffled_batch(cfg)
    mask = answer_mask(batch["labels"])
    target = freeze(load_model(paths.final(paths.of(cfg).target_dir())))
    reference = freeze(load_model(paths.final(paths.of(cfg).ref_dir())))
    draft = freeze(load_model(paths.final(paths.of(cfg).draft_init_dir())))
    live = LiveTeacher(target, "forward_kl", 64)
    cached = CachedTeacher(TeacherCache(folder), "forward_kl", 64)
    deltas = {}
    for name, teacher in (("live", live), ("cached", cached)):
        signal = teacher.signal(batch, mask)
        kl_draft = teacher.divergence(signal, answer_logits(draft(input_ids=batch["input_ids"]).logits, mask))
        kl_ref = teacher.divergence(signal, answer_logits(reference(input_ids=batch["input_ids"]).logits, mask))
        deltas[name] = (kl_draft, kl_draft - kl_ref)
    torch.testing.assert_close(deltas["cached"][0], deltas["live"][0], atol=2e-3, rtol=2e-3)
    selected = [select("batch", deltas[n][1], 0.4).selected for n in ("live", "cached")]
    assert (selected[0] != selected[1]).sum() <= 2  # float16 rounding may swap one pair at the threshold


def test_topk_kl_is_a_lower_bound_and_exact_with_the_whole_vocabulary():
    gen = torch.Generator().manual_seed(0)
    teacher, student = torch.randn(20, 40, generator=gen) * 2, torch.randn(20, 40, generator=gen)
    logp = teacher.log_softmax(-1)
    exact = (logp.exp() * (logp - student.log_softmax(-1))).sum(-1)
    for k, bound in ((40, "equal"), (8, "below")):
        values, ids = logp.topk(k, -1)
        rest = (1 - values.exp().sum(-1)).clamp_min(0)
        approx = topk_forward_kl(values, ids, rest, student)
        if bound == "equal":
            torch.testing.assert_close(approx, exact, atol=1e-4, rtol=1e-4)
        else:
            assert (approx <= exact + 1e-5).all() and (approx < exact).any()


def test_stages_train_from_the_cache_and_refuse_a_foreign_one(trained):
    build_cache(trained("distill.teacher=cache", "distill.cache_mode=topk", "distill.cache_topk=16"))
    final = run_stage(
        trained("stage=draft", "distill.teacher=cache", "distill.cache_mode=topk", "distill.cache_topk=16",
                "distill.cache_ref_kl=true", "stage.monitor_every_n_steps=0")
    )
    assert json.loads((final / "metrics.json").read_text())["steps"] == 4
    ref_kl = paths.of(trained()).ref_dir() / "teacher_kl" / "topk16" / "ref_kl.f32"
    assert ref_kl.is_file() and np.fromfile(ref_kl, dtype=np.float32).max() > 0

    with pytest.raises(UserError, match="max_length"):
        run_stage(trained("stage=ref", "distill.teacher=cache", "distill.cache_mode=topk", "distill.cache_topk=16",
                          "task.max_length=100", "overwrite=true"))
    with pytest.raises(UserError, match="make cache"):
        run_stage(trained("stage=ref", "distill.teacher=cache", "overwrite=true"))


def test_a_jsd_draft_trains_from_the_topk_cache_against_a_jsd_reference(trained):
    """divergence=jsd from the top-K cache: the reference and the draft both minimise it, dL is taken in it."""
    jsd = ("distill.teacher=cache", "distill.cache_mode=topk", "distill.cache_topk=16", "distill.divergence=jsd",
           "stage.monitor_every_n_steps=0")
    build_cache(trained(*jsd))
    run_stage(trained("stage=ref", *jsd, "overwrite=true"))
    final = run_stage(trained("stage=draft", *jsd))
    metrics = json.loads((final / "metrics.json").read_text())
    assert metrics["steps"] == 4 and np.isfinite(metrics["val/kl"]) and metrics["val/kl"] > 0


def test_a_cut_cache_file_is_refused_naming_it_and_the_fix(trained, tmp_path):
    from adaspec.distill.feature_cache import FeatureCache

    folder = build_cache(trained("distill.teacher=cache", "distill.cache_mode=topk", "distill.cache_topk=16"))
    ids = folder / "top_ids.i32"
    whole = ids.read_bytes()
    ids.write_bytes(whole[: len(whole) // 2])
    try:
        with pytest.raises(UserError, match=r"top_ids.i32 holds [\d,]+ bytes where its cache's metadata needs "
                                            r"[\d,]+ \(cut or replaced\); rebuild it with `make cache`"):
            TeacherCache(folder)
    finally:
        ids.write_bytes(whole)
    TeacherCache(folder)  # whole again
    features = tmp_path / "features"
    features.mkdir()
    (features / "features.json").write_text(json.dumps({"rows": 10, "width": 4, "identity": {}}))
    np.save(features / "offsets.npy", np.array([0, 10]))
    (features / "features.f16").write_bytes(b"\0" * 60)  # 10 x 4 float16 needs 80
    with pytest.raises(UserError, match="features.f16 holds 60 bytes where its cache's metadata needs 80"):
        FeatureCache(features)


def test_the_caches_pass_runs_batches_of_similar_length_and_covers_every_example_once():
    from adaspec.data.encoding import Encoded, by_length

    lengths = [5, 9, 2, 9, 7, 1, 4]
    encoded = [Encoded(input_ids=[1] * n, labels=[1] * n, index=i) for i, n in enumerate(lengths)]
    batches = by_length(encoded, 3)
    assert batches == [[1, 3, 4], [0, 6, 2], [5]]  # longest first, ties in order
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
