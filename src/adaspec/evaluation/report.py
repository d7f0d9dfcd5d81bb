"""Write the evaluation's results: `results.json` (everything) and `results.md` (the table), atomically."""

from __future__ import annotations

import json
import math
import os
import secrets
from pathlib import Path
from typing import Any

RESULTS_JSON = "results.json"
RESULTS_MD = "results.md"
TABLE_COLUMNS = [
    ("alpha", "alpha"),
    ("accept_rate", "accept_rate"),
    ("tau", "tau"),
    ("speedup_vs_target", "speedup_vs_target"),
    ("speedup_vs_hf_assisted", "speedup_vs_hf_assisted"),
    ("tokens_per_s", "tokens/s"),
]


def write_bytes_atomically(path: Path, data: bytes) -> None:
    """Write to a temporary file beside `path`, then rename it over `path`: readers never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")  # "x": never someone else's
    try:
        with open(tmp, "xb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_text_atomically(path: Path, text: str) -> None:
    write_bytes_atomically(path, text.encode())


def jsonable(value: Any) -> Any:
    """NaN and infinities become null (JSON has neither); containers are converted recursively."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return value


def _cell(value: Any, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def markdown_table(results: dict[str, Any]) -> str:
    """Rows = drafts; columns alpha, accept_rate, tau, the two speed-ups, tokens/s and the task score."""
    metric = results["metric"]
    d = results["decode"]
    title = (
        f"## Speculative decoding: {results['task']} / {results['model']}, {results['setting']} "
        f"(policy {d['policy']}, gamma {d['gamma']}, temperature {d['temperature']:g}), "
        f"{results['n_prompts']} prompts, max_new_tokens {d['max_new_tokens']}"
    )
    header = ["draft", *(name for _, name in TABLE_COLUMNS), metric]
    lines = [title, "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in results["drafts"].values():
        cells = [row["label"], *(_cell(row.get(key), 1 if key == "tokens_per_s" else 3) for key, _ in TABLE_COLUMNS)]
        lines.append("| " + " | ".join([*cells, _cell(row.get(metric))]) + " |")
    target = results["target"]
    lines += ["", f"Target only: {_cell(target['tokens_per_s'], 1)} tokens/s, {metric} {_cell(target.get(metric))}."]
    checks = [
        f"{row['label']} {row['greedy_mismatches']}" for row in results["drafts"].values() if row.get("greedy_mismatches") is not None
    ]
    if checks:
        lines.append(f"Prompts where speculative greedy output differs from target-only greedy: {', '.join(checks)}.")
    return "\n".join(lines) + "\n"


def write_results(folder: Path, results: dict[str, Any]) -> tuple[Path, Path]:
    """`results.json` and `results.md` in `folder`, each written atomically; returns their paths."""
    json_path, md_path = folder / RESULTS_JSON, folder / RESULTS_MD
    write_text_atomically(json_path, json.dumps(jsonable(results), indent=2, sort_keys=False, allow_nan=False) + "\n")
    write_text_atomically(md_path, markdown_table(results))
    return json_path, md_path
