"""GSM8K loading: the real files, the prompt template, and the errors a user can fix."""

from __future__ import annotations

import json

import datasets
import pytest

from adaspec.data import sources
from adaspec.data.gsm8k import load_gsm8k
from adaspec.data.prompts import FINAL_ANSWER, MATH_INSTRUCTION
from adaspec.data.tasks import LOADERS, load_task
from adaspec.errors import UserError
from tests.conftest import compose_config
from tests.tasks.conftest import hub_layout, task_cfg


def write_jsonl(path, records) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


GOOD = {"question": "Tom has 2 apples and buys 3. How many?", "answer": "2+3=<<2+3=5>>5\n#### 5"}


def test_registered():
    assert LOADERS["gsm8k"] is load_gsm8k


def test_real_files_load_with_official_counts(gsm8k_dir):
    splits = load_gsm8k(task_cfg("gsm8k", gsm8k_dir))
    assert len(splits["train"]) == 7473
    assert len(splits["test"]) == 1319
    first = splits["train"][0]
    assert first.prompt.startswith("Natalia sold clips to 48 of her friends")
    assert first.prompt.endswith(MATH_INSTRUCTION)
    # the official template keeps the space that followed "####": "The final answer is:  72"
    assert first.target.endswith(FINAL_ANSWER + " 72") and "####" not in first.target
    assert first.reference == "72"
    assert first.record["question"] in first.prompt
    for example in splits["train"] + splits["test"]:
        int(example.reference)  # every reference is an integer without thousands separators


def test_reference_strips_thousands_separators(tmp_path):
    write_jsonl(tmp_path / "train.jsonl", [GOOD, {"question": "q", "answer": "big\n#### 1,200,000"}])
    write_jsonl(tmp_path / "test.jsonl", [{"question": "q", "answer": "#### -7"}])
    splits = load_gsm8k(task_cfg("gsm8k", tmp_path))
    assert [e.reference for e in splits["train"]] == ["5", "1200000"]
    assert splits["test"][0].reference == "-7"


def test_load_task_cuts_to_n_train_and_n_test(gsm8k_dir):
    splits = load_task(task_cfg("gsm8k", gsm8k_dir, n_train=5, n_test=3))
    assert (len(splits["train"]), len(splits["test"])) == (5, 3)


def test_missing_file_names_it_and_the_key(tmp_path):
    write_jsonl(tmp_path / "train.jsonl", [GOOD])
    with pytest.raises(UserError, match=r"test\.jsonl does not exist.*task\.local_dir"):
        load_gsm8k(task_cfg("gsm8k", tmp_path))


def test_invalid_json_line_names_file_and_line(tmp_path):
    (tmp_path / "train.jsonl").write_text(json.dumps(GOOD) + "\n\n" + '{"question": "unterminated\n')
    write_jsonl(tmp_path / "test.jsonl", [GOOD])
    with pytest.raises(UserError, match=r"train\.jsonl:3: invalid JSON"):
        load_gsm8k(task_cfg("gsm8k", tmp_path))


def test_non_object_line_is_refused(tmp_path):
    (tmp_path / "train.jsonl").write_text("[1, 2]\n")
    write_jsonl(tmp_path / "test.jsonl", [GOOD])
    with pytest.raises(UserError, match=r"train\.jsonl:1: expected a JSON object"):
        load_gsm8k(task_cfg("gsm8k", tmp_path))


def test_missing_field_names_field_file_and_line(tmp_path):
    write_jsonl(tmp_path / "train.jsonl", [GOOD])
    write_jsonl(tmp_path / "test.jsonl", [GOOD, GOOD, {"question": "no answer here"}])
    with pytest.raises(UserError, match=r"test\.jsonl:3: record has no field 'answer'"):
        load_gsm8k(task_cfg("gsm8k", tmp_path))


def test_answer_without_final_number_is_refused(tmp_path):
    write_jsonl(tmp_path / "train.jsonl", [{"question": "q", "answer": "no marker"}])
    write_jsonl(tmp_path / "test.jsonl", [GOOD])
    with pytest.raises(UserError, match=r"train\.jsonl:1: the answer has no final '####"):
        load_gsm8k(task_cfg("gsm8k", tmp_path))


def test_offline_without_local_dir_says_so_and_names_local_dir(monkeypatch):
    def offline_load(*args, **kwargs):
        raise ConnectionError("Couldn't reach 'openai/gsm8k' on the Hub (OfflineModeIsEnabled)")

    def no_probe(*args, **kwargs):
        raise AssertionError("offline mode must not touch the network")

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(datasets, "load_dataset", offline_load)
    monkeypatch.setattr(sources, "hub_is_reachable", no_probe)
    with pytest.raises(UserError, match=r"offline.*task\.local_dir=\.\./shared/data/gsm8k"):
        load_gsm8k(task_cfg("gsm8k", None))


def test_unreachable_hub_fails_fast_and_names_local_dir(monkeypatch):
    def no_load(*args, **kwargs):
        raise AssertionError("an unreachable Hub must not be tried")

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(sources, "hub_is_reachable", lambda: False)
    monkeypatch.setattr(datasets, "load_dataset", no_load)
    with pytest.raises(UserError, match=r"unreachable.*task\.local_dir="):
        load_gsm8k(task_cfg("gsm8k", None))


def test_the_hub_layout_loads_through_datasets_as_the_local_files_do(monkeypatch, tmp_path):
    """task.hub_path pointed at a local copy of the Hub repository: the real `datasets.load_dataset` reads the
    config task.hub_name names (not the other one beside it), and gives the examples the JSONL files give."""
    other = {"question": "What is 1 + 1?", "answer": "1+1=2\n#### 2"}
    train, test = [GOOD, other], [other, GOOD, GOOD]
    socratic = {"question": "Ask first: how many?", "answer": "How many? 3\n#### 3"}
    hub = hub_layout(tmp_path / "openai-gsm8k", {"main": {"train": train, "test": test},
                                                  "socratic": {"train": [socratic], "test": [socratic]}})
    local = tmp_path / "jsonl"
    local.mkdir()
    write_jsonl(local / "train.jsonl", train)
    write_jsonl(local / "test.jsonl", test)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # a local folder needs no network

    defaults = compose_config("task=gsm8k").task
    assert (defaults.hub_path, defaults.hub_name) == ("openai/gsm8k", "main")
    from_hub = load_gsm8k(task_cfg("gsm8k", None, hub_path=str(hub), hub_name="main"))
    from_files = load_gsm8k(task_cfg("gsm8k", local))
    assert (len(from_hub["train"]), len(from_hub["test"])) == (2, 3)
    for split in ("train", "test"):
        assert [(e.prompt, e.target, e.reference) for e in from_hub[split]] == [
            (e.prompt, e.target, e.reference) for e in from_files[split]]
    assert [e.reference for e in from_hub["test"]] == ["2", "5", "5"]
    assert load_gsm8k(task_cfg("gsm8k", None, hub_path=str(hub), hub_name="socratic"))["test"][0].reference == "3"
