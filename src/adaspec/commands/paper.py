"""`make paper` = `python -m adaspec.commands.paper`: run the AdaSPEC vs DistillSpec comparison, then collect it.

    python -m adaspec.commands.paper [--tasks gsm8k mbpp] [--seeds 0 1 2] [--no-sweeps] [--collect-only] [--dry-run]
                            [--results experiments/results] [hydra overrides for every step ...]

Resumable: rerun the same command after an interruption and it continues where it stopped.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from adaspec.errors import UserError, reported_as_one_line
from adaspec.toolkit import no_tokenizer_parallelism, write_json_atomically, write_text_atomically

no_tokenizer_parallelism()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    # imported after the arguments are parsed, so --help and argument errors answer at once
    from adaspec.paper.plan import DEFAULT_TASKS, TASKS

    parser = argparse.ArgumentParser(prog="python -m adaspec.commands.paper", description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="+", default=list(DEFAULT_TASKS), choices=list(TASKS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument(
        "--no-sweeps", dest="sweeps", action="store_false", help="skip the k and gamma sweeps"
    )
    parser.add_argument("--collect-only", action="store_true", help="only collect finished evaluations")
    parser.add_argument(
        "--dry-run", action="store_true", help="print the steps as standalone commands and stop"
    )
    parser.add_argument("--results", type=Path, default=Path("experiments/results"))
    parser.add_argument(
        "overrides", nargs="*", help="Hydra overrides applied to every step, e.g. paths.root=/scratch"
    )
    return parser.parse_args(argv)


def _results_of(step, extra: list[str]) -> Path:
    # imported after the arguments are parsed, so --help and argument errors answer at once
    from adaspec.evaluation.run import results_dir
    from adaspec.paper.runner import compose_step

    return results_dir(compose_step(step, extra)) / "results.json"


def _collected(step, extra: list[str], destination: Path) -> dict[str, Any] | None:
    """The step's evaluation, copied from the run root to `destination`; where the root no longer holds it
    (a run continued on another machine), the copy an earlier collection left at `destination`, provided
    it records this step's settings; None when neither exists."""
    # imported after the arguments are parsed, so --help and argument errors answer at once
    from adaspec.paper.aggregate import copy_results

    source = _results_of(step, extra)
    if source.is_file():
        return copy_results(source, destination)
    if not destination.is_file():
        return None
    kept = json.loads(destination.read_text())
    changed = _settings_changed(step, extra, kept, destination)
    if changed:
        raise UserError(
            f"{destination} was collected from an evaluation with other settings than `{step.command()}` "
            f"({'; '.join(changed[:3])}) and {source} does not exist: collect into another --results folder, "
            f"or rerun the step"
        )
    print(f"[paper] {destination}: kept from an earlier collection ({source} is not on this machine)")
    return kept


def _settings_changed(step, extra: list[str], kept: dict[str, Any], path: Path) -> list[str]:
    # imported after the arguments are parsed, so --help and argument errors answer at once
    from omegaconf import OmegaConf

    from adaspec.evaluation.identity import differences, evaluation_identity, recorded_identity
    from adaspec.paper.runner import compose_step

    recorded = recorded_identity(kept, path)
    config = OmegaConf.to_container(compose_step(step, extra), resolve=True, enum_to_str=True)
    return differences(recorded, evaluation_identity(config, recorded["device"], None))


