"""`make bench` (`python -m adaspec.commands.bench`): decoding speed and training-step cost, written as JSON.

    python -m adaspec.commands.bench [--name arith] [--models tiny,small] [--prompts 20] [--gamma 5]
                            [--max-new-tokens 96] [--no-training] [--train-steps 10] [--threads 2]
                            [hydra overrides for every config it composes ...]

Like `make paper` and `make gpu-check`, it composes several configs, so its own settings are flags and
`key=value` arguments are Hydra overrides (the single-config commands are Hydra entry points).

Decoding, for each model pair (`--models`, default tiny and small; the arith artefacts are
trained first when absent): target-only greedy decoding, our speculative decoding and Hugging Face
assisted generation, all in one process on the same prompts (`adaspec.evaluation.benchmark`), with
the measured alpha, the measured draft/target cost ratio c of one cached single-token forward, and
the theoretical speed-up (1 - alpha^(gamma+1)) / ((1 - alpha)(gamma c + 1)) of Leviathan et al.; and each
training-free draft of the `baseline` group (default: prompt lookup) under the same gamma, as
`<name>/alpha`, `<name>/tokens_per_s` and `<name>/speedup_vs_target`.

Training (unless `--no-training`): stage-3 optimiser steps per second with the live target, with the
exact teacher cache, with the cache and the cached reference KL, and a plain cross-entropy step of
the draft alone, on the same batches; the cost of a k-sweep of 5 drafts follows from those step
times plus the one-off cache build, which is timed too.

Results go to `bench/results/<name>.json` (atomically) and a table is printed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

from adaspec.artefacts import paths
from adaspec.diagnostics.checks import expected_speedup
from adaspec.errors import UserError, reported_as_one_line
from adaspec.machine import describe_machine
from adaspec.toolkit import (
    checked_config,
    markdown_table,
    no_tokenizer_parallelism,
    tokenize_prompts,
    write_json_atomically,
)

RESULTS = Path("bench/results")


def ensure_trained(base: list[str], k: float) -> None:
    """Train target, reference and the k draft with the default settings where they are missing."""
    # imported after the arguments are parsed, so --help and argument errors answer at once
    from adaspec.training.pipeline import run_stage

    for stage in ("stage=target", "stage=ref", "stage=draft"):
        run_stage(checked_config(*base, stage, f"k={k}", "trainer.enable_progress_bar=false"))


def bench_decoding(model: str, overrides: list[str], n_prompts: int, gamma: int, max_new_tokens: int) -> dict[str, Any]:
    # imported after the arguments are parsed, so --help and argument errors answer at once
    from transformers import AutoTokenizer

    from adaspec.data.tasks import load_task
    from adaspec.decoding import FixedGamma
    from adaspec.drafts import build_baseline, load_draft
    from adaspec.evaluation.benchmark import Entry, benchmark
    from adaspec.evaluation.cost import cost_ratio
    from adaspec.evaluation.summary import draft_summary, target_summary
    from adaspec.models.build import load_model, n_params

    base = [f"model={model}", *overrides]
    k = 0.4
    ensure_trained(base, k)
    cfg = checked_config(*base, "stage=draft", f"k={k}")
    layout = paths.of(cfg)
    tokenizer = AutoTokenizer.from_pretrained(str(paths.final(layout.target_dir())))
    target = load_model(paths.final(layout.target_dir())).eval()
    draft = load_draft(paths.final(layout.draft_dir(k)), target=target).eval()
    baselines = {name: build_baseline(spec) for name, spec in cfg.baseline.items()}
    examples = load_task(cfg.task)["test"][:n_prompts]
    prompts = tokenize_prompts(tokenizer, [e.prompt for e in examples])
    entries = [Entry("draft", draft), *(Entry(name, b) for name, b in baselines.items())]
    m = benchmark(
        target, entries, prompts, make_policy=lambda: FixedGamma(gamma), gamma=gamma,
        max_new_tokens=max_new_tokens, temperature=0.0, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    ours = draft_summary(m.speculative["draft"], m.target, m.hf_assisted["draft"], gamma=gamma, greedy=True)
    c = cost_ratio(draft, target, prompts[0])
    theory = expected_speedup(ours["alpha"], gamma, c)
    baseline_rows = {}
    for name in baselines:
        row = draft_summary(m.speculative[name], m.target, m.hf_assisted.get(name), gamma=gamma, greedy=True)
        baseline_rows |= {f"{name}/{key}": row[key] for key in ("alpha", "tokens_per_s", "speedup_vs_target")}
    return {
        **baseline_rows,
        "model": model,
        "k": k,
        "gamma": gamma,
        "n_prompts": len(prompts),
        "max_new_tokens": max_new_tokens,
        "target_parameters": n_params(target),
        "draft_parameters": n_params(draft.model),
        "target_only/tokens_per_s": target_summary(m.target)["tokens_per_s"],
        "speculative/tokens_per_s": ours["tokens_per_s"],
        "hf_assisted/tokens_per_s": ours["hf_assisted/tokens_per_s"],
        "speedup_vs_target": ours["speedup_vs_target"],
        "speedup_vs_hf_assisted": ours["speedup_vs_hf_assisted"],
        "alpha": ours["alpha"],
        "accept_rate": ours["accept_rate"],
        "tau": ours["tau"],
        "cost_ratio_c": c,
        "theoretical_speedup": theory,
        "speedup_share_of_theory": ours["speedup_vs_target"] / theory,
        "greedy_mismatches": ours["greedy_mismatches"],
    }


def _step_seconds(module, batches: list[dict[str, torch.Tensor]], warmup: int = 2) -> float:
    """Median seconds of forward + backward + AdamW step of `module.loss` over `batches`."""
    optimizer = torch.optim.AdamW(module.student.parameters(), lr=1e-4)
    times = []
    for i, batch in enumerate(batches):
        start = time.perf_counter()
        loss, _ = module.loss(batch)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if i >= warmup:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def bench_training(model: str, overrides: list[str], n_steps: int) -> dict[str, Any]:
    """Stage-3 step cost: live target vs teacher cache vs cache + cached reference KL vs plain CE."""
    # imported after the arguments are parsed, so --help and argument errors answer at once
    from transformers import AutoTokenizer

    from adaspec.data.datamodule import TaskDataModule
    from adaspec.data.tasks import load_task
    from adaspec.distill.cache_build import build_cache
    from adaspec.stages import STAGE_MODULES, stage_module
    from adaspec.stages.stage_run import StageRun
    from adaspec.stages.target import TargetFinetune

    base = [f"model={model}", *overrides, "stage=draft", "k=0.4", "stage.monitor_every_n_steps=0"]
    ensure_trained([f"model={model}", *overrides], 0.4)
    cfg_live = checked_config(*base)
    tokenizer = AutoTokenizer.from_pretrained(str(paths.final(paths.of(cfg_live).target_dir())))
    data = TaskDataModule(tokenizer, load_task(cfg_live.task), batch_size=cfg_live.stage.batch_size,
                          max_length=cfg_live.task.max_length, n_val=cfg_live.task.n_val, seed=0)
    batches = [b for _, b in zip(range(n_steps + 2), data.train_dataloader(), strict=False)]

    started = time.perf_counter()
    build_cache(checked_config(*base, "distill.teacher=cache", "overwrite=true"))
    cache_build_s = time.perf_counter() - started

    results: dict[str, Any] = {"model": model, "batch_size": cfg_live.stage.batch_size, "steps_timed": n_steps,
                               "cache_build_s": cache_build_s}
    variants = {
        "live": [],
        "cached": ["distill.teacher=cache"],
        "cached_ref_kl": ["distill.teacher=cache", "distill.cache_ref_kl=true"],
    }
    for name, extra in variants.items():
        started = time.perf_counter()  # for cached_ref_kl this includes the one-off reference-KL pass
        cfg = checked_config(*base, *extra, "overwrite=true")
        run = StageRun.of(cfg)
        module = stage_module(run).build(run, tokenizer, data)
        results[f"{name}/setup_s"] = time.perf_counter() - started
        module.student.train()
        results[f"{name}/step_s"] = _step_seconds(module, batches)
        if torch.cuda.is_available():
            results[f"{name}/peak_memory_mb"] = torch.cuda.max_memory_allocated() / 2**20
    draft = STAGE_MODULES["draft"].build(StageRun.of(cfg_live), tokenizer, data).student.train()
    results["plain_ce/step_s"] = _step_seconds(TargetFinetune(draft, cfg_live.stage), batches)
    for name in variants:
        results[f"{name}/steps_per_s"] = 1 / results[f"{name}/step_s"]
        results[f"{name}/cost_vs_plain_ce"] = results[f"{name}/step_s"] / results["plain_ce/step_s"]
    steps = len(data.train_dataloader()) * cfg_live.stage.max_epochs
    sweep_live = 5 * steps * results["live/step_s"]
    sweep_cached = cache_build_s + results["cached_ref_kl/setup_s"] + 5 * steps * results["cached_ref_kl/step_s"]
    results.update({"sweep5/steps_each": steps, "sweep5/live_s": sweep_live, "sweep5/cached_s": sweep_cached,
                    "sweep5/speedup": sweep_live / sweep_cached})
    return results


DECODING_COLUMNS = ["model", "alpha", "cost_ratio_c", "target_only/tokens_per_s", "speculative/tokens_per_s",
                    "hf_assisted/tokens_per_s", "speedup_vs_target", "speedup_vs_hf_assisted", "theoretical_speedup",
                    "speedup_share_of_theory"]
TRAINING_COLUMNS = ["model", "live/step_s", "cached/step_s", "cached_ref_kl/step_s", "plain_ce/step_s",
                    "cached_ref_kl/cost_vs_plain_ce", "sweep5/speedup"]


def table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    return markdown_table(columns, [[r.get(c) for c in columns] for r in rows], cell=lambda v: f"{v:.3g}"
                          if isinstance(v, float) else str(v))


def parse_args(argv: list[str]) -> argparse.Namespace:
    """Flags for the benchmark's own settings, then Hydra overrides for the models' config (as `make paper`
    and `make gpu-check` take them)."""
    parser = argparse.ArgumentParser(prog="python -m adaspec.commands.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--name", default="arith", help="results file bench/results/<name>.json")
    parser.add_argument("--models", type=lambda s: s.split(","), default=["tiny", "small"],
                        help="comma-separated model configs, e.g. tiny,small")
    parser.add_argument("--prompts", type=int, default=20, help="test prompts to decode")
    parser.add_argument("--gamma", type=int, default=5, help="draft tokens per block (fixed)")
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--no-training", dest="training", action="store_false", help="skip the stage-3 step cost")
    parser.add_argument("--train-steps", type=int, default=10, help="timed stage-3 steps per variant")
    parser.add_argument("--threads", type=int, default=2, help="torch threads")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. task.arith.n_train=1000 stage.max_epochs=1")
    args = parser.parse_args(argv)
    for override in args.overrides:  # the key=value form of these options, which bench took before
        key = override.partition("=")[0]
        if key in vars(args) and key != "overrides":
            flag = "--no-training" if key == "training" else f"--{key.replace('_', '-')} VALUE"
            raise UserError(f"bench argument {override!r}: bench's own settings are flags, use {flag} "
                            f"(see python -m adaspec.commands.bench --help); key=value arguments are Hydra overrides")
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    no_tokenizer_parallelism()
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    for model in args.models:  # every configuration bench will compose, checked before anything runs
        checked_config(f"model={model}", *args.overrides, f"gamma={args.gamma}")
    torch.set_num_threads(args.threads)
    payload: dict[str, Any] = {
        "name": args.name,
        "machine": describe_machine(),
        "command": "python -m adaspec.commands.bench " + " ".join(argv),
        "decoding": [],
        "training": [],
    }
    out = RESULTS / f"{args.name}.json"
    for model in args.models:
        payload["decoding"].append(
            bench_decoding(model, args.overrides, args.prompts, args.gamma, args.max_new_tokens)
        )
        write_json_atomically(out, payload, sort_keys=True)  # keep what is measured if a later model fails
    if args.training:
        payload["training"].append(bench_training(args.models[-1], args.overrides, args.train_steps))
        write_json_atomically(out, payload, sort_keys=True)
    print(table(payload["decoding"], DECODING_COLUMNS))
    if payload["training"]:
        print(table(payload["training"], TRAINING_COLUMNS))
    print(f"[adaspec] bench: wrote {out}")
    return payload


if __name__ == "__main__":
    with reported_as_one_line():
        main()
