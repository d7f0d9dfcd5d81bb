"""Collect the evaluations of a paper run into experiments/results/: per-seed JSON, summary.json
(mean, std and 95 % interval per draft and of each AdaSPEC - DistillSpec difference) and summary.md.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, NamedTuple

from adaspec.paper.plan import TaskPlan
from adaspec.paper.stats import describe, interval, mean_and_spread, paired_difference
from adaspec.toolkit import markdown_table, write_json_atomically, write_text_atomically

METRICS = ("alpha", "accept_rate", "tau", "speedup_vs_target")


class Comparison(NamedTuple):
    name: str
    first: str  # the row whose values come first in the paired difference
    second: str
    first_label: str = "AdaSPEC"
    second_label: str = "DistillSpec"


def comparisons(task: TaskPlan) -> list[Comparison]:
    """Each paired comparison reported for the task: AdaSPEC - DistillSpec within every arm, and with
    `task.versus_arm_a` every extra arm - arm (a) at the same k."""
    out = []
    for k in (k for k in task.draft_ks if k != 1.0):
        out.append(Comparison(f"(a) equal budget, k={k:g}", f"k{k:g}", "k1"))
        out.append(Comparison(f"(b) vs (c) same forward passes, k={k:g}", f"k{k:g}-matched", "k1-matched"))
    ada = f"k{task.draft_ks[0]:g}"
    out.append(
        Comparison(f"(b) vs (a) DistillSpec: the official budgets, k={task.draft_ks[0]:g}", f"{ada}-matched", "k1")
    )
    names = {"_optimal": "(d) optimal epoch", "_domain": "ablation: domain strategies"}
    for suffix, ks in task.extra_arms:
        tag = suffix.lstrip("_")
        distillspec = f"k1-{tag}" if 1.0 in ks else "k1"  # an arm without its own k=1 pairs with arm (a)'s
        for k in (k for k in ks if k != 1.0):
            out.append(Comparison(f"{names.get(suffix, tag)}, k={k:g}", f"k{k:g}-{tag}", distillspec))
    if task.versus_arm_a:
        for suffix, ks in task.extra_arms:
            tag = suffix.lstrip("_")
            out += [
                Comparison(f"{tag} vs arm (a), k={k:g}", f"k{k:g}-{tag}", f"k{k:g}", tag, "arm (a)") for k in ks
            ]
    return out


def _verdict(ci: list[float] | None, first: str = "AdaSPEC", second: str = "DistillSpec") -> str:
    if ci is None:
        return "one seed: no interval"
    if ci[0] > 0:
        return f"{first} higher"
    if ci[1] < 0:
        return f"{second} higher"
    return "no resolved difference"


def summarise_task(task: TaskPlan, per_seed: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """Each draft over the seeds whose evaluation has it, each comparison paired over the seeds that have both
    of its drafts; a draft or comparison that some seed lacks (an arm not run on every seed) names its seeds."""
    seeds = sorted(per_seed)
    first = per_seed[seeds[0]]
    rows = list(dict.fromkeys(row for s in seeds for row in per_seed[s]["drafts"]))
    having = {row: [s for s in seeds if row in per_seed[s]["drafts"]] for row in rows}

    def values(row: str, key: str, among: list[int]) -> list:
        return [per_seed[s]["drafts"][row].get(key) for s in among]

    def named_seeds(among: list[int]) -> dict[str, list[int]]:
        return {} if among == seeds else {"seeds": among}

    drafts = {
        row: {
            "label": per_seed[having[row][0]]["drafts"][row]["label"],
            "parameters": per_seed[having[row][0]]["drafts"][row].get("parameters"),
            **named_seeds(having[row]),
            **{m: describe(values(row, m, having[row])) for m in METRICS},
        }
        for row in rows
    }
    for row in rows:  # what each draft cost to train, where every seed's evaluation recorded it
        seconds = values(row, "train_seconds", having[row])
        if None not in seconds:
            drafts[row]["train_seconds"] = describe(seconds)
    metric = first["metric"]
    summary: dict[str, Any] = {
        "seeds": seeds,
        "n_prompts": first["n_prompts"],
        "setting": first["setting"],
        "score_metric": metric,
        "target": {
            metric: describe([per_seed[s]["target"][metric] for s in seeds]),
            "parameters": first["target"]["parameters"],
        },
        "draft_score": {row: describe(values(row, metric, having[row])) for row in rows},
        # seeds whose timed runs shared the cores (their speed-ups are suspect) and seeds evaluated before the
        # evaluation recorded it
        "timing_contended_seeds": [s for s in seeds if (per_seed[s].get("contention") or {}).get("contended")],
        "timing_unguarded_seeds": [s for s in seeds if "contention" not in per_seed[s]],
        "drafts": drafts,
        "comparisons": [],
    }
    for c in comparisons(task):
        both = [s for s in seeds if c.first in per_seed[s]["drafts"] and c.second in per_seed[s]["drafts"]]
        if not both:
            continue
        diffs = {m: paired_difference(values(c.first, m, both), values(c.second, m, both)) for m in METRICS}
        summary["comparisons"].append({**c._asdict(), **named_seeds(both), "difference": diffs})
    return summary


def _with_seeds(name: str, entry: dict[str, Any]) -> str:
    """A row's name, followed by its seeds where they are not all of the task's."""
    return f"{name} (seeds {', '.join(map(str, entry['seeds']))})" if "seeds" in entry else name


def markdown(summary: dict[str, dict[str, Any]]) -> str:
    header = ["task", "draft", "alpha", "accept_rate", "tau", "speed-up vs target", "target score", "training s"]
    rows = []
    for task, s in summary.items():
        score = f"{s['score_metric']} {mean_and_spread(s['target'][s['score_metric']])}"
        rows += [
            [task, _with_seeds(d["label"], d), *(mean_and_spread(d[m]) for m in METRICS), score,
             f"{d['train_seconds']['mean']:.0f}" if "train_seconds" in d else "-"]
            for d in s["drafts"].values()
        ]
    comparison_rows = []
    for task, s in summary.items():
        for c in s["comparisons"]:
            cells = []
            for m in METRICS:
                d = c["difference"][m]
                cells.append(f"{mean_and_spread(d, '+')}{interval(d, '+')}")
            labels = (c.get("first_label", "AdaSPEC"), c.get("second_label", "DistillSpec"))
            comparison_rows.append([task, _with_seeds(c["name"], c), *cells, _verdict(c["difference"]["accept_rate"]["ci95"], *labels)])
    seeds = {task: s["seeds"] for task, s in summary.items()}
    lines = [
        markdown_table(header, rows),
        "",
        "Paired by seed, first − second (AdaSPEC − DistillSpec unless named; mean ± std, [95 % interval]):",
        "",
        markdown_table(
            ["task", "comparison", "alpha", "accept_rate", "tau", "speed-up", "verdict on accept_rate"],
            comparison_rows,
        ),
        "",
        f"Seeds: {seeds}; prompts per evaluation: "
        + ", ".join(f"{t} {s['n_prompts']}" for t, s in summary.items())
        + ".",
    ]
    for key, what in (("timing_contended_seeds", "Timed beside another job (speed-ups not this machine's alone)"),
                      ("timing_unguarded_seeds", "Timed before evaluations recorded contention")):
        marked = {task: s[key] for task, s in summary.items() if s.get(key)}
        if marked:
            lines.append(f"{what}: {marked}.")
    return "\n".join(lines) + "\n"


def copy_results(source: Path, destination: Path) -> dict[str, Any]:
    destination.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, destination)
    return json.loads(source.read_text())


def reuse_main_evaluations(task_name: str, seeds: list[int], source: Path, out: Path) -> list[Path]:
    """Copy the task's main evaluation of each seed (<task>/seed<s>/main.json) from another results folder
    `source` into `out` where `out` has none yet; returns the files copied. `collect` then takes the run
    root's evaluation where the root holds it, else this copy, checked to have this run's settings."""
    copied = []
    for seed in seeds:
        found, kept = (folder / task_name / f"seed{seed}" / "main.json" for folder in (source, out))
        if found.is_file() and not kept.is_file():
            copy_results(found, kept)
            copied.append(kept)
    return copied


def sweep_rows(k_sweep: dict | None, fixed: dict[int, dict], adaptive: dict | None) -> dict[str, list[dict]]:
    """The sweeps' numbers, one row per (setting, draft): what the PNGs show."""
    pick = ("alpha", "accept_rate", "tau", "speedup_vs_target")
    rows: dict[str, list[dict]] = {"k": [], "gamma": []}
    if k_sweep:
        for d in sorted(k_sweep["drafts"].values(), key=lambda r: r["k"]):
            rows["k"].append({"k": d["k"], **{m: d[m] for m in pick}})
    settings = [(str(g), fixed[g]) for g in sorted(fixed)] + ([("adaptive", adaptive)] if adaptive else [])
    for gamma, results in settings:
        for d in results["drafts"].values():
            rows["gamma"].append({"gamma": gamma, "draft": d["label"], **{m: d[m] for m in pick}})
    return rows