def collect(
    tasks, seeds: list[int], extra: list[str], out: Path, sweeps: bool
) -> tuple[dict[str, Any], list[Path]]:
    """Copy every finished evaluation to `out`, summarise the seeds, draw the sweeps; returns the summary
    and the plots."""
    # imported after the arguments are parsed, so --help and argument errors answer at once
    from adaspec.paper.aggregate import copy_results, summarise_task, sweep_rows, write_summary
    from adaspec.paper.plan import SAMPLED_EVAL, Step, sweep_steps
    from adaspec.paper.sweep_plots import plot_gamma_sweep, plot_k_sweep

    summary: dict[str, Any] = {}
    sweep_tables: dict[str, Any] = {}
    images: list[Path] = []
    for task in tasks:
        per_seed = {}
        for seed in seeds:
            step = Step("eval", (f"paper={task.name}", f"seed={seed}"))
            if (results := _collected(step, extra, out / task.name / f"seed{seed}" / "main.json")) is not None:
                per_seed[seed] = results
        if per_seed:
            summary[task.name] = summarise_task(task, per_seed)
        sampled = {}
        for seed in seeds if task.sampled_eval else []:
            step = Step("eval", (f"paper={task.name}", f"seed={seed}", *SAMPLED_EVAL))
            if (results := _collected(step, extra, out / task.name / f"seed{seed}" / "t1.json")) is not None:
                sampled[seed] = results
        if sampled:
            summary[f"{task.name} t=1"] = summarise_task(task, sampled)
        if not sweeps:
            continue
        fixed, adaptive, k_sweep = {}, None, None
        for step in (s for s in sweep_steps(task, seeds[0]) if s.kind == "eval"):
            source = _results_of(step, extra)
            if not source.is_file():
                continue
            results = copy_results(source, out / task.name / f"seed{seeds[0]}" / f"{source.parent.name}.json")
            if source.parent.name.endswith("ksweep"):
                k_sweep = results
            elif results["decode"]["policy"] == "adaptive":
                adaptive = results
            else:
                fixed[int(results["decode"]["gamma"])] = results
        if k_sweep:
            images.append(plot_k_sweep(task.name, k_sweep, out / f"{task.name}_k_sweep.png"))
        if fixed:
            images.append(plot_gamma_sweep(task.name, fixed, adaptive, out / f"{task.name}_gamma_sweep.png"))
        if k_sweep or fixed:
            sweep_tables[task.name] = sweep_rows(k_sweep, fixed, adaptive)
    if not summary:
        raise UserError(
            "no finished evaluation to collect yet: run `make paper` (python -m adaspec.commands.paper) first"
        )
    write_summary(out, summary, sweep_tables)
    print((out / "summary.md").read_text())
    print(f"[paper] wrote {out / 'summary.json'}, {out / 'summary.md'} and {len(images)} plots")
    return summary, images


def task_of_config(paper_config: str, task_names: list[str]) -> str:
    """The task whose plan composes `paper=<paper_config>`: the longest task name it is or extends with "_"
    (smollm2_gsm8k_matched -> smollm2_gsm8k, smollm2_gsm8k_beyond_jsd -> smollm2_gsm8k_beyond)."""
    owners = [n for n in task_names if paper_config == n or paper_config.startswith(n + "_")]
    return max(owners, key=len) if owners else paper_config


def wall_times(root: Path, out: Path, task_names: list[str]) -> dict[str, float]:
    """Seconds spent on the steps that ran, per task, over the run's whole log (copied next to the results;
    one line per step, with its seed)."""
    log = root / "paper_log.jsonl"
    if not log.is_file():
        return {}
    totals: dict[str, float] = {}
    for line in log.read_text().splitlines():
        entry = json.loads(line)
        if entry["ran"]:
            config = next(a.split("=", 1)[1] for a in entry["step"].split() if a.startswith("paper="))
            task = task_of_config(config, task_names)
            totals[task] = round(totals.get(task, 0.0) + entry["seconds"], 1)
    write_text_atomically(out / "paper_log.jsonl", log.read_text())
    write_json_atomically(out / "wall_times.json", totals)
    return totals


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    with reported_as_one_line():
        if not Path("experiments/paper").is_dir():
            raise UserError(
                "run from the repository root: experiments/paper/ holds the configs the steps compose"
            )
        # imported after the arguments are parsed and checked, so errors answer at once
        from adaspec.paper.plan import TASKS, paper_plan
        from adaspec.paper.runner import compose_step, run_plan, without_stage0

        tasks = [TASKS[name] for name in args.tasks]
        if args.dry_run:
            print(
                "\n".join(
                    step.command() + "".join(f" {o}" for o in args.overrides)
                    for step in without_stage0(paper_plan(tasks, args.seeds, args.sweeps), args.overrides)
                )
            )
            return
        if not args.collect_only:
            run_plan(paper_plan(tasks, args.seeds, args.sweeps), args.overrides)
        summary, images = collect(tasks, args.seeds, args.overrides, args.results, args.sweeps)
        from adaspec.paper.plan import Step
        from adaspec.paper.wandb_summary import log_paper

        # the run's logger and paths.root, as every step composes them
        run_cfg = compose_step(Step("eval", (f"paper={tasks[0].name}",)), args.overrides)
        log_paper(run_cfg, summary, images)
        times = wall_times(Path(run_cfg.paths.root), args.results, list(TASKS))
        print(f"[paper] wall time of the steps that ran, per task (s): {times}")


if __name__ == "__main__":
    main()
