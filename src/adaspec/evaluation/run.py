"""`python -m adaspec.commands.evaluate`: speculative decoding of the target with each trained draft.

For every k in `eval.draft_ks` (the draft at `Layout.draft_dir(k)`; by default AdaSPEC k=0.4 and
the DistillSpec baseline k=1), with `decode.draft_quant=int8` its int8 copy, and every training-free
draft of the `baseline` group (default: prompt lookup), on the first `eval.n_prompts` test prompts:

1. time target-only decoding, our `speculative_generate` with the `decode` settings, and Hugging
   Face assisted generation with a constant gamma (`adaspec.evaluation.benchmark`; skipped, with a note,
   for a draft with a reduced vocabulary, which HF cannot map to the target's ids);
2. report every metric of `decoding.aggregate`, the two wall-clock speed-ups, greedy agreement with
   the target and the task's score (`adaspec.evaluation.summary`, `.scoring`);
3. measure acceptance against gamma (`eval.gammas`; `adaspec.evaluation.replay` when greedy);
4. write `results.json`, `results.md` and two PNG plots to `Layout.eval_dir()/<setting>[-<eval.name>]` (e.g.
   `eval/greedy-g5`), log them to W&B when enabled, and print the table.

Missing artefacts are reported before anything is loaded, naming the `make` command that makes them.
A results folder holds one evaluation (`adaspec.evaluation.identity`): rerunning the same settings on
the same weights is skipped, other settings are refused unless `overwrite=true` or another `eval.name`.
"""

from __future__ import annotations

import copy
import dataclasses
import platform
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import transformers
from omegaconf import DictConfig, OmegaConf
from tqdm import tqdm
from transformers import AutoTokenizer

import adaspec
from adaspec.artefacts import paths
from adaspec.artefacts.rules import require_artefact
from adaspec.artefacts.store import read_meta, read_metrics
from adaspec.data.encoding import prompt_ids, stop_token_id
from adaspec.data.tasks import Example, load_task
from adaspec.decoding import (
    DraftQuant,
    FixedGamma,
    GenerationResult,
    build_gamma_policy,
    speculative_generate,
    target_generate,
)
from adaspec.decoding.quant import can_load_8bit, load_draft_8bit
from adaspec.decoding.serving import DTYPES, Served, Serving, parse_serving
from adaspec.decoding.tree import TreeShape, tree_shape
from adaspec.decoding.tree_shape import is_auto
from adaspec.drafts import Draft, build_baseline, hybrid, load_draft
from adaspec.errors import UserError
from adaspec.evaluation import contention
from adaspec.evaluation.benchmark import Entry, Measurements, benchmark
from adaspec.evaluation.cost import call_costs, expected_speedups, tree_verify_seconds
from adaspec.evaluation.curves import (
    ALPHA_VS_GAMMA_PNG,
    REJECTION_PNG,
    plot_alpha_vs_gamma,
    plot_rejection_curves,
)
from adaspec.evaluation.identity import IDENTITY, evaluation_identity, previous_results
from adaspec.evaluation.replay import replay
from adaspec.evaluation.report import RESULTS_JSON, results_markdown, write_results
from adaspec.evaluation.scoring import task_metric, task_score
from adaspec.evaluation.summary import acceptance_summary, draft_summary, target_summary
from adaspec.evaluation.tree_choice import choose_tree
from adaspec.evaluation.wandb_tables import log_to_wandb
from adaspec.machine import describe_machine, other_cpu
from adaspec.models.build import load_model, n_params
from adaspec.sandbox.isolation import isolation_summary
from adaspec.toolkit import device_for


def setting_name(decode: DictConfig) -> str:
    """Subfolder of one decode setting: `greedy-g5`, `greedy-adaptive-g5`, `t0.7-g5`, ..."""
    mode = "greedy" if decode.temperature == 0 else f"t{decode.temperature:g}"
    if decode.temperature > 0 and decode.get("draft_temperature") is not None:
        mode += f"-dt{decode.draft_temperature:g}"
    policy = str(getattr(decode.policy, "value", decode.policy))
    return f"{mode}{'' if policy == 'fixed' else '-' + policy}-g{decode.gamma}"


