"""Write the evaluation's results: `results.json` (everything) and `results.md` (the table), atomically."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from adaspec.machine import cpu_name
from adaspec.toolkit import format_cell, markdown_table, write_json_atomically, write_text_atomically

RESULTS_JSON = "results.json"
RESULTS_MD = "results.md"
TABLE_COLUMNS = [
    ("alpha", "alpha"),
    ("accept_rate", "accept_rate"),
    ("tau", "tau"),
    ("speedup_vs_target", "speedup_vs_target"),
    ("speedup_vs_hf_assisted", "speedup_vs_hf_assisted"),
    ("tokens_per_s", "tokens/s"),
    ("best_gamma", "best gamma"),  # by expected speed-up: acceptance against gamma and measured call costs
    ("expected_speedup_at_best_gamma", "expected speed-up there"),
]


def results_markdown(results: dict[str, Any]) -> str:
    """Rows = drafts; columns alpha, accept_rate, tau, the two speed-ups, tokens/s and the task score."""
    metric = results["metric"]
    d = results["decode"]
    title = (
        f"## Speculative decoding: {results['task']} / {results['model']}, {results['setting']} "
        f"(policy {d['policy']}, gamma {d['gamma']}, temperature {d['temperature']:g}), "
        f"{results['n_prompts']} prompts, max_new_tokens {d['max_new_tokens']}"
    )
    header = ["draft", *(name for _, name in TABLE_COLUMNS), metric]
    rows = [
        [
            row["label"],
            *(format_cell(row.get(key), 1 if key == "tokens_per_s" else 3) for key, _ in TABLE_COLUMNS),
            format_cell(row.get(metric)),
        ]
        for row in results["drafts"].values()
    ]
    lines = [title, "", markdown_table(header, rows)]
    target = results["target"]
    lines += [
        "",
        f"Target only: {format_cell(target['tokens_per_s'], 1)} tokens/s, {metric} {format_cell(target.get(metric))}.",
    ]
    checks = [
        f"{row['label']} {row['greedy_mismatches']}"
        for row in results["drafts"].values()
        if row.get("greedy_mismatches") is not None
    ]
    if checks:
        lines.append(f"Prompts where speculative greedy output differs from target-only greedy: {', '.join(checks)}.")
    busy = results.get("contention")
    if busy and busy["contended"]:
        lines.append(f"**Timings contended**: {busy['why']}; tokens/s and speed-ups are not this machine's alone.")
    if results.get("machine"):
        lines.append(f"Timed on {cpu_name(results['machine'])}, {results['machine']['threads']} threads.")
    if busy and busy.get("kernel_ms"):
        lines.append(f"Machine speed: the reference kernel (adaspec.evaluation.contention) took "
                     f"{busy['kernel_ms']['before']:.1f} ms before the timed runs and {busy['kernel_ms']['after']:.1f} "
                     f"ms after; compare absolute timings of two evaluations only where it agrees.")
    if results.get("code_sandbox"):
        lines.append(f"The generated code ran in the sandbox under {results['code_sandbox']}.")
    return "\n".join(lines) + "\n"


def write_results(folder: Path, results: dict[str, Any]) -> tuple[Path, Path]:
    """`results.json` and `results.md` in `folder`, each written atomically; returns their paths."""
    json_path, md_path = folder / RESULTS_JSON, folder / RESULTS_MD
    write_json_atomically(json_path, results)
    write_text_atomically(md_path, results_markdown(results))
    return json_path, md_path
