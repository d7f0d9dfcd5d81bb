"""distill.ref_tag: stage 3 (and the evaluation's reference row) reads a tagged reference. Without it a draft
trained with stage.tag reads the untagged reference (stage.tag names only the trained stage's folder), which is
how an experiment once distilled against the wrong reference."""

from __future__ import annotations

from adaspec.artefacts import paths
from adaspec.artefacts.store import fingerprint
from adaspec.training.stage_specs import STAGES
from tests.conftest import compose_config


def test_a_draft_reads_the_reference_its_ref_tag_names():
    tagged_ref = paths.of(compose_config("stage=ref", "stage.tag=b8")).ref_dir()
    draft = compose_config("stage=draft", "k=0.4", "stage.tag=b8", "distill.ref_tag=b8")
    assert tagged_ref.name.startswith("ref-b8")
    assert paths.of(draft).ref_dir() == tagged_ref
    assert STAGES["ref"].folder(paths.of(draft)) == tagged_ref  # what check_upstream requires
    assert paths.of(draft).draft_dir().name == "draft-k0.4-b8"  # its own folder still by stage.tag
    # the control: without distill.ref_tag the same draft reads the untagged reference
    untagged = compose_config("stage=draft", "k=0.4", "stage.tag=b8")
    assert paths.of(untagged).ref_dir() == paths.of(compose_config("stage=ref")).ref_dir() != tagged_ref
    # the evaluation's reference row follows it too
    evaluation = compose_config("eval.reference=true", "distill.ref_tag=b8")
    assert paths.of(evaluation).ref_dir() == tagged_ref


def test_ref_tag_counts_in_the_drafts_fingerprint_only():
    draft = ("stage=draft", "k=0.4", "stage.tag=b8")
    assert fingerprint(compose_config(*draft, "distill.ref_tag=b8"), "draft") != \
        fingerprint(compose_config(*draft), "draft")
    assert fingerprint(compose_config("stage=ref", "distill.ref_tag=b8"), "ref") == \
        fingerprint(compose_config("stage=ref"), "ref")
