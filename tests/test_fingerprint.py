"""What a stage artefact's fingerprint covers: what changes the trained weights, nothing else."""

from __future__ import annotations

from adaspec.artefacts.store import fingerprint
from tests.conftest import compose_config


def ref_print(*overrides: str) -> str:
    return fingerprint(compose_config("stage=ref", *overrides), "ref")


def test_the_reference_fingerprint_follows_its_divergence_and_a_truncated_teacher():
    plain = ref_print()
    assert ref_print("distill.divergence=jsd") != plain
    assert ref_print("distill.divergence=jsd", "distill.jsd_beta=0.9") != ref_print("distill.divergence=jsd")
    assert ref_print("distill.teacher=cache", "distill.cache_mode=topk") != plain
    # what acts only in stage 3, and the exact cache (the live teacher up to float16 rounding), do not count
    assert ref_print("k=0.2", "distill.selection=quantile", "distill.teacher=cache") == plain


def test_monitoring_and_checkpointing_never_change_a_fingerprint():
    cfg = compose_config("stage=draft")
    quiet = compose_config("stage=draft", "stage.monitor_every_n_steps=0", "stage.checkpoint_every_n_steps=7")
    assert fingerprint(cfg, "draft") == fingerprint(quiet, "draft")
    assert fingerprint(cfg, "draft") != fingerprint(compose_config("stage=draft", "k=0.3"), "draft")


def test_keys_added_later_leave_earlier_artefacts_their_fingerprints():
    """The fingerprints of the default configs as the code of commit f60f981 computed them (before
    distill.data, on_policy_fraction and stage.early_stop_patience existed): artefacts trained then are
    still found up to date."""
    from adaspec.toolkit import checked_config

    recorded = {
        ("target",): "4ca5881c56b19ca4",
        ("ref",): "90c2172c994f05bb",
        ("draft", "k=0.4"): "c57b585274de7228",
        ("draft", "k=1.0", "distill.teacher=cache"): "61d5386d5835af88",
    }
    for (stage, *extra), value in recorded.items():
        assert fingerprint(checked_config(f"stage={stage}", *extra), stage) == value