# eval.reference: the stage-2 reference's row. It is DistillSpec: forward KL on every token from the drafts'
# initialisation, which stage 3 at k = 1 with the reference's stage settings reproduces bit for bit
REFERENCE = paths.REFERENCE_TAG


def draft_name(k: float, quant: str = "none", tag: str = "") -> str:
    """Row name in results.json: `k0.4`, `k0.4-matched`, `k0.4-int8`; `ref` for the reference."""
    name = REFERENCE if tag == REFERENCE else f"k{paths.format_k(k)}" + (f"-{tag}" if tag else "")
    return name + ("" if quant == "none" else f"-{quant}")


def draft_label(k: float, quant: str = "none", tag: str = "") -> str:
    if tag == REFERENCE:
        return "DistillSpec (the reference)" + ("" if quant == "none" else f" {quant}")
    method = "DistillSpec" if float(k) == 1.0 else "AdaSPEC"
    return (
        f"{method} k={paths.format_k(k)}"
        + (f" ({tag})" if tag else "")
        + ("" if quant == "none" else f" {quant}")
    )


@dataclass(frozen=True)
class EvalSettings:
    """What the evaluation's parts read of the run's config: where its artefacts are, its `decode` and `eval`
    groups, the task, the model config, the seed and the device."""

    layout: paths.Layout
    decode: DictConfig
    eval: DictConfig
    task: DictConfig
    model: DictConfig
    seed: int
    device: torch.device

    @classmethod
    def of(cls, cfg: DictConfig) -> EvalSettings:
        return cls(paths.of(cfg), cfg.decode, cfg.eval, cfg.task, cfg.model, cfg.seed, device_for(cfg.trainer))


def results_dir(layout: paths.Layout, decode: DictConfig, name: str) -> Path:
    """`<eval_dir>/<setting>[-<eval.name>]`, e.g. eval/greedy-g5."""
    return layout.eval_dir() / (setting_name(decode) + (f"-{name}" if name else ""))


def check_artefacts(run: EvalSettings) -> tuple[Path, list[tuple[float, str, Path]]]:
    """The target's `final/` folder and (k, tag, `final/`) of each draft of eval.draft_ks x eval.draft_tags
    (eval.tag_ks: a tag's own ks) and, with eval.reference, of the reference (1.0, "ref", ...); a UserError
    naming the make command if one is missing."""
    layout, options = run.layout, run.eval
    target_meta = require_artefact(layout.target_dir(), "target", "evaluate", layout)

    def from_this_target(folder: Path, what: str, retrain: str, meta: dict) -> Path:
        if meta["upstream"].get("target") != target_meta["weights"]:
            raise UserError(
                f"the {what} {paths.final(folder)} was distilled from another target than "
                f"{paths.final(layout.target_dir())}; retrain it with {retrain}"
            )
        return paths.final(folder)

    drafts: list[tuple[float, str, Path]] = []
    for tag in options.draft_tags:
        for k in options.tag_ks.get(tag, options.draft_ks):
            folder = layout.draft_dir(k, tag, options.tag_data.get(tag))
            args = f" k={paths.format_k(k)}" + (f" stage.tag={tag}" if tag else "")
            meta = require_artefact(folder, "draft", "evaluate", layout, args)
            retrain = f'`make stage3 ARGS="{args.strip()} overwrite=true"` (and stage2 first if the reference is stale too)'
            drafts.append((float(k), tag, from_this_target(folder, "draft", retrain, meta)))
    if options.reference:
        folder = layout.ref_dir()
        meta = require_artefact(folder, "ref", "evaluate", layout)
        drafts.append((1.0, REFERENCE, from_this_target(folder, "reference", "`make stage2` and overwrite=true", meta)))
    if run.decode.draft_quant == DraftQuant.int8 and run.device.type != "cpu" and not can_load_8bit():
        load_draft_8bit(drafts[0][2])  # raises, naming what is missing
    return paths.final(layout.target_dir()), drafts


