"""All three stages on small slices of the real GSM8K and MBPP data, with each task's domain strategies on,
and the selection statistics every stage-3 run writes."""

from __future__ import annotations

import json
from pathlib import Path

from safetensors import safe_open
from transformers import AutoModelForCausalLM, AutoTokenizer

from adaspec.data.tasks import load_task
from adaspec.data.tokenizer import frequent_dotted_names
from adaspec.training.pipeline import run_stage
from tests.conftest import shared_data

SMALL = [
    "task.n_train=48",
    "task.n_test=8",
    "task.n_val=4",
    "task.vocab_size=400",
    "task.max_length=256",
    "stage.monitor_every_n_steps=0",
]


def run_three_stages(tiny_cfg, task: str, *extra: str, draft_extra: tuple[str, ...] = ()):
    folder = shared_data(task)
    overrides = [f"task={task}", f"task.local_dir={folder}", *SMALL, *extra]
    finals = [run_stage(tiny_cfg(*overrides, f"stage={stage}")) for stage in ("target", "ref")]
    finals.append(run_stage(tiny_cfg(*overrides, "stage=draft", *draft_extra)))
    return tiny_cfg(*overrides, "stage=draft"), finals


def check_artefacts(finals):
    for final in finals:
        assert (final / "meta.json").is_file() and (final / "model.safetensors").is_file()
        assert json.loads((final / "metrics.json").read_text())["steps"] == 4
    draft = finals[-1]
    with safe_open(draft / "model.safetensors", "pt") as fh:
        assert not any("parametrizations" in key for key in fh.keys())
    AutoModelForCausalLM.from_pretrained(draft)  # a plain Hugging Face model


def check_selection_stats(draft_final: Path, k: float) -> dict:
    stage_folder = draft_final.parent
    report = json.loads((stage_folder / "selected_tokens.json").read_text())
    markdown = (stage_folder / "selected_tokens.md").read_text()
    assert report["steps"] == 4 and report["k"] == k
    assert 0 < report["selected_tokens"] < report["answer_tokens"]
    assert report["selected_frac"] >= k - 0.01
    for key in ("most_selected", "most_filtered"):
        rows = report[key]
        assert 0 < len(rows) <= 30
        counts = [r["selected" if key == "most_selected" else "filtered"] for r in rows]
        assert counts == sorted(counts, reverse=True) and counts[0] > 0
        assert {"token", "id", "class", "selected", "filtered", "selected_share"} <= set(rows[0])
    assert "## Most often selected" in markdown and "## Most often filtered" in markdown
    assert markdown.count("\n| ") >= len(report["most_selected"]) + len(report["most_filtered"])
    return report


def test_gsm8k_three_stages_with_math_strategies(tiny_cfg):
    cfg, finals = run_three_stages(tiny_cfg, "gsm8k", "domain=note_math", draft_extra=("task.domain.operator_embedding=true",))
    assert finals[-1].parent.name == "draft-k0.4"
    check_artefacts(finals)
    report = check_selection_stats(finals[-1], 0.4)
    classes = {r["class"] for key in ("most_selected", "most_filtered") for r in report[key]}
    assert "digit" in classes


def test_mbpp_three_stages_with_code_strategies(tiny_cfg):
    cfg, finals = run_three_stages(tiny_cfg, "mbpp", "domain=note_code", draft_extra=("logger.wandb.enabled=true",))
    assert cfg.k == 0.33 and finals[-1].parent.name == "draft-k0.33"
    check_artefacts(finals)
    # the tokenizer trained in stage 1 and shared by all three models has the API names as whole tokens
    names = frequent_dotted_names([e.target for e in load_task(cfg.task)["train"]], 64)
    assert names
    for final in finals:
        tok = AutoTokenizer.from_pretrained(str(final))
        assert len(tok) > 400
        assert all(tok.tokenize(" " + name) == [" " + name] for name in names)
    # whitespace tokens are always selected: never among the filtered ones
    report = check_selection_stats(finals[-1], 0.33)
    whitespace = [r for key in ("most_selected", "most_filtered") for r in report[key] if r["class"] == "whitespace"]
    assert whitespace and all(r["filtered"] == 0 for r in whitespace)
    assert report["selected_frac"] > 0.33
    # and W&B (offline) got the tables
    tables = list((finals[-1].parent / "wandb").rglob("*.table.json"))
    assert {p.name.split("_")[1] for p in tables} >= {"selected", "filtered"}, tables
