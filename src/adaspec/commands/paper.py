"""`make paper` = `python -m adaspec.commands.paper`: run the AdaSPEC vs DistillSpec comparison, then collect it.

    python -m adaspec.commands.paper [--tasks gsm8k mbpp] [--seeds 0 1 2] [--no-sweeps] [--dry-run]
                            [--collect-only | --collect-each] [--reuse TASK=RESULTS ...]
                            [--stages STAGE,... --arms ARM,... --ks K,...]
                            [--results experiments/results] [hydra overrides for every step ...]

Resumable: rerun the same command after an interruption and it continues where it stopped.
Each group of tasks keeps its own `--results` folder: a folder whose summary holds tasks this run would drop
from it is refused before anything runs.

`--collect-each` runs one task at a time and collects every task of `--tasks` after each, so that a finished
task is in `--results` before the next starts (a group of long tasks, committed as each finishes):

    python -m adaspec.commands.paper --tasks smollm2_gsm8k_capacity --seeds 0 --collect-each \
        --results experiments/results/smollm2-gsm8k-capacity/seed0

`--stages`, `--arms` and `--ks` run part of the plan and collect nothing, e.g. only what a serving comparison
times of the capacity experiment (each size's stage 0, forward-KL reference and forward-KL drafts):

    python -m adaspec.commands.paper --tasks smollm2_gsm8k_capacity_h128 --seeds 0 \
        --stages target,cache,pretrain_draft,ref,draft --arms a --ks 0.4,1

`--reuse TASK=RESULTS` takes a task's evaluations from another group's results instead of running it again,
e.g. the stage-0 data group's full-data point, which is the capacity experiment's h128 task:

    python -m adaspec.commands.paper --tasks smollm2_gsm8k_stage0_tokens --seeds 0 --no-sweeps --collect-each \
        --reuse smollm2_gsm8k_capacity_h128=experiments/results/smollm2-gsm8k-capacity/seed0 \
        --results experiments/results/smollm2-gsm8k-stage0-tokens/seed0
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from adaspec.errors import UserError, reported_as_one_line
from adaspec.paper.plan import (
    CAPACITY_TITLES,
    DEFAULT_TASKS,
    GROUPS,
    STAGE0_GROUP,
    TASKS,
    Step,
    TaskPlan,
    sweep_steps,
    task_steps,
)
from adaspec.paper.step_filter import STAGES, StepFilter, parse_ks, selected_steps
from adaspec.toolkit import no_tokenizer_parallelism, write_json_atomically, write_text_atomically

no_tokenizer_parallelism()


def _stages(text: str) -> tuple[str, ...]:
    stages = tuple(s for s in text.split(",") if s)
    if unknown := [s for s in stages if s not in STAGES]:
        raise argparse.ArgumentTypeError(f"unknown stage {unknown[0]!r}; stages: {', '.join(STAGES)}")
    return stages


def _reused(parser: argparse.ArgumentParser, values: list[str], tasks: list[str]) -> dict[str, Path]:
    """--reuse's TASK=RESULTS values, each TASK one of the tasks run."""
    reused = {}
    for value in values:
        name, _, folder = value.partition("=")
        if name not in tasks or not folder:
            parser.error(f"--reuse {value}: expected TASK=RESULTS with TASK one of --tasks ({', '.join(tasks)})")
        reused[name] = Path(folder)
    return reused


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m adaspec.commands.paper", description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="+", default=list(DEFAULT_TASKS), choices=[*TASKS, *GROUPS])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument(
        "--no-sweeps", dest="sweeps", action="store_false", help="skip the k and gamma sweeps"
    )
    collecting = parser.add_mutually_exclusive_group()
    collecting.add_argument("--collect-only", action="store_true", help="only collect finished evaluations")
    collecting.add_argument(
        "--collect-each", action="store_true",
        help="run one task at a time (its sweeps included) and collect every task of --tasks after each",
    )
    parser.add_argument(
        "--reuse", action="append", default=[], metavar="TASK=RESULTS",
        help="do not run TASK: copy its main evaluations (<TASK>/seed<s>/main.json) from another results folder "
             "into --results where missing there; collect checks they have this run's settings",
    )
    parser.add_argument(
        "--stages", type=_stages, default=(), metavar="STAGE,...",
        help=f"run only the steps of these stages ({', '.join(STAGES)}) and collect nothing",
    )
    parser.add_argument(
        "--arms", type=lambda s: tuple(a for a in s.split(",") if a), default=(), metavar="ARM,...",
        help="run only these arms' drafts: a (the task's own config), or another arm's config suffix "
             "without its _ (matched, nla, lk, ...); collect nothing",
    )
    parser.add_argument(
        "--ks", type=parse_ks, default=(), metavar="K,...", help="run only the drafts at these k; collect nothing"
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="print the steps as standalone commands and stop"
    )
    parser.add_argument("--results", type=Path, default=Path("experiments/results"))
    parser.add_argument(
        "overrides", nargs="*", help="Hydra overrides applied to every step, e.g. paths.root=/scratch"
    )
    args = parser.parse_args(argv)
    args.tasks = [name for group in args.tasks for name in GROUPS.get(group, (group,))]
    args.steps = StepFilter(args.stages, args.arms, args.ks)
    if args.steps and (args.collect_only or args.collect_each):
        parser.error(f"{args.steps.described()} runs part of the plan and collects nothing: "
                     f"leave out --collect-only and --collect-each")
    args.reuse = _reused(parser, args.reuse, args.tasks)
    return args