def identity_of(config: dict, device: torch.device, target_path: Path, draft_paths: list[tuple[float, str, Path]]
                ) -> dict[str, Any]:
    """This evaluation's identity: its settings (the resolved `config`) and the weights hashes of the target and
    each draft."""
    weights = {"target": read_meta(target_path)["weights"]}
    weights.update({draft_name(k, tag=tag): read_meta(path)["weights"] for k, tag, path in draft_paths})
    return evaluation_identity(config, device.type, weights)


def versions() -> dict[str, str]:
    return {
        "adaspec": adaspec.__version__,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "platform": platform.platform(),
    }


def _texts(tokenizer, results: list[GenerationResult]) -> list[str]:
    return [tokenizer.decode(r.tokens, skip_special_tokens=True) for r in results]


def replayer(
    max_new_tokens: int,
    target,
    draft: Draft,
    prompts: list[torch.Tensor],
    target_results: list[GenerationResult],
    eos_token_id: int | None,
    tree: TreeShape | None = None,
) -> Callable[[Any, int], GenerationResult]:
    """`replayed(policy, i)`: the greedy run of `draft` with `policy` on prompt i, replayed exactly from the
    target's greedy output there (for a model draft, one forward per prompt, made here); with `tree`, its tree
    decoding (the policy's gamma caps the tree's depth)."""
    width = draft.verify_width(target.config.vocab_size)
    if tree is None:
        blocks = [draft.greedy_blocks(ids, r.tokens, width) for ids, r in zip(prompts, target_results, strict=True)]
    else:
        runner = hybrid.for_shape(draft, tree)
        blocks = [runner.greedy_tree_blocks(ids, r.tokens, width, tree)
                  for ids, r in zip(prompts, target_results, strict=True)]

    def replayed(policy, i: int) -> GenerationResult:
        return replay(
            target_results[i].tokens,
            blocks[i],
            policy=policy,
            prompt_len=prompts[i].shape[1],
            max_new_tokens=max_new_tokens,
            eos_token_id=eos_token_id,
        )

    return replayed


def acceptance_vs_gamma(
    run: EvalSettings,
    target,
    draft: Draft,
    prompts: list[torch.Tensor],
    measured: list[GenerationResult],
    eos_token_id: int | None,
    replayed: Callable[[Any, int], GenerationResult] | None = None,
    entry: Entry | None = None,
) -> dict[str, Any]:
    """alpha, accept_rate, tau for each fixed gamma of `eval.gammas`.

    Greedy (`replayed` from `replayer`): replayed exactly on every prompt (`replay_mismatches` counts the
    measured prompts where the replay of the configured policy disagrees with the measured blocks, a
    check of the replay: expected 0). Sampling: real runs on the first `eval.gamma_sweep_prompts`.
    """
    decode, gammas = run.decode, [int(g) for g in run.eval.gammas]
    policy = entry.policy if entry is not None and entry.policy is not None else lambda: build_gamma_policy(decode)
    tree = None if entry is None else entry.tree
    if replayed is not None:
        check = sum(replayed(policy(), i).blocks != m.blocks for i, m in enumerate(measured))
        by_gamma = {
            str(g): acceptance_summary([replayed(FixedGamma(g), i) for i in range(len(prompts))], g)
            for g in gammas
        }
        return {"method": "replay", "prompts": len(prompts), "replay_mismatches": check, "by_gamma": by_gamma}
    subset = prompts[: run.eval.gamma_sweep_prompts]
    by_gamma = {}
    for g in gammas if subset else []:
        runs = [
            speculative_generate(
                target,
                draft,
                ids,
                gamma_policy=FixedGamma(g),
                max_new_tokens=decode.max_new_tokens,
                eos_token_id=eos_token_id,
                temperature=decode.temperature,
                generator=torch.Generator(device=ids.device).manual_seed(run.seed + i),
                tree=tree,
                draft_temperature=decode.get("draft_temperature"),
            )
            for i, ids in enumerate(subset)
        ]
        by_gamma[str(g)] = acceptance_summary(runs, g)
    return {"method": "sampled", "prompts": len(subset), "by_gamma": by_gamma}


