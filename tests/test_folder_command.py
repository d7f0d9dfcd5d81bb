"""`python -m adaspec.commands.folder`: the folder of the stage a set of overrides trains, as training finds it
(what `make head-convergence` hands its curves)."""

from __future__ import annotations

import pytest

from adaspec.artefacts import paths
from adaspec.commands import folder
from adaspec.toolkit import checked_config
from adaspec.training.stage_specs import stage_dir

SAMPLED = ["distill.data=target", "distill.answer_temperature=1", "distill.answer_seed=0"]


@pytest.mark.parametrize("overrides", [
    ["stage=ref"],
    ["stage=ref", "stage.tag=steps400", *SAMPLED],
    ["stage=draft", "k=0.4", "distill.ref_tag=steps400", *SAMPLED],
    ["stage=target"],
])
def test_prints_the_folder_training_writes(capsys, overrides):
    folder.main(overrides)
    assert capsys.readouterr().out.strip() == str(stage_dir(paths.of(checked_config(*overrides))))


def test_the_folder_follows_the_overrides_that_name_it(capsys):
    printed = []
    for overrides in (["stage=ref"], ["stage=ref", "stage.tag=steps400"], ["stage=ref", *SAMPLED]):
        folder.main(overrides)
        printed.append(capsys.readouterr().out.strip())
    assert len(set(printed)) == 3  # a tag and sampled answers each name another folder
    assert printed[1].endswith("ref-steps400") and "-t1-s0-" in printed[2]


def test_a_bad_override_is_one_line_and_exit_status_2(capsys):
    with pytest.raises(SystemExit) as exit_info:
        folder.main(["stage=ref", "stage.typo=1"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.startswith("error: unknown config key `stage.typo`") and err.count("\n") == 1
