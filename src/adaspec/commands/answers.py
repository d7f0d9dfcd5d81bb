"""Generate the target's answers to the training prompts: `python -m adaspec.commands.answers` (`make answers`).

What `distill.data=target` trains stages 2-3 on (adaspec.data.target_answers). Resumable: a rerun
continues with the prompts not answered yet. `make cache ... distill.data=target` runs this first itself.
With `distill.answer_parts=all|P|A-B` (`make answer-parts`) it writes parts of the answers to the task's whole
training file into the repository instead (adaspec.data.answer_parts), one finished part at a time.
"""

from __future__ import annotations

from omegaconf import DictConfig

from adaspec.cli import hydra_entry
from adaspec.toolkit import no_tokenizer_parallelism

no_tokenizer_parallelism()


@hydra_entry
def main(cfg: DictConfig) -> None:
    # imported here, not at the top: a bad config is answered in a second
    from adaspec.artefacts.rules import require_artefact
    from adaspec.data.target_answers import AnswerSpec, ensure_target_answers, write_answer_parts
    from adaspec.data.tasks import load_task

    answers = AnswerSpec.of(cfg)
    require_artefact(answers.layout.target_dir(), "target", "answers", answers.layout)
    if cfg.distill.answer_parts is not None:
        written = write_answer_parts(answers, str(cfg.distill.answer_parts))
        print(f"[adaspec] answer parts: {len(written)} written")
        return
    folder = ensure_target_answers(answers, load_task(cfg.task)["train"])
    print(f"[adaspec] answers: {folder} is complete")


if __name__ == "__main__":
    main()