def summarise(
    run: EvalSettings,
    examples: list[Example],
    tokenizer,
    target,
    drafts: list[Entry],
    prompts: list[torch.Tensor],
    m: Measurements,
    draft_info: dict[str, dict[str, Any]],
    timed: int,
    costs: dict[str, Any],
) -> dict[str, Any]:
    """The results.json content, less the config and versions. `m` timed the first `timed` prompts; the
    target's results cover every prompt (greedy: the others are replayed from them). `costs`: call_costs,
    with which each draft's acceptance against gamma gives its expected speed-up at each gamma."""
    decode, kind = run.decode, run.task.kind
    metric = task_metric(kind)
    greedy = decode.temperature == 0
    eos = stop_token_id(tokenizer, str(run.task.prompt_format))
    scores: dict[tuple[str, ...], float] = {}

    def score(results: list[GenerationResult]) -> float:
        texts = _texts(tokenizer, results)
        if tuple(texts) not in scores:  # identical outputs (greedy) are scored once: MBPP runs code
            scores[tuple(texts)] = task_score(kind, texts, examples)
        return scores[tuple(texts)]

    rows: dict[str, dict[str, Any]] = {}
    for draft in drafts:
        measured = m.speculative[draft.name]  # the timed prompts
        replayed = replayer(decode.max_new_tokens, target, draft.draft, prompts, m.target, eos, draft.tree) \
            if greedy else None
        make_policy = draft.policy or (lambda: build_gamma_policy(decode))
        spec = measured + [replayed(make_policy(), i) for i in range(len(measured), len(prompts))]  # greedy only
        row = {
            **draft_info[draft.name],
            **draft_summary(spec, m.target, m.hf_assisted.get(draft.name), greedy=greedy,
                            gamma=draft.tree.reach if draft.tree else decode.gamma, timed=len(measured),
                            fastest_target=target_only_runs(target, m, timed)[fastest_target_only(target, m, timed)]),
        }
        row[metric] = score(spec)
        row["acceptance_vs_gamma"] = acceptance_vs_gamma(run, target, draft.draft, prompts, measured, eos, replayed,
                                                         draft)
        taus = {g: v["tau"] for g, v in row["acceptance_vs_gamma"]["by_gamma"].items()}
        verify_s = costs["target_verify_s"] if draft.tree is None else \
            {g: costs["tree_verify_s"][draft.tree.name] for g in taus}  # the tree's width, whatever its depth cap
        speedups = expected_speedups(taus, costs["draft_1_s"][draft.name], costs["target_1_s"], verify_s)
        best = max(speedups, key=speedups.get) if speedups else None
        row |= {"expected_speedup_by_gamma": speedups, "best_gamma": best and int(best),
                "expected_speedup_at_best_gamma": speedups.get(best)}
        rows[draft.name] = row
    return {
        "setting": setting_name(decode),
        "task": run.task.name,
        "model": run.model.name,
        "metric": metric,
        "n_prompts": len(prompts),
        "timed_prompts": timed,
        "costs": costs,
        "decode": OmegaConf.to_container(decode, resolve=True, enum_to_str=True),
        "hf_assisted": {
            "num_assistant_tokens": decode.gamma,
            "num_assistant_tokens_schedule": "constant",
            "assistant_confidence_threshold": 0,
            "do_sample": not greedy,
        }
        if run.eval.compare_hf_assisted
        else None,
        "target": {**target_summary(m.target, timed), metric: score(m.target), "parameters": n_params(target.model)},
        "drafts": rows,
        "code_sandbox": isolation_summary() if kind == "code" else None,  # what ran the generated code
    }


def _wall(results: list[GenerationResult]) -> float:
    return sum(r.wall_time_s for r in results)


def target_only_runs(target: Served, m: Measurements, timed: int) -> dict[str, list[GenerationResult]]:
    """The timed target-only runs by serving configuration: the evaluation's own and eval.target_servings'."""
    return {target.serving.name: m.target[:timed], **m.target_only}


