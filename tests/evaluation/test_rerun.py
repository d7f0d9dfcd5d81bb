"""A results folder holds one evaluation: the same settings skip, other settings are refused before
anything is written, overwrite=true replaces; `make paper`'s runner relies on the skip."""

from __future__ import annotations

import json

import pytest
from omegaconf import OmegaConf

from adaspec.artefacts import paths
from adaspec.errors import UserError
from adaspec.evaluation.identity import IDENTITY, evaluation_identity, previous_results
from adaspec.evaluation.run import results_dir, run_evaluation
from adaspec.machine import cpu_model, cpu_name
from adaspec.paper.plan import Step
from adaspec.paper.runner import execute
from tests.conftest import compose_config

pytestmark = pytest.mark.chaos("eval-rerun")

# one draft, 2 prompts x 8 tokens, no HF comparison: the cheapest real evaluation; its own folder
SMALL = [
    "eval.n_prompts=2",
    "decode.max_new_tokens=8",
    "eval.num_threads=1",
    "eval.draft_ks=[0.4]",
    "eval.compare_hf_assisted=false",
    "eval.gammas=[1,2]",
    "eval.name=rerun",
]


def _files(folder) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}


def test_same_settings_skip_other_settings_refuse_and_overwrite_replaces(trained, capsys):
    cfg = trained(*SMALL)
    folder = results_dir(paths.of(cfg), cfg.decode, cfg.eval.name)
    assert folder.name == "greedy-g5-rerun"
    eval_step = Step("eval", ())  # the paper runner's evaluation step, on this config
    assert execute(eval_step, cfg) is True  # ran
    first = _files(folder)
    identity = json.loads(first["results.json"])[IDENTITY]
    assert set(identity["weights"]) == {"target", "k0.4"} and len(identity["fingerprint"]) == 16
    assert identity["eval"]["n_prompts"] == 2 and "name" not in identity["eval"]

    assert execute(eval_step, trained(*SMALL)) is False  # the same evaluation: skipped
    out = capsys.readouterr().out
    assert "holds this evaluation (same settings and weights), skipping" in out and "NOTE" not in out
    assert _files(folder) == first
    machine = json.loads(first["results.json"])["machine"]
    assert machine == {**machine, **cpu_model()} and f"Timed on {cpu_name(machine)}" in first["results.md"].decode()

    # results timed on another CPU are still this evaluation's, and marked as another machine's timings
    elsewhere = json.loads(first["results.json"])
    elsewhere["machine"] = {**machine, "cpu": "Another CPU", "amx": not machine["amx"]}
    (folder / "results.json").write_text(json.dumps(elsewhere))
    assert execute(eval_step, trained(*SMALL)) is False
    assert "NOTE: " + str(folder / "results.json") + " was timed on Another CPU" in capsys.readouterr().out
    (folder / "results.json").write_bytes(first["results.json"])

    with pytest.raises(UserError) as refused:
        run_evaluation(trained(*SMALL, "eval.n_prompts=3", "decode.max_new_tokens=6"), progress=False)
    message = str(refused.value)
    assert "\n" not in message and str(folder / "results.json") in message
    assert "decode.max_new_tokens: 8 -> 6; eval.n_prompts: 2 -> 3" in message
    assert "eval.name=<suffix>" in message and "overwrite=true" in message
    assert _files(folder) == first  # refused before anything was written

    replaced = run_evaluation(trained(*SMALL, "eval.n_prompts=3", "overwrite=true"), progress=False)
    on_disk = json.loads((folder / "results.json").read_text())
    assert replaced["n_prompts"] == on_disk["n_prompts"] == 3
    assert on_disk[IDENTITY]["fingerprint"] != identity["fingerprint"]
    assert "3 prompts" in (folder / "results.md").read_text()
    # the replacement is now the recorded evaluation: overwrite is not sticky
    assert execute(eval_step, trained(*SMALL, "eval.n_prompts=3")) is False


def _identity(*overrides: str, weights: dict[str, str] | None = None) -> dict:
    config = OmegaConf.to_container(compose_config(*overrides), resolve=True, enum_to_str=True)
    return evaluation_identity(config, "cpu", weights)


def test_retrained_weights_are_named_and_older_results_are_judged_by_their_config(tmp_path):
    path = tmp_path / "results.json"
    before = _identity(weights={"target": "aaaa", "k0.4": "bbbb"})
    path.write_text(json.dumps({IDENTITY: before}))
    assert previous_results(path, _identity(weights={"target": "aaaa", "k0.4": "bbbb"}), False) is not None
    with pytest.raises(UserError, match=r"\(weights\.k0\.4: bbbb -> cccc\)"):
        previous_results(path, _identity(weights={"target": "aaaa", "k0.4": "cccc"}), False)
    assert previous_results(path, _identity("eval.n_prompts=7", weights={}), True) is None  # overwrite

    # results.json written before identities were recorded: its config decides, the weights are unknown
    config = OmegaConf.to_container(compose_config("eval.name=old"), resolve=True, enum_to_str=True)
    path.write_text(json.dumps({"config": config, "device": "cpu"}))
    assert previous_results(path, _identity(weights={"target": "aaaa"}), False) is not None  # name aside
    with pytest.raises(UserError, match=r"\(seed: 0 -> 1\)"):
        previous_results(path, _identity("seed=1", weights={"target": "aaaa"}), False)

    path.write_text('{"half a file')
    with pytest.raises(UserError, match="is not valid JSON.*overwrite=true"):
        previous_results(path, before, False)


def test_results_recorded_before_a_key_existed_match_its_value_then_and_no_other(tmp_path):
    """eval.tag_ks, task.prompt_format and task.target_n_train came after the tiny paper's evaluations: a
    record without them ran with {}, plain and None, so it matches that and is refused for anything else."""
    path = tmp_path / "results.json"
    older = _identity(weights={"target": "aaaa"})
    del older["eval"]["tag_ks"], older["task"]["prompt_format"], older["task"]["target_n_train"]
    path.write_text(json.dumps({IDENTITY: older}))
    assert previous_results(path, _identity(weights={"target": "aaaa"}), False) is not None
    with pytest.raises(UserError, match=r"task\.prompt_format: plain -> chat"):
        previous_results(path, _identity("task.prompt_format=chat", weights={"target": "aaaa"}), False)
    with pytest.raises(UserError, match=r"task\.target_n_train: None -> 7000"):
        previous_results(path, _identity("task.target_n_train=7000", weights={"target": "aaaa"}), False)
