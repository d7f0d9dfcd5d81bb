"""The kinds the stages train, as `model.draft_kind` names them: each value of the config's `DraftKind` is a kind in
`adaspec.drafts.TRAINED_KINDS` and each kind a value of it, and what the pipeline once asked by name is what the
kinds declare (their folders' suffix, their artefacts' model_type, their export format)."""

from __future__ import annotations

import json

from adaspec.config.schema import DraftKind
from adaspec.drafts import TRAINED_KINDS, Eagle3Draft, ModelDraft, artefact_kind, trained_kind
from adaspec.models.eagle3 import Eagle3Config


def test_every_draft_kind_of_the_config_is_a_trained_kind_and_back():
    assert set(TRAINED_KINDS) == {kind.value for kind in DraftKind}
    assert all(trained_kind(DraftKind(name)) is kind and kind.kind == name for name, kind in TRAINED_KINDS.items())


def test_the_kinds_declare_what_the_pipeline_asked_by_name():
    assert (ModelDraft.folder_suffix, Eagle3Draft.folder_suffix) == ("", "-eagle3")
    assert (ModelDraft.export_format, Eagle3Draft.export_format) == ("hf", "speculators")
    assert (ModelDraft.starts_from_target, Eagle3Draft.starts_from_target) == (False, True)


def test_an_artefacts_kind_is_told_by_its_model_type(tmp_path):
    for model_type, kind in ((Eagle3Config.model_type, Eagle3Draft), ("llama", ModelDraft), ("gpt_neox", ModelDraft)):
        (tmp_path / "config.json").write_text(json.dumps({"model_type": model_type}))
        assert artefact_kind(tmp_path) is kind