def fastest_target_only(target: Served, m: Measurements, timed: int) -> str:
    """The serving configuration whose target-only decoding made the most tokens per second."""
    rates = {name: sum(len(r.tokens) for r in runs) / _wall(runs)
             for name, runs in target_only_runs(target, m, timed).items()}
    return max(rates, key=rates.get)


def serving_summary(target: Served, target_only: dict[str, Served], m: Measurements, timed: int) -> dict[str, Any]:
    """The serving configurations of the run: the target's, each target-only one's tokens/s, the fastest."""
    rates = {name: sum(len(r.tokens) for r in runs) / _wall(runs)
             for name, runs in target_only_runs(target, m, timed).items()}
    return {"target": target.serving.name, "target_only/tokens_per_s": rates,
            "fastest_target_only": fastest_target_only(target, m, timed),
            "compile_seconds": {name: {str(w): v for w, v in served.compile_seconds.items()}
                                for name, served in {target.serving.name: target, **target_only}.items()
                                if served.widths}}


BASELINE_LABELS = {"prompt_lookup": "prompt lookup"}


def trained_entries(
    run: EvalSettings, draft_paths: list[tuple[float, str, Path]], target=None
) -> tuple[list[Entry], dict[str, dict[str, Any]]]:
    """The trained drafts (and their int8 copies with `decode.draft_quant=int8`) as benchmark entries, and
    what results.json records about each. `target`: the model an EAGLE-3 head's replay reads."""
    attn, decode, device = run.model.attn_implementation, run.decode, run.device
    compare_hf = run.eval.compare_hf_assisted
    entries: list[Entry] = []
    info: dict[str, dict[str, Any]] = {}
    for k, tag, path in draft_paths:
        draft = load_draft(path, attn, target=target).to(device).eval()
        draft.model.to(DTYPES[str(decode.draft_dtype)])
        if decode.draft_compile and not draft.compile_steps():
            print(f"[adaspec] evaluate: decode.draft_compile: {draft_name(k, tag=tag)} (a {draft.kind} draft) has no "
                  f"compiled steps; it decodes eager")
        if draft.hf_assisted_kwargs(decode.gamma) is None and compare_hf:
            print(f"[adaspec] evaluate: {draft_name(k, tag=tag)} {draft.hf_assisted_refusal()}, not compared")
        variants = [("none", draft)]
        if decode.draft_quant == DraftQuant.int8:  # CPU: torch dynamic quantisation; GPU: bitsandbytes
            quantised = draft.int8(device, path, attn)
            if quantised is None:
                print(f"[adaspec] evaluate: no int8 copy of {draft_name(k, tag=tag)} (a {draft.kind} draft)")
            else:
                variants.append(("int8", quantised))
        for quant, variant in variants:
            name = draft_name(k, quant, tag)
            entries.append(Entry(name, variant, compare_hf=compare_hf and quant == "none"))
            info[name] = {
                "label": draft_label(k, quant, tag),
                "k": k,
                "tag": tag,
                "draft_quant": quant,
                "path": str(path),
                "parameters": n_params(draft.model),
                "train_seconds": read_metrics(path).get("train_seconds"),  # what each arm cost
                "draft": variant.describe(),
            }
    return entries, info


def with_trees(entries: list[Entry], info: dict[str, dict[str, Any]], main: dict[str, TreeShape | None],
               shapes: list[TreeShape]) -> tuple[list[Entry], dict[str, dict[str, Any]]]:
    """Every entry decoded with its `main` shape (decode.tree, or its choice under auto; None: chains), then a row
    per entry and shape of `shapes` (eval.trees), named <entry>@<shape>, its trees no deeper than the shape (HF has
    no trees: not compared)."""
    out = [dataclasses.replace(e, tree=main[e.name], compare_hf=e.compare_hf and main[e.name] is None)
           for e in entries]
    info = {name: {**row, "tree": main[name] and main[name].name} for name, row in info.items()}
    for shape in shapes:
        for entry in entries:
            name = f"{entry.name}@{shape.name}"
            out.append(Entry(name, entry.draft, compare_hf=False, policy=lambda d=shape.reach: FixedGamma(d),
                             tree=shape))
            info[name] = {**info[entry.name], "label": f"{info[entry.name]['label']}, tree {shape.name}",
                          "tree": shape.name}
    return out, info