def sweep_markdown(sweeps: dict[str, dict[str, list[dict]]]) -> str:
    def numbers(r: dict) -> list[str]:
        return [f"{r[m]:.3f}" for m in ("alpha", "accept_rate", "tau", "speedup_vs_target")]

    lines = []
    for task, rows in sweeps.items():
        if rows["k"]:
            lines += ["", f"{task}, k sweep (seed 0):", ""]
            lines.append(
                markdown_table(
                    ["k", "alpha", "accept_rate", "tau", "speed-up"],
                    [[f"{r['k']:g}", *numbers(r)] for r in rows["k"]],
                )
            )
        if rows["gamma"]:
            lines += ["", f"{task}, gamma sweep (seed 0):", ""]
            lines.append(
                markdown_table(
                    ["gamma", "draft", "alpha", "accept_rate", "tau", "speed-up"],
                    [[r["gamma"], r["draft"], *numbers(r)] for r in rows["gamma"]],
                )
            )
    return "\n".join(lines) + ("\n" if lines else "")


def write_summary(
    out: Path, summary: dict[str, dict[str, Any]], sweeps: dict[str, dict[str, list[dict]]]
) -> None:
    write_json_atomically(out / "summary.json", {**summary, "sweeps": sweeps})
    write_text_atomically(out / "summary.md", markdown(summary) + sweep_markdown(sweeps))
