"""`python -m adaspec.commands.diagnose` (`make diagnose`): the practice note's troubleshooting guide, run.

Reads the run's artefacts, logs and evaluation results (found from the config like the stages
find them; nothing is retrained), prints a verdict per check with the measured value, the
threshold and the suggested action, and writes `diagnose/report.json` and `report.md` into the
seed's folder (and a W&B table when W&B is on).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from adaspec.artefacts import paths
from adaspec.cli import hydra_entry
from adaspec.toolkit import (
    markdown_table,
    no_tokenizer_parallelism,
    wandb_enabled,
    write_json_atomically,
    write_text_atomically,
)

no_tokenizer_parallelism()


VERDICT_COLUMNS = ("check", "verdict", "measured", "threshold", "action")


def markdown(verdicts: list[dict[str, str]]) -> str:
    rows = [(v["check"], v["status"], v["value"], v["threshold"], v["action"]) for v in verdicts]
    return markdown_table(VERDICT_COLUMNS, rows, cell=str)


TIMING_PROMPTS = 4  # held-out prompts on which every draft and the target are timed for c


def run_diagnosis(cfg: DictConfig) -> dict[str, Any]:
    # imported here, after the config is checked, so a bad command is answered in a second
    from transformers import AutoTokenizer

    from adaspec.artefacts.rules import require_artefact
    from adaspec.artefacts.store import read_metrics
    from adaspec.data.datamodule import encode_all
    from adaspec.data.tasks import load_task
    from adaspec.decoding.serving import Served, Serving
    from adaspec.diagnostics import checks
    from adaspec.diagnostics.advice import guarded
    from adaspec.diagnostics.cost_ratio import measure_cost_ratios
    from adaspec.diagnostics.measure import held_out_kl_and_agreement, machine_memory_mb, read_json
    from adaspec.drafts import load_draft
    from adaspec.evaluation.run import draft_name, results_dir
    from adaspec.models.build import freeze, load_model

    layout = paths.of(cfg)
    # what advice about the run is checked against
    settings = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
    require_artefact(layout.target_dir(), "target", "diagnose", layout)
    require_artefact(layout.ref_dir(), "ref", "diagnose", layout)
    target_final = paths.final(layout.target_dir())
    tokenizer = AutoTokenizer.from_pretrained(str(target_final))
    held_out = encode_all(tokenizer, load_task(cfg.task)["test"][: cfg.task.n_val], cfg.task.max_length)
    target = freeze(load_model(target_final))

    verdicts: list[checks.Verdict] = []
    ref_folder = layout.ref_dir()
    ref = freeze(load_model(paths.final(ref_folder)))
    ref_kl, _, n_tokens = held_out_kl_and_agreement(target, ref, held_out, tokenizer.pad_token_id)
    verdicts += guarded(
        [checks.reference_kl(ref_kl, n_tokens), *training_verdicts("ref", ref_folder)],
        artefact_config(ref_folder),
    )
    results = read_json(results_dir(layout, cfg.decode, cfg.eval.name) / "results.json")
    context = max(len(e.input_ids) for e in held_out) + cfg.decode.max_new_tokens
    gamma = int(cfg.decode.gamma)

    trained: dict[str, Any] = {}  # draft name -> (k, its stage folder)
    for k in cfg.eval.draft_ks:
        folder, name = layout.draft_dir(k), f"draft k={paths.format_k(k)}"
        if (paths.final(folder) / "meta.json").is_file():
            require_artefact(folder, "draft", "diagnose", layout, f" k={k}")  # its weights match its hash
            trained[name] = (k, folder)
        else:
            verdicts.append(checks.Verdict(name, "skip", "not trained", "", f'make stage3 ARGS="k={k}"'))
    drafts = {name: load_draft(paths.final(folder)).eval() for name, (_, folder) in trained.items()}
    # c in the evaluation's serving configuration (decode.target_dtype, kv_cache, compile): what decoding pays
    served = Served(copy.deepcopy(target), Serving.of_target(cfg.decode))
    costs = measure_cost_ratios(served, drafts, timing_prompts(held_out, TIMING_PROMPTS))

    per_draft: dict[str, dict[str, Any]] = {}
    for name, (k, folder) in trained.items():
        _, agreement, n = held_out_kl_and_agreement(target, drafts[name].model, held_out, tokenizer.pad_token_id)
        row = (results or {}).get("drafts", {}).get(draft_name(k))
        alpha = row.get("alpha") if row else None
        c = costs[name]
        verdicts += guarded(
            [*training_verdicts(name, folder), checks.draft_agreement(name, agreement, n)],
            artefact_config(folder),
        )
        verdicts += guarded(
            [
                checks.speedup(name, alpha, row.get("speedup_vs_target") if row else None),
                checks.gamma_choice(name, alpha, c, gamma, context),
                checks.larger_draft(name, alpha, c, gamma),
            ],
            settings,
        )
        per_draft[name] = {"alpha": alpha, "gamma": gamma, "cost_ratio": c.as_dict()}
    latest = max(
        trained.values(), key=lambda kf: (paths.final(kf[1]) / "meta.json").stat().st_mtime, default=None
    )
    peak = (
        read_metrics(paths.final(latest[1])).get("peak_memory_mb") if latest else None
    )
    memory_settings = artefact_config(latest[1]) if latest else settings
    verdicts += guarded([checks.memory(peak, machine_memory_mb())], memory_settings)
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
        "drafts": per_draft,
        "verdicts": [v.as_dict() for v in verdicts],
    }
    folder = layout.eval_dir().parent / "diagnose"
    write_report(folder, report)
    log_to_wandb(cfg.logger, layout, report)
    print(markdown(report["verdicts"]))
    if report_curve:
        print("rejection rate by draft position:", {k.split("/")[-1]: round(v, 3) for k, v in curve.items()})
    print(f"[adaspec] diagnose: wrote {folder / 'report.json'} and {folder / 'report.md'}")
    return report


def training_verdicts(name: str, stage_folder: Path) -> list:
    """The schedule (from the artefact's config, checked against the log) and the loss at the end."""
    # imported here, after the config is checked, so a bad command is answered in a second
    from adaspec.diagnostics import checks
    from adaspec.diagnostics.measure import logged, logged_by_step
    from adaspec.diagnostics.schedule import configured_schedule, first_logged_mismatch

    schedule = configured_schedule(paths.final(stage_folder))
    mismatch = first_logged_mismatch(schedule, logged_by_step(stage_folder, "train/lr")) if schedule else None
    return [
        checks.lr_schedule(name, schedule, mismatch),
        checks.loss_still_falling(name, logged(stage_folder, "train/loss")),
    ]


def artefact_config(stage_folder: Path) -> dict[str, Any]:
    """The config a stage artefact records (what its advice is checked against), resolved."""
    path = paths.final(stage_folder) / "config.yaml"
    return OmegaConf.to_container(OmegaConf.load(path), resolve=True) if path.is_file() else {}


def timing_prompts(held_out, n: int) -> list:
    """The prompt part of the first `n` held-out examples (the same for every draft)."""
    import torch  # heavy: imported once the diagnosis runs, not when the command starts

    prompts = []
    for example in held_out[:n]:
        ids = [i for i, label in zip(example.input_ids, example.labels, strict=True) if label == -100]
        prompts.append(torch.tensor([ids or example.input_ids[:8]]))
    return prompts


def write_report(folder: Path, report: dict[str, Any]) -> None:
    write_json_atomically(folder / "report.json", report)
    write_text_atomically(folder / "report.md", markdown(report["verdicts"]) + "\n")


def log_to_wandb(logger: DictConfig, layout: paths.Layout, report: dict[str, Any]) -> None:
    if not wandb_enabled(logger):
        return
    wb = logger.wandb
    import wandb  # slow to import, and only needed when W&B is on

    run = wandb.init(
        project=wb.project,
        entity=wb.entity,
        mode=wb.mode,
        job_type="diagnose",
        dir=str(layout.eval_dir().parent),
        name=f"{layout.task}/{layout.model}/seed{layout.seed}/diagnose",
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


main = hydra_entry(run_diagnosis)  # `python -m adaspec.commands.diagnose`


if __name__ == "__main__":
    main()