def _results_of(step, extra: list[str]) -> Path:
    # imported after the arguments are parsed, so --help and argument errors answer at once
    from adaspec.artefacts import paths
    from adaspec.evaluation.run import results_dir
    from adaspec.paper.runner import compose_step

    cfg = compose_step(step, extra)
    return results_dir(paths.of(cfg), cfg.decode, cfg.eval.name) / "results.json"


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


def check_results_folder(results: Path, task_names: list[str]) -> None:
    """Refuse, before anything runs, a collection that would rewrite another group's summary: `summary.json`
    in `results` summarising tasks this run does not collect (each group keeps its own folder)."""
    summary = results / "summary.json"
    if not summary.is_file():
        return
    try:
        written = json.loads(summary.read_text())
    except json.JSONDecodeError:
        written = None
    # this runner's summary maps each task (and "sweeps") to a dict; another command's (a dataset's, an answers'
    # run's) has other values
    if not isinstance(written, dict) or not all(isinstance(value, dict) for value in written.values()):
        held = f" (it holds {', '.join(written)})" if isinstance(written, dict) else ""
        raise UserError(f"{summary} is not a summary this runner wrote{held}: collect into another --results folder")
    summarised = {key.removesuffix(" t=1") for key in written if key != "sweeps"}
    if dropped := sorted(summarised - set(task_names)):
        raise UserError(
            f"{summary} summarises {', '.join(dropped)}, which collecting --tasks {' '.join(task_names)} there would "
            f"drop: pass --results <this group's own folder> (each group's README names it), or add those tasks"
        )


def collect(
    tasks, seeds: list[int], extra: list[str], out: Path, sweeps: bool, reused: dict[str, Path] | None = None
) -> tuple[dict[str, Any], list[Path]]:
    """Copy every finished evaluation to `out`, summarise the seeds, draw the sweeps; returns the summary
    and the plots. `reused`: task name -> another results folder whose main evaluations of the task are
    copied to `out` first where `out` has none (`--reuse`)."""
    # imported after the arguments are parsed, so --help and argument errors answer at once
    from adaspec.paper.aggregate import (
        copy_results,
        reuse_main_evaluations,
        summarise_task,
        sweep_rows,
        write_summary,
    )
    from adaspec.paper.sweep_plots import plot_gamma_sweep, plot_k_sweep

    for name, source in (reused or {}).items():
        for copied in reuse_main_evaluations(name, seeds, source, out):
            print(f"[paper] {copied}: copied from {source} (--reuse)")
    summary: dict[str, Any] = {}
    sweep_tables: dict[str, Any] = {}
    images: list[Path] = []
    for task in tasks:
        per_seed = {}
        for seed in seeds:
            step = Step("eval", (*task.args(), f"seed={seed}"))
            if (results := _collected(step, extra, out / task.name / f"seed{seed}" / "main.json")) is not None:
                per_seed[seed] = results
        if per_seed:
            summary[task.name] = summarise_task(task, per_seed)
        sampled = {}
        for seed in seeds if task.sampled_eval else []:
            step = Step("eval", (*task.args(), f"seed={seed}", *task.sampled_eval))
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
    images += _scaling_tables(summary, out)
    print((out / "summary.md").read_text())
    print(f"[paper] wrote {out / 'summary.json'}, {out / 'summary.md'} and {len(images)} plots")
    return summary, images


def _scaling_tables(summary: dict[str, Any], out: Path) -> list[Path]:
    """The capacity experiment's and the stage-0 data experiment's tables (<group>.json, .md) and plots
    (<group>.png), where their tasks are summarised."""
    # imported after the arguments are parsed, so --help and argument errors answer at once
    from adaspec.paper.capacity import capacity_markdown, capacity_rows, plot_capacity
    from adaspec.paper.stage0_tokens import plot_stage0, stage0_markdown, stage0_rows

    images = []
    for group, title in CAPACITY_TITLES.items():
        if rows := capacity_rows(summary, list(GROUPS[group])):
            write_json_atomically(out / f"{group}.json", rows)
            write_text_atomically(out / f"{group}.md", capacity_markdown(rows) + "\n")
            print((out / f"{group}.md").read_text())
            images.append(plot_capacity(rows, title, out / f"{group}.png"))
    # the data-scaling group: worth a curve once a task other than the shared preset-size one is summarised
    if len(rows := stage0_rows(summary, list(GROUPS[STAGE0_GROUP]))) > 1:
        write_json_atomically(out / f"{STAGE0_GROUP}.json", rows)
        write_text_atomically(out / f"{STAGE0_GROUP}.md", stage0_markdown(rows) + "\n")
        print((out / f"{STAGE0_GROUP}.md").read_text())
        images.append(plot_stage0(rows, out / f"{STAGE0_GROUP}.png"))
    return images


