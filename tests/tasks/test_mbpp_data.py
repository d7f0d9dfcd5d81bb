"""MBPP loading: the Hub's task_id splits from the local file, the code template, and the errors."""

from __future__ import annotations

import json

import datasets
import pytest

from adaspec.data import sources
from adaspec.data.mbpp import SPLIT_TASK_IDS, load_mbpp
from adaspec.data.prompts import code_prompt, code_target
from adaspec.data.tasks import LOADERS, load_task
from adaspec.errors import UserError
from tests.conftest import compose_config
from tests.tasks.conftest import hub_layout, task_cfg


def record(task_id: int, **changes) -> dict:
    base = {
        "text": "Write a function to add one.",
        "code": "def add_one(x):\r\n\treturn x + 1",
        "task_id": task_id,
        "test_setup_code": "",
        "test_list": ["assert add_one(1) == 2", "assert add_one(-1) == 0"],
        "challenge_test_list": [],
    }
    return base | changes


def write_mbpp(folder, records) -> None:
    (folder / "mbpp.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def test_registered():
    assert LOADERS["mbpp"] is load_mbpp


def test_real_file_splits_by_task_id_like_the_hub(mbpp_dir):
    splits = load_mbpp(task_cfg("mbpp", mbpp_dir))
    assert {name: len(examples) for name, examples in splits.items()} == {
        "prompt": 10,
        "test": 500,
        "validation": 90,
        "train": 374,
    }
    for name, examples in splits.items():
        assert [e.record["task_id"] for e in examples] == list(SPLIT_TASK_IDS[name])


def test_real_record_template(mbpp_dir):
    splits = load_mbpp(task_cfg("mbpp", mbpp_dir))
    first_test = splits["test"][0]
    assert first_test.record["task_id"] == 11
    assert first_test.prompt == (
        "You are an expert Python programmer, and here is your task: Write a python function to remove "
        "first and last occurrence of a given character from the string. Your code should pass these "
        'tests:\n\nassert remove_Occ("hello","l") == "heo"\nassert remove_Occ("abcda","a") == "bcd"\n'
        'assert remove_Occ("PHP","P") == "H"\n[BEGIN]\n'
    )
    assert first_test.target.startswith("def remove_Occ(s,ch): \n    for i in range(len(s)): \n")
    assert first_test.target.endswith("    return s\n[DONE]")
    assert first_test.reference == "\n".join(first_test.record["test_list"]) + "\n"
    task_1 = splits["prompt"][0]
    assert "\r" not in task_1.target and "\ttc[0][0] = cost[0][0]" in task_1.target


def test_reference_runs_setup_code_before_the_asserts(mbpp_dir):
    splits = load_mbpp(task_cfg("mbpp", mbpp_dir))
    task_367 = next(e for e in splits["test"] if e.record["task_id"] == 367)
    setup, _, asserts = task_367.reference.partition("\nassert ")
    assert setup.startswith("root = Node(1)") and "\r" not in setup
    assert asserts.startswith("is_tree_balanced(root)")


def test_code_prompt_and_target():
    prompt = code_prompt("Write a function to add one. ", ["assert f(1) == 2", "assert f(2) == 3"])
    assert prompt == (
        "You are an expert Python programmer, and here is your task: Write a function to add one. "
        "Your code should pass these tests:\n\nassert f(1) == 2\nassert f(2) == 3\n[BEGIN]\n"
    )
    assert code_target("def f(x):\r\n\treturn x + 1\r\n") == "def f(x):\n\treturn x + 1\n[DONE]"


def test_load_task_cuts_and_keeps_extra_splits(tmp_path):
    write_mbpp(tmp_path, [record(i) for i in (1, 11, 12, 13, 511, 601, 602)])
    splits = load_task(task_cfg("mbpp", tmp_path, n_train=1, n_test=2))
    assert [e.record["task_id"] for e in splits["train"]] == [601]
    assert [e.record["task_id"] for e in splits["test"]] == [11, 12]
    assert len(splits["validation"]) == 1 and len(splits["prompt"]) == 1


def test_missing_file_names_it_and_the_key(tmp_path):
    with pytest.raises(UserError, match=r"mbpp\.jsonl does not exist.*task\.local_dir"):
        load_mbpp(task_cfg("mbpp", tmp_path))


def test_invalid_json_line_names_file_and_line(tmp_path):
    (tmp_path / "mbpp.jsonl").write_text(json.dumps(record(11)) + "\n{not json}\n")
    with pytest.raises(UserError, match=r"mbpp\.jsonl:2: invalid JSON"):
        load_mbpp(task_cfg("mbpp", tmp_path))


def test_missing_field_names_field_file_and_line(tmp_path):
    broken = record(12)
    del broken["test_list"]
    write_mbpp(tmp_path, [record(11), broken])
    with pytest.raises(UserError, match=r"mbpp\.jsonl:2: record has no field 'test_list'"):
        load_mbpp(task_cfg("mbpp", tmp_path))


def test_task_id_outside_the_splits_is_refused(tmp_path):
    write_mbpp(tmp_path, [record(11), record(975)])
    with pytest.raises(UserError, match=r"mbpp\.jsonl:2: task_id=975 is outside 1\.\.974"):
        load_mbpp(task_cfg("mbpp", tmp_path))


def test_offline_without_local_dir_names_local_dir(monkeypatch):
    def offline_load(*args, **kwargs):
        raise ConnectionError(
            "Couldn't reach 'google-research-datasets/mbpp' on the Hub (OfflineModeIsEnabled)"
        )

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(datasets, "load_dataset", offline_load)
    monkeypatch.setattr(sources, "hub_is_reachable", lambda: pytest.fail("offline must not probe"))
    with pytest.raises(UserError, match=r"offline.*task\.local_dir=\.\./shared/data/mbpp"):
        load_mbpp(task_cfg("mbpp", None))


def test_hub_splits_are_used_as_they_come(monkeypatch, tmp_path):
    """A local copy of google-research-datasets/mbpp's layout (full/ beside sanitized/), read by the real
    `datasets.load_dataset` through task.hub_path: the splits of the `full` config as they come."""
    full = {"train": [record(601)], "test": [record(11), record(12)], "validation": [record(511)],
            "prompt": [record(1)]}
    sanitized = {"test": [record(13)]}
    hub = hub_layout(tmp_path / "mbpp", {"full": full, "sanitized": sanitized})
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    defaults = compose_config("task=mbpp").task
    assert (defaults.hub_path, defaults.hub_name) == ("google-research-datasets/mbpp", "full")
    splits = load_mbpp(task_cfg("mbpp", None, hub_path=str(hub), hub_name="full"))
    assert [e.record["task_id"] for e in splits["test"]] == [11, 12]
    assert splits["train"][0].target == "def add_one(x):\n\treturn x + 1\n[DONE]"
