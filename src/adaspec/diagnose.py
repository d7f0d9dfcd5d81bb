"""`python -m adaspec.diagnose` (`make diagnose`): the practice note's troubleshooting guide, run.

Reads the run's artefacts, logs and evaluation results (found from the config like the stages
find them; nothing is retrained), prints a verdict per check with the measured value, the
threshold and the suggested action, and writes `diagnose/report.json` and `report.md` into the
seed's folder (and a W&B table when W&B is on).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig

from adaspec.config import validate
from adaspec.errors import reported_as_one_line

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def markdown(verdicts: list[dict[str, str]]) -> str:
    lines = ["| check | verdict | measured | threshold | action |", "|---|---|---|---|---|"]
    lines += [
        f"| {v['check']} | {v['status']} | {v['value']} | {v['threshold']} | {v['action']} |"
        for v in verdicts
    ]
    return "\n".join(lines)


def run_diagnosis(cfg: DictConfig) -> dict[str, Any]:
    from transformers import AutoTokenizer

    from adaspec import paths
    from adaspec.data.datamodule import encode_all
    from adaspec.data.tasks import load_task
    from adaspec.diagnostics import checks
    from adaspec.diagnostics.measure import held_out_kl_and_agreement, logged, machine_memory_mb, read_json
    from adaspec.evaluation.cost import cost_ratio
    from adaspec.evaluation.run import draft_name, results_dir
    from adaspec.models.build import freeze, load_model
    from adaspec.pipeline import require_artefact

    validate(cfg)
    require_artefact(paths.target_dir(cfg), "target", "diagnose", cfg)
    require_artefact(paths.ref_dir(cfg), "ref", "diagnose", cfg)
    target_final = paths.final(paths.target_dir(cfg))
    tokenizer = AutoTokenizer.from_pretrained(str(target_final))
    held_out = encode_all(tokenizer, load_task(cfg.task)["test"][: cfg.task.n_val], cfg.task.max_length)
    target = freeze(load_model(target_final))
    prompt = torch_prompt(tokenizer, held_out)

    verdicts: list[checks.Verdict] = []
    ref_folder = paths.ref_dir(cfg)
    ref = freeze(load_model(paths.final(ref_folder)))
    ref_kl, _, n_tokens = held_out_kl_and_agreement(target, ref, held_out, tokenizer.pad_token_id)
    verdicts += [
        checks.reference_kl(ref_kl, n_tokens),
        checks.warmup_and_decay("ref", logged(ref_folder, "train/lr")),
        checks.loss_still_falling("ref", logged(ref_folder, "train/loss")),
    ]
    results = read_json(results_dir(cfg) / "results.json")
    context = max(len(e.input_ids) for e in held_out) + cfg.decode.max_new_tokens
    peak, last_time = None, -1.0
    for k in cfg.eval.draft_ks:
        folder = paths.draft_dir(cfg, k)
        name = f"draft k={paths.format_k(k)}"
        if not (paths.final(folder) / "meta.json").is_file():
            verdicts.append(checks.Verdict(name, "skip", "not trained", "", f'make stage3 ARGS="k={k}"'))
            continue
        draft = freeze(load_model(paths.final(folder)))
        _, agreement, n = held_out_kl_and_agreement(target, draft, held_out, tokenizer.pad_token_id)
        row = (results or {}).get("drafts", {}).get(draft_name(k))
        alpha = row["alpha"] if row else None
        c = cost_ratio(draft, target, prompt)
        verdicts += [
            checks.warmup_and_decay(name, logged(folder, "train/lr")),
            checks.loss_still_falling(name, logged(folder, "train/loss")),
            checks.draft_agreement(name, agreement, n),
            checks.speedup(name, alpha, row["speedup_vs_target"] if row else None),
            checks.gamma_choice(name, alpha, c, int(cfg.decode.gamma), context),
            checks.larger_draft(name, alpha, c, int(cfg.decode.gamma)),
        ]
        final_mtime = (paths.final(folder) / "meta.json").stat().st_mtime
        if final_mtime > last_time:
            last_time = final_mtime
            peak = (read_json(paths.final(folder) / "metrics.json") or {}).get("peak_memory_mb")
    verdicts.append(checks.memory(peak, machine_memory_mb()))
    if results and results.get("drafts"):
        first = next(iter(results["drafts"].values()))
        curve = {key: v for key, v in first.items() if key.startswith("reject_rate_at/")}
        report_curve = {"draft": first.get("label"), **curve}
    else:
        report_curve = None

    report = {
        "task": cfg.task.name,
        "model": cfg.model.name,
        "seed": cfg.seed,
        "held_out_examples": len(held_out),
        "rejection_curve": report_curve,
        "verdicts": [v.as_dict() for v in verdicts],
    }
    folder = paths.eval_dir(cfg).parent / "diagnose"
    write_report(folder, report)
    log_to_wandb(cfg, report)
    print(markdown(report["verdicts"]))
    if report_curve:
        print("rejection rate by draft position:", {k.split("/")[-1]: round(v, 3) for k, v in curve.items()})
    print(f"[adaspec] diagnose: wrote {folder / 'report.json'} and {folder / 'report.md'}")
    return report


def torch_prompt(tokenizer, held_out):
    import torch

    ids = [i for i, label in zip(held_out[0].input_ids, held_out[0].labels, strict=True) if label == -100]
    return torch.tensor([ids or held_out[0].input_ids[:8]])


def write_report(folder: Path, report: dict[str, Any]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in (
        ("report.json", json.dumps(report, indent=2)),
        ("report.md", markdown(report["verdicts"]) + "\n"),
    ):
        tmp = folder / f".{name}.tmp"
        tmp.write_text(text)
        os.replace(tmp, folder / name)


def log_to_wandb(cfg: DictConfig, report: dict[str, Any]) -> None:
    wb = cfg.logger.wandb
    if not wb.enabled or wb.mode == "disabled":
        return
    import wandb

    from adaspec import paths

    run = wandb.init(
        project=wb.project,
        entity=wb.entity,
        mode=wb.mode,
        job_type="diagnose",
        dir=str(paths.eval_dir(cfg).parent),
        name=f"{cfg.task.name}/{cfg.model.name}/seed{cfg.seed}/diagnose",
    )
    columns = ["check", "status", "value", "threshold", "action"]
    run.log(
        {
            "diagnose/report": wandb.Table(
                columns=columns, data=[[v[c] for c in columns] for v in report["verdicts"]]
            )
        }
    )
    run.finish()


@hydra.main(version_base="1.3", config_path="../../conf", config_name="config")
def main(cfg: DictConfig) -> None:
    with reported_as_one_line():
        run_diagnosis(cfg)


if __name__ == "__main__":
    main()
