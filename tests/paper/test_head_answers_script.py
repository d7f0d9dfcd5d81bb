"""Issue 30: experiments/smollm2/head_answers.sh trains make demo-real's reference head on the target's answers to
N training problems (demo-real's own steps, in a folder of their own) and times it against demo-real's head."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "experiments" / "smollm2" / "head_answers.sh"


def run(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], env=os.environ | {"DRY_RUN": "1"} | env,
                          capture_output=True, text=True, timeout=600)


def test_trains_demo_reals_steps_up_to_the_reference_head_on_n_problems_in_their_own_folder():
    result = run("1000", STEPS="train")
    assert result.returncode == 0, result.stderr
    steps = result.stdout.splitlines()
    names = [s.split("adaspec.commands.")[1].split()[0] + (" " + s.split(" stage=")[1].split()[0] if " stage=" in s else "")
             for s in steps]
    assert names == ["train target", "answers", "cache", "train ref"]
    for step in steps:  # the later override wins in Hydra: N and the folder are the last words
        assert step.endswith(" paths.root=outputs/head-answers/n1000 task.n_train=1000")
        assert "model.draft_kind=eagle3" in step
    assert "resume=true" in steps[-1] and "trainer.precision=bf16-mixed" in steps[-1]


def test_times_the_new_head_against_demo_reals_in_one_bench_real_process(tmp_path):
    head = tmp_path / "ref-eagle3-target-answers" / "final"
    head.mkdir(parents=True)
    (head / "meta.json").write_text("{}")
    printed = run("750", "--prompts", "20", STEPS="bench", HEAD=str(head)).stdout
    assert not printed.rstrip("\n").endswith(" ")  # no empty Hydra override
    command = printed.split()
    drafts = [command[i + 1] for i, word in enumerate(command) if word == "--draft"]
    assert drafts == [f"head-n500={head}", "head-n750=outputs/head-answers/n750/gsm8k/smollm2/seed0/ref-eagle3-target-answers/final"]
    assert command[command.index("--name") + 1] == "head-answers-n750-g3"
    assert command.index("--prompts") < command.index("model=smollm2")
    assert "decode.draft_dtype=bfloat16" in command

    missing = run("750", STEPS="bench", HEAD=str(tmp_path / "none"))
    assert missing.returncode == 1 and "run make demo-real first" in missing.stderr


def test_refuses_a_count_that_is_not_a_number():
    result = run("many")
    assert result.returncode == 2
    assert "N must be a number of training problems, got 'many'" in result.stderr


def test_the_steps_control_trains_e_epochs_in_a_folder_and_bench_of_its_own(tmp_path):
    trained = run("500", STEPS="train", EPOCHS="12").stdout.splitlines()
    for step in trained:  # the last max_epochs wins over demo-real's stage.max_epochs=6 in the reference step
        assert step.endswith(" paths.root=outputs/head-answers/n500-e12 task.n_train=500 stage.max_epochs=12")
    assert "stage.max_epochs=6" in trained[-1]

    head = tmp_path / "final"
    head.mkdir()
    (head / "meta.json").write_text("{}")
    command = run("500", STEPS="bench", EPOCHS="12", HEAD=str(head)).stdout.split()
    assert command[command.index("--name") + 1] == "head-answers-n500-e12-g3"
    drafts = [command[i + 1] for i, word in enumerate(command) if word == "--draft"]
    assert drafts[1] == "head-n500-e12=outputs/head-answers/n500-e12/gsm8k/smollm2/seed0/ref-eagle3-target-answers/final"

    command = run("500", STEPS="bench", EPOCHS="12", ALSO="n1000", HEAD=str(head)).stdout.split()
    assert command[command.index("--name") + 1] == "head-answers-n500-e12+n1000-g3"  # one process, three heads
    drafts = [command[i + 1].split("=")[0] for i, word in enumerate(command) if word == "--draft"]
    assert drafts == ["head-n500", "head-n500-e12", "head-n1000"]

    unfinished = run("500", STEPS="bench", EPOCHS="7", HEAD=str(head), DRY_RUN="")  # really run: nothing starts
    assert unfinished.returncode == 1
    assert "no finished head at outputs/head-answers/n500-e7/" in unfinished.stderr and "for n500-e7 first" in unfinished.stderr

    refused = run("500", EPOCHS="twelve")
    assert refused.returncode == 2 and "EPOCHS must be a number of epochs, got 'twelve'" in refused.stderr