def task_of_step(step: str, tasks) -> str:
    """The task whose plan composes the logged step `step`: of the tasks whose overrides it carries, the one
    with the longest config name it is or extends with "_" (smollm2_gsm8k_matched -> smollm2_gsm8k,
    smollm2_gsm8k_beyond_jsd -> smollm2_gsm8k_beyond, a capacity step with model.draft_name=h256x6 -> that
    size's task); its own config name where none does."""
    args = step.split()
    config = next(a.split("=", 1)[1] for a in args if a.startswith("paper="))

    def owns(task) -> bool:  # task.args()[1:]: its overrides after paper=, draft_overrides and paths.root
        return (config == task.files or config.startswith(task.files + "_")) and all(
            o in args for o in task.args()[1:])

    owners = [t for t in tasks if owns(t)]
    if not owners:
        return config
    return max(owners, key=lambda t: (len(t.files), len(t.args()))).name


def wall_times(root: Path, out: Path, tasks) -> dict[str, float]:
    """Seconds spent on the steps that ran, per task, over the run's whole log (one line per step, with its seed and
    time), merged into the copy next to the results: the lines an earlier collection kept there (seeds run on
    another machine) stay, the root's are added once."""
    log, kept = root / "paper_log.jsonl", out / "paper_log.jsonl"
    if not log.is_file():
        return {}
    earlier = kept.read_text().splitlines() if kept.is_file() else []
    lines = list(dict.fromkeys([*earlier, *log.read_text().splitlines()]))
    totals: dict[str, float] = {}
    for line in lines:
        entry = json.loads(line)
        if entry["ran"]:
            task = task_of_step(entry["step"], tasks)
            totals[task] = round(totals.get(task, 0.0) + entry["seconds"], 1)
    write_text_atomically(kept, "".join(f"{line}\n" for line in lines))
    write_json_atomically(out / "wall_times.json", totals)
    return totals


def batches(tasks: list[TaskPlan], collect_each: bool) -> list[list[TaskPlan]]:
    """The tasks run before each collection: one at a time with --collect-each, else all together."""
    return [[task] for task in tasks] if collect_each and tasks else [tasks]


def standalone(step: Step, extra: list[str]) -> str:
    # the runner resumes an interrupted stage from its last checkpoint: the standalone command does too
    resume = " resume=true" if step.kind in ("train", "pretrain") else ""
    return step.command() + resume + "".join(f" {o}" for o in extra)


def _collect_and_log(tasks: list[TaskPlan], args: argparse.Namespace) -> None:
    # imported after the arguments are parsed and checked, so errors answer at once
    from adaspec.paper.runner import compose_step
    from adaspec.paper.wandb_summary import log_paper

    summary, images = collect(tasks, args.seeds, args.overrides, args.results, args.sweeps, args.reuse)
    # the run's logger and paths.root, as every step composes them
    run_cfg = compose_step(Step("eval", tasks[0].args()), args.overrides)
    log_paper(run_cfg.logger, Path(run_cfg.paths.root), summary, images)
    times = wall_times(Path(run_cfg.paths.root), args.results, list(TASKS.values()))
    print(f"[paper] wall time of the steps that ran, per task (s): {times}")


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    with reported_as_one_line():
        if not Path("experiments/paper").is_dir():
            raise UserError(
                "run from the repository root: experiments/paper/ holds the configs the steps compose"
            )
        # imported after the arguments are parsed and checked, so errors answer at once
        from adaspec.paper.runner import run_plan, without_stage0

        tasks = [TASKS[name] for name in args.tasks]
        if not args.steps and not args.dry_run:
            check_results_folder(args.results, args.tasks)
        to_run = [task for task in tasks if task.name not in args.reuse]
        plans = [selected_steps(task_steps(batch, args.seeds, args.sweeps), args.steps)
                 for batch in batches(to_run, args.collect_each)]
        if args.dry_run:
            print("\n".join(standalone(step, args.overrides)
                            for steps in plans for step in without_stage0(steps, args.overrides)))
            return
        for steps in plans:
            if not args.collect_only:
                run_plan(steps, args.overrides)
            if not args.steps:
                _collect_and_log(tasks, args)
        if args.steps:
            print(f"[paper] {args.steps.described()}: done, nothing collected (--collect-only collects)")


if __name__ == "__main__":
    main()