def chosen_trees(run: EvalSettings, target: Served, entries: list[Entry], tokenizer, eos: int | None,
                 progress: bool) -> tuple[dict[str, TreeShape | None], dict[str, Any]]:
    """Each entry's shape under decode.tree (a shape or off: the same for all), and under auto each entry's choice
    with the table it was chosen from (`adaspec.evaluation.tree_choice`; {} otherwise)."""
    setting = run.decode.get("tree", "off")
    if not is_auto(setting):
        return {e.name: tree_shape(setting) for e in entries}, {}
    wanted = run.eval.tree_calibration_prompts
    held_out = load_task(run.task)["test"][run.eval.n_prompts: run.eval.n_prompts + wanted]
    if not held_out:
        raise UserError(f"decode.tree=auto measures on the eval.tree_calibration_prompts={wanted} test prompts after "
                        f"the first eval.n_prompts={run.eval.n_prompts}, and the task has none left: lower "
                        f"eval.n_prompts or give decode.tree a shape")
    fmt = str(run.task.prompt_format)
    prompts = [torch.tensor([prompt_ids(tokenizer, e.prompt, fmt)], device=target.device) for e in held_out]
    max_new = run.decode.max_new_tokens
    outputs = [target_generate(target, ids, max_new_tokens=max_new, eos_token_id=eos).tokens for ids in prompts]
    shapes = [TreeShape.parse(str(name)) for name in run.eval.tree_candidates]
    target_s: dict[tuple, float] = {}  # the target's calls, timed once for every draft
    chosen, tables = {}, {}
    for entry in tqdm(entries, desc="decode.tree=auto", unit="draft", disable=not progress):
        chosen[entry.name], tables[entry.name] = choose_tree(
            target, entry.draft, prompts, outputs, gamma=int(run.decode.gamma), shapes=shapes,
            max_new_tokens=max_new, eos_token_id=eos, target_s=target_s, temperature=float(run.decode.temperature),
            seed=int(run.seed), draft_temperature=run.decode.get("draft_temperature"))
    return chosen, tables


def run_evaluation(cfg: DictConfig, progress: bool = True) -> dict[str, Any]:
    """Evaluate every draft of `eval.draft_ks`; writes the results folder and returns results.json's content
    (the existing one, untouched, when the folder already holds this evaluation). `cfg` is validated
    where it was composed (the entry point, the paper runner)."""
    run = EvalSettings.of(cfg)
    target_path, draft_paths = check_artefacts(run)  # before anything is loaded
    folder = results_dir(run.layout, cfg.decode, cfg.eval.name)
    config = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
    identity = identity_of(config, run.device, target_path, draft_paths)
    previous = previous_results(folder / RESULTS_JSON, identity, cfg.overwrite)  # refuses other settings
    if previous is not None:
        print(
            f"[adaspec] evaluate: {folder / RESULTS_JSON} holds this evaluation (same settings and weights), "
            f"skipping; pass overwrite=true to rerun it"
        )
        elsewhere = other_cpu(previous.get("machine"))
        if elsewhere:
            print(f"[adaspec] evaluate: NOTE: {folder / RESULTS_JSON} was {elsewhere} (overwrite=true times it here)")
        return previous
    device = run.device
    if cfg.eval.num_threads > 0:
        torch.set_num_threads(cfg.eval.num_threads)
    examples = load_task(cfg.task)["test"][: cfg.eval.n_prompts]
    tokenizer = AutoTokenizer.from_pretrained(str(target_path))
    attn = cfg.model.attn_implementation
    model = load_model(target_path, attn).to(device).eval()
    serving = Serving.of_target(cfg.decode)
    others = {parse_serving(name, "eval.target_servings") for name in cfg.eval.target_servings} - {serving}
    target_only = {other.name: Served(copy.deepcopy(model), other) for other in sorted(others, key=str)}
    target = Served(model, serving)

    drafts, draft_info = trained_entries(run, draft_paths, target=model)
    for name, spec in cfg.baseline.items():  # training-free drafts: a row each, beside the trained ones
        baseline = build_baseline(spec)
        drafts.append(Entry(name, baseline, compare_hf=cfg.eval.compare_hf_assisted))
        draft_info[name] = {"label": BASELINE_LABELS.get(name, name), "k": None, "tag": "", "draft_quant": "none",
                            "path": None, "parameters": 0, "train_seconds": 0.0, "draft": baseline.describe()}

    prompt_format = str(cfg.task.prompt_format)  # chat: the tokenizer's template, as in training
    prompts = [torch.tensor([prompt_ids(tokenizer, e.prompt, prompt_format)], device=device) for e in examples]
    decode = cfg.decode
    timed = len(prompts) if decode.temperature > 0 or cfg.eval.timed_prompts is None else min(cfg.eval.timed_prompts, len(prompts))
    eos = stop_token_id(tokenizer, prompt_format)
    main, tree_choice = chosen_trees(run, target, drafts, tokenizer, eos, progress)
    drafts, draft_info = with_trees(drafts, draft_info, main, [TreeShape.parse(str(name)) for name in cfg.eval.trees])
    watch = contention.Watch()  # marks the timings below when another job shared the cores
    measurements = benchmark(
        target,
        drafts,
        prompts[:timed],
        make_policy=lambda: build_gamma_policy(decode),
        gamma=decode.gamma,
        max_new_tokens=decode.max_new_tokens,
        temperature=decode.temperature,
        eos_token_id=eos,
        pad_token_id=tokenizer.pad_token_id,
        seed=cfg.seed,
        progress=progress,
        target_only=target_only,
        warm_widths=sorted({1, decode.gamma + 1, *(g + 1 for g in cfg.eval.gammas)}),
        draft_temperature=decode.get("draft_temperature"),
    )
    untimed = prompts[timed:]  # greedy: the target's output there is all the replay needs
    measurements.target += [
        target_generate(target, ids, max_new_tokens=decode.max_new_tokens, eos_token_id=eos)
        for ids in tqdm(untimed, desc="target (untimed prompts)", unit="prompt", disable=not progress or not untimed)
    ]
    costs = call_costs(target, {d.name: d.draft for d in drafts}, prompts[0], list(cfg.eval.gammas))
    costs["tree_verify_s"] = {shape.name: tree_verify_seconds(target, prompts[0], shape.nodes)
                              for shape in {d.tree for d in drafts if d.tree is not None}}
    busy = watch.verdict()
    if busy["contended"]:
        print(f"[adaspec] evaluate: WARNING: {busy['why']}: the wall-clock figures (tokens/s, speed-ups, call "
              f"costs) are not this machine's alone; acceptance is unaffected. Rerun alone with overwrite=true")
    results = summarise(run, examples, tokenizer, target, drafts, prompts, measurements, draft_info, timed, costs)
    results["serving"] = serving_summary(target, target_only, measurements, timed)
    results["contention"] = busy
    results["tree_choice"] = tree_choice  # decode.tree=auto: each draft's candidates and what won
    results["device"] = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    results["torch_threads"] = torch.get_num_threads()
    results["machine"] = describe_machine()
    results["config"] = config
    results["versions"] = versions()
    results[IDENTITY] = identity

    images = {
        "reject_rate_curve": plot_rejection_curves(results, folder / REJECTION_PNG),
        "alpha_vs_gamma": plot_alpha_vs_gamma(results, folder / ALPHA_VS_GAMMA_PNG),
    }
    json_path, _ = write_results(folder, results)
    log_to_wandb(cfg.logger, run.layout, results, folder, images)
    print(results_markdown(results))
    print(f"[adaspec] evaluate: wrote {json_path}, {folder / 'results.md'} and the plots in {folder}")
    return results
