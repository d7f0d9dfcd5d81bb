"""`make bench-real` (`python -m adaspec.commands.bench_real`): speed on the real target, written as JSON.

    python -m adaspec.commands.bench_real [--name smollm2] [--prompts 10] [--max-new-tokens 128]
                                 [--gammas 1,2,3,4,5,6,8] [--temperatures 0,1] [--k 0.4] [--threads 2]
                                 [--serving bfloat16-compiled] [--servings float32,bfloat16]
                                 [--draft-dtype float32] [--draft [NAME=]FOLDER ... | --no-trained] [--no-adaptive]
                                 [hydra overrides naming the trained pair, as for stages 2-3 ...]

Target-only decoding and the project's speculative decoding with the trained draft of `--k`, for every
fixed gamma of `--gammas` and the adaptive policy, greedy and sampled (`--temperatures`), one prompt at a
time, all methods interleaved per prompt in one process (slow drifts of the machine hit them alike; one
untimed warm-up first). With the measured alpha of each run and the measured seconds of the draft's and
the target's forward calls (one cached token, and gamma + 1 tokens for the target's verification) it
gives the expected speed-up: a block proposes gamma tokens (gamma draft calls), is verified in one target
call and emits (1 - alpha^(gamma+1)) / (1 - alpha) tokens on average, which target-only decoding makes in
as many target calls. `share_of_expected` is the measured speed-up over it.

The training-free drafts of the `baseline` config group (default: prompt lookup) run under the same
policies, as rows of their own (`draft` names the draft of a row), so every table carries the baseline a
trained draft must beat.

Serving (`adaspec.decoding.serving`): speculative decoding runs the target in `--serving` (default: the
config's `decode.target_dtype`, `decode.kv_cache`, `decode.compile`) and the trained draft in `--draft-dtype`;
target-only decoding runs in that configuration and in every one of `--servings`, interleaved per prompt. Every
`speedup_vs_target` is against the FASTEST target-only configuration of the run (`fastest_target_only` names
it); `speedup_vs_same_serving` is against target-only decoding in the speculative run's own configuration.
Compiled targets compile every step width the run needs first; `compile_seconds` records the cost, which no
figure includes. Greedy rows count the prompts whose output differs from target-only decoding in the same
configuration (`greedy_mismatches`) and describe each (`greedy_mismatch_details`: position, the two tokens,
the target's logit margin between them; `adaspec.decoding.exactness`). `speedup_vs_target_95` is the
spread of that speed-up over the prompts: a 95 % bootstrap interval, each resample drawing the same prompts for
the draft and the fastest target-only runs. `alpha_95` is alpha's 95 % bootstrap interval over the prompts (each
resample pools its prompts' blocks as alpha does), from `accepted_by_prompt` and `rejected_by_prompt` (per prompt:
accepted draft tokens, blocks with a rejection), which the row keeps so that rows can be pooled later.

HF assisted generation (constant schedule, confidence threshold off) runs beside ours at every fixed gamma
when HF can run the draft, on the same model in the same dtype (eager: HF's assisted generation takes
no static cache); a draft with a reduced vocabulary (model.draft_vocab_size) cannot be run there,
and the results say so instead of timing it. `--draft FOLDER` benches any finished draft or reference
instead of draft-k<k>; repeated (`--draft h128=F1 --draft head=F2`), it benches several drafts against the
same target-only runs, a row set per NAME (default: the stage folder's name; one unnamed draft is `trained`).

`--draft-group capacity [--seed 0] [--ks 0.4,1]` benches every finished draft of the capacity experiment's seed
(`adaspec.paper.draft_groups`: each independent size's forward-KL draft at those k, and its EAGLE-3 heads, else
make demo-real's) as its serving comparison did: it stands for `--name capacity-seed<s>-g<gammas> --prompts 40
--gammas 3 --temperatures 0,1 --no-adaptive --serving bfloat16-compiled --servings
float32-compiled,bfloat16-compiled-w2 --draft NAME=FOLDER ...` before the other options given (which win) and
`paper=smollm2_gsm8k_capacity seed=<s> 'baseline=[prompt_lookup]'` after the overrides given (prompt lookup as a
row of its own: the paper configs empty the baseline group). Train its drafts with `python -m
adaspec.commands.paper --tasks smollm2_gsm8k_capacity_h128 ... --stages target,cache,pretrain_draft,ref,draft
--arms a --ks 0.4,1`.

`--vllm` adds greedy rows of vLLM's CPU build serving the same target, alone and with the first trained EAGLE-3
head (exported as `make export` does, without the embedding copy), in float32 and bfloat16, one request at a time
with the same prompt ids (`adaspec.vllm_serving`; its virtualenv is built on first use). vLLM runs in processes of
its own before the project's rows, compiled as its CPU backend compiles by default, and its rows are against the
same fastest target-only run, with the same paired interval.

Results go to `bench/results/<name>.json` (atomically, after every temperature) and a table is printed.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import math
import random
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

from adaspec.artefacts import paths
from adaspec.decoding.tree_shape import TreeShape
from adaspec.errors import UserError, reported_as_one_line
from adaspec.machine import describe_machine
from adaspec.paper.draft_groups import DRAFT_GROUPS, capacity_drafts, capacity_run, capacity_sizes
from adaspec.paper.plan import CAPACITY_GROUP
from adaspec.paper.step_filter import parse_ks
from adaspec.toolkit import checked_config, markdown_table, no_tokenizer_parallelism, write_json_atomically

RESULTS = Path("bench/results")


def expected_speedup(alpha: float, gamma: float, draft_s: float, verify_s: float, target_s: float) -> float:
    """Target-only seconds for a block's expected tokens over the block's seconds (module docstring)."""
    tokens = gamma + 1 if alpha >= 1 else (1 - alpha ** (gamma + 1)) / (1 - alpha)
    return tokens * target_s / (gamma * draft_s + verify_s)


def tokens_per_s(results) -> float:
    return sum(len(r.tokens) for r in results) / sum(r.wall_time_s for r in results)


def bootstrap_95(n: int, statistic, resamples: int = 2000, seed: int = 0) -> list[float]:
    """95 % percentile-bootstrap interval of `statistic(picks)` over `resamples` draws of n prompt indices with
    replacement (seeded: the same interval every time)."""
    draw = random.Random(seed)
    values = sorted(statistic([draw.randrange(n) for _ in range(n)]) for _ in range(resamples))
    return [values[int(0.025 * resamples)], values[int(0.975 * resamples) - 1]]


def speedup_interval(results, baseline, resamples: int = 2000, seed: int = 0) -> list[float]:
    """95 % percentile-bootstrap interval of tokens_per_s(results) / tokens_per_s(baseline) over the prompts,
    resampled in pairs (prompt i of both lists, timed side by side): how much the ratio rests on a few prompts."""
    return bootstrap_95(len(results), lambda picks: tokens_per_s([results[i] for i in picks])
                        / tokens_per_s([baseline[i] for i in picks]), resamples, seed)


def judged_by_prompt(results) -> tuple[list[int], list[int]]:
    """Per prompt, the accepted draft tokens and the blocks with a rejection: alpha's numerator and the rest of
    its denominator (`adaspec.decoding.stats.aggregate`)."""
    return ([sum(b.accepted for b in r.blocks) for r in results],
            [sum(b.first_reject is not None for b in r.blocks) for r in results])


def pooled_alpha(accepted: list[int], rejected: list[int]) -> float:
    """Alpha of the prompts whose counts these are (`judged_by_prompt`), pooled as `aggregate` pools blocks."""
    judged = sum(accepted) + sum(rejected)
    return sum(accepted) / judged if judged else math.nan


def picked_alpha(accepted: list[int], rejected: list[int], picks: list[int]) -> float:
    """`pooled_alpha` of the prompts at `picks` (a bootstrap resample's indices, repeats counted)."""
    return pooled_alpha([accepted[i] for i in picks], [rejected[i] for i in picks])


def alpha_interval(accepted: list[int], rejected: list[int], resamples: int = 2000, seed: int = 0) -> list[float]:
    """95 % percentile-bootstrap interval of alpha (pooled over the prompts, as the row's) over the prompts: how
    much of an alpha is the prompts drawn rather than the draft."""
    return bootstrap_95(len(accepted), lambda picks: picked_alpha(accepted, rejected, picks), resamples, seed)


def run_temperature(target, drafts, prompts, stop, policies, temperature, max_new_tokens, costs, progress=True,
                    pad_id=None, target_only=None, warm_widths=(), trees=None, vllm_runs=None, draft_temperatures=()):
    """Every draft (`drafts`: name -> Draft) under every policy against target-only at one temperature; a row
    per draft and policy, and per draft and tree shape (`trees`: row name -> TreeShape, decoded with trees no
    deeper than the shape). At temperature > 0 each of those again per `draft_temperatures` (the draft proposing
    at that temperature: policy `<policy>@dt<value>`). Where HF can run a draft it also runs HF assisted generation at every fixed gamma
    (`hf_assisted/*` in its row). `vllm_runs` ({(draft, policy): (results, vLLM's counters)}, `vllm_rows`) add
    a row each, against the same fastest target-only run."""
    # imported here as in main: --help and argument errors answer before torch's model stack loads
    from adaspec.decoding import FixedGamma, aggregate
    from adaspec.decoding.exactness import first_divergence
    from adaspec.evaluation.benchmark import Entry, benchmark

    entries = [
        Entry(f"{draft_name}/{name}", draft, compare_hf=name.startswith("fixed-"), policy=policy,
              hf_gamma=int(name.split("-")[1]) if name.startswith("fixed-") else None)
        for draft_name, draft in drafts.items()
        for name, policy in policies.items()
    ] + [
        Entry(f"{draft_name}/{name}", draft, compare_hf=False, policy=lambda d=shape.reach: FixedGamma(d), tree=shape)
        for draft_name, draft in drafts.items()
        for name, shape in (trees or {}).items()
        if not shape.sample or draft.draws_proposals  # else the plain shape's row again, to the digit
    ]
    entries += [dataclasses.replace(e, name=f"{e.name}@dt{t:g}", compare_hf=False, draft_temperature=t)
                for t in (draft_temperatures if temperature > 0 else ()) for e in list(entries)]
    first = entries[0]  # every entry names its own policy and HF gamma: benchmark's defaults are not used
    m = benchmark(target, entries, prompts, make_policy=first.policy, gamma=first.hf_gamma or 1,
                  max_new_tokens=max_new_tokens, temperature=temperature, eos_token_id=stop, pad_token_id=pad_id,
                  seed=0, progress=progress, desc=f"bench T={temperature:g}", target_only=target_only,
                  warm_widths=warm_widths)
    own = target.serving.name
    target_runs = {own: m.target} | m.target_only
    rates = {name: tokens_per_s(results) for name, results in target_runs.items()}
    fastest = max(rates, key=rates.get)

    def mismatches(results) -> int | None:
        return sum(r.tokens != b.tokens for r, b in zip(results, m.target, strict=True)) if temperature == 0 else None

    def mismatch_details(results) -> list[dict] | None:
        if temperature != 0:
            return None
        return [{"prompt": i, **first_divergence(target, prompts[i], b.tokens, r.tokens)}
                for i, (r, b) in enumerate(zip(results, m.target, strict=True)) if r.tokens != b.tokens]

    draft_temperature = {e.name: e.draft_temperature for e in entries}
    rows = []
    for entry_name, results in m.speculative.items():
        draft_name, policy = entry_name.split("/")
        name = policy.partition("@dt")[0]  # the chain's or the tree's, which the costs are keyed by
        stats = aggregate(results, max_gamma=8)
        proposed = [b.proposed for r in results for b in r.blocks if b.proposed]
        gamma = statistics.mean(proposed) if proposed else 0
        draft_s = costs["draft_1_s"][draft_name]
        if name.startswith("tree-"):  # the measured tokens per block over a block's calls: depth draft steps, one tree
            expected = stats["tau"] * costs["target_1_s"] / (gamma * draft_s + costs["tree_verify_s"][name])
        else:
            verify_s = costs["target_verify_s"].get(round(gamma), costs["target_1_s"])
            expected = expected_speedup(stats["alpha"], gamma, draft_s, verify_s, costs["target_1_s"])
        rate = tokens_per_s(results)
        accepted, rejected = judged_by_prompt(results)
        hf_row = {}
        if entry_name in m.hf_assisted:
            hf = m.hf_assisted[entry_name]
            hf_row = {"hf_assisted/tokens_per_s": tokens_per_s(hf),
                      "speedup_vs_hf_assisted": rate / tokens_per_s(hf),
                      "hf_assisted/greedy_mismatches": mismatches(hf)}
        rows.append({
            **hf_row,
            "temperature": temperature, "draft": draft_name, "policy": policy, "mean_gamma": gamma,
            "draft_temperature": draft_temperature[entry_name],
            "alpha": stats["alpha"], "alpha_95": alpha_interval(accepted, rejected),
            "accepted_by_prompt": accepted, "rejected_by_prompt": rejected,
            "accept_rate": stats["accept_rate"], "tau": stats["tau"],
            "acceptance_length": stats["acceptance_length"],
            "accept_at_depth": [None if math.isnan(v) else v  # None: no block reached that depth
                                for v in (stats[f"accept_at_depth/{i}"] for i in range(1, 9))],
            "tokens_per_s": rate, "target_only/tokens_per_s": rates[fastest],
            "fastest_target_only": fastest, "target_only_by_serving/tokens_per_s": rates, "serving": own,
            "speedup_vs_target": rate / rates[fastest], "speedup_vs_target_95": speedup_interval(results, target_runs[fastest]),
            "speedup_vs_same_serving": rate / rates[own],
            "expected_speedup": expected, "share_of_expected": rate / rates[own] / expected,
            "greedy_mismatches": mismatches(results), "greedy_mismatch_details": mismatch_details(results),
        })
    for (draft_name, policy), (results, spec) in (vllm_runs or {}).items():
        rate = tokens_per_s(results)
        rows.append({
            "temperature": temperature, "draft": draft_name, "policy": policy, "tokens_per_s": rate,
            "target_only/tokens_per_s": rates[fastest], "fastest_target_only": fastest,
            "target_only_by_serving/tokens_per_s": rates, "serving": draft_name,
            "speedup_vs_target": rate / rates[fastest],
            "speedup_vs_target_95": speedup_interval(results, target_runs[fastest]),
            "greedy_mismatches": mismatches(results), "vllm_counts": spec,
            "acceptance_length": None if spec is None else 1 + spec["accepted"] / max(spec["drafts"], 1),
        })
    return rows


def vllm_rows(target_folder: Path, draft_folders: dict[str, Path], prompts, stop: int, max_new_tokens: int,
              gammas: list[int]) -> dict[tuple[str, str], tuple[list, dict | None]]:
    """vLLM serving the target alone and with the first trained EAGLE-3 head (exported without its embedding), greedy,
    in float32 and bfloat16: {(`vllm-<dtype>`, `plain` | `eagle3 fixed-<gamma>`): (results, vLLM's counters)}."""
    # the export and vLLM's virtualenv load only with --vllm
    from adaspec.export.exporter import export_draft, format_of
    from adaspec.vllm_serving.serve import serve

    heads = [folder for folder in draft_folders.values() if format_of(folder) == "speculators"]
    ids = [p[0].tolist() for p in prompts]
    runs: dict[tuple[str, str], tuple[list, dict | None]] = {}
    with tempfile.TemporaryDirectory(prefix="adaspec-bench-vllm-") as tmp:
        if heads:
            export_draft(heads[0], Path(tmp) / "export", target_folder=target_folder)
        for dtype in ("float32", "bfloat16"):
            print(f"[adaspec] bench-real: vLLM, {dtype}: the target alone, then with the head at gammas {gammas}")
            results, _, _ = serve(target_folder, ids, max_new_tokens=max_new_tokens, stop_token_id=stop, dtype=dtype,
                                  compile=True)
            runs[(f"vllm-{dtype}", "plain")] = results, None
            for gamma in gammas if heads else []:
                results, spec, _ = serve(target_folder, ids, max_new_tokens=max_new_tokens, stop_token_id=stop,
                                         dtype=dtype, draft=Path(tmp) / "export", gamma=gamma, compile=True)
                runs[(f"vllm-{dtype}", f"eagle3 fixed-{gamma}")] = results, spec
    return runs


def _cell(value) -> str:
    if isinstance(value, float):
        return f"{value:.3g}"
    if isinstance(value, list):  # an interval
        return "[" + ", ".join(f"{v:.3g}" for v in value) + "]"
    return str(value)


def _add_draft_group_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--draft-group", choices=DRAFT_GROUPS, default=None,
                        help="capacity: every finished forward-KL draft of the capacity experiment's --seed at --ks "
                             "and its EAGLE-3 heads (else demo-real's), with prompt lookup, on 40 prompts at gamma "
                             "3, temperatures 0 and 1, no adaptive policy, the target in bfloat16-compiled against "
                             "float32-compiled and bfloat16-compiled-w2 too, as bench/results/capacity-seed<s>-"
                             "g<gammas>.json; the options given win")
    parser.add_argument("--seed", type=int, default=None, help="with --draft-group: the seed whose drafts (0)")
    parser.add_argument("--ks", type=parse_ks, default=None, metavar="K,...",
                        help="with --draft-group: the independent drafts at these k (0.4,1)")


def with_draft_group(argv: list[str], outputs: Path = Path("outputs")) -> list[str]:
    """`argv` with `--draft-group` and its `--seed` and `--ks` replaced by what they stand for (module
    docstring): the command the results record; `argv` itself without `--draft-group`."""
    # allow_abbrev=False: --draft is not --draft-group
    reader = argparse.ArgumentParser(prog="python -m adaspec.commands.bench_real", add_help=False, allow_abbrev=False)
    _add_draft_group_options(reader)
    reader.add_argument("--gammas", default="3")
    group, rest = reader.parse_known_args(argv)
    if group.draft_group is None:
        return argv
    seed = 0 if group.seed is None else group.seed
    drafts = capacity_drafts(seed, group.ks or (0.4, 1.0), outputs)
    if not drafts:
        sizes = " ".join(f"{CAPACITY_GROUP}_{size}" for size, _ in capacity_sizes())
        raise UserError(
            f"--draft-group capacity: no finished draft under {capacity_run(seed, outputs)}, nor make demo-real's "
            f"heads: train them with `python -m adaspec.commands.paper --tasks {sizes} --seeds {seed} "
            f"--stages target,cache,pretrain_draft,ref,draft --arms a --ks 0.4,1`"
        )
    name = f"capacity-seed{seed}-g{group.gammas.replace(',', '-')}"
    options = ["--name", name, "--prompts", "40", "--gammas", group.gammas, "--temperatures", "0,1", "--no-adaptive",
               "--serving", "bfloat16-compiled", "--servings", "float32-compiled,bfloat16-compiled-w2"]
    named = [word for draft, folder in drafts.items() for word in ("--draft", f"{draft}={folder}")]
    return [*options, *named, *rest, "paper=smollm2_gsm8k_capacity", f"seed={seed}", "baseline=[prompt_lookup]"]


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m adaspec.commands.bench_real", description=__doc__.splitlines()[0])
    parser.add_argument("--name", default="smollm2", help="results file bench/results/<name>.json")
    parser.add_argument("--prompts", type=int, default=10, help="test prompts to decode")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--gammas", type=lambda s: [int(g) for g in s.split(",")], default=[1, 2, 3, 4, 5, 6, 8])
    parser.add_argument("--temperatures", type=lambda s: [float(t) for t in s.split(",")], default=[0.0, 1.0])
    parser.add_argument("--k", type=float, default=0.4, help="which trained draft: draft-k<k>")
    parser.add_argument("--draft", action="append", default=None, metavar="[NAME=]FOLDER",
                        help="a finished draft or reference folder (its final/) instead of draft-k<k>; repeat it "
                             "to bench several against the same target-only runs")
    parser.add_argument("--no-adaptive", action="store_true", help="the fixed gammas only")
    parser.add_argument("--draft-temperatures", type=lambda s: [float(t) for t in s.split(",") if t], default=[],
                        metavar="T,...", help="at temperature > 0, every row again with the drafts proposing at each "
                        "of these temperatures (decode.draft_temperature)")
    parser.add_argument("--trees", type=lambda s: [x for x in s.split(",") if x], default=[],
                        help="draft-tree shapes decoded as rows of their own beside the chains, e.g. "
                             "k4-d4-n16,k4-d4-n16+lookup (adaspec.decoding.tree; +lookup: the hybrid)")
    parser.add_argument("--no-trained", action="store_true",
                        help="bench the training-free drafts of the baseline group only (no trained draft needed)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads")
    parser.add_argument("--serving", default=None,
                        help="the target's serving configuration for speculative decoding, "
                             "<dtype>[-int8][-attn_eager][-static|-compiled] (default: the config's "
                             "decode.target_dtype, decode.kv_cache and decode.compile)")
    parser.add_argument("--servings", type=lambda s: [x for x in s.split(",") if x], default=["float32"],
                        help="further target-only configurations timed beside it; speed-ups are against the fastest")
    parser.add_argument("--draft-dtype", default=None, help="the trained draft's dtype (default: decode.draft_dtype)")
    parser.add_argument("--vllm", action="store_true",
                        help="greedy rows of vLLM serving the target, plain and with the first trained EAGLE-3 head, "
                             "in float32 and bfloat16 (its CPU build, in .cache/vllm-venv; adaspec.vllm_serving)")
    parser.add_argument("--vllm-gammas", type=lambda s: [int(g) for g in s.split(",")], default=[3, 5],
                        help="vLLM's num_speculative_tokens for its head rows")
    parser.add_argument("--out", type=Path, default=RESULTS, help="results folder")
    _add_draft_group_options(parser)
    parser.add_argument("overrides", nargs="*", help="Hydra overrides naming the pair, e.g. model=smollm2 task=gsm8k")
    args = parser.parse_args(argv)
    if args.seed is not None or args.ks is not None:  # with --draft-group, main has replaced all three
        parser.error("--seed and --ks choose the drafts of --draft-group: add --draft-group capacity")
    return args


def named_drafts(values: list[str]) -> dict[str, Path]:
    """--draft's [NAME=]FOLDER values by row name: NAME, else the stage folder's name (`.../draft-k0.4/final`:
    draft-k0.4); a single unnamed draft is `trained`, as bench-real always called its one draft."""
    folders: dict[str, Path] = {}
    for value in values:
        name, folder = value.split("=", 1) if "=" in value else ("", value)
        folder = Path(folder)
        name = name or ("trained" if len(values) == 1 else folder.parent.name)
        if name in folders:
            raise UserError(f"--draft: two drafts named {name!r}: name them, e.g. --draft {name}-a={folder}")
        folders[name] = folder
    return folders


def main(argv: list[str] | None = None) -> dict[str, Any]:
    no_tokenizer_parallelism()
    argv = with_draft_group(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    try:  # torch-free: a bad shape is refused before anything loads
        trees = {f"tree-{name}": TreeShape.parse(name) for name in args.trees}
    except ValueError as error:
        raise UserError(f"--trees: {error}") from None
    cfg = checked_config(*args.overrides, "stage=draft", f"k={args.k}")
    torch.set_num_threads(args.threads)
    # imported after the arguments are parsed, so --help and argument errors answer at once
    from transformers import AutoTokenizer

    from adaspec.artefacts.rules import require_artefact
    from adaspec.artefacts.store import verify_weights
    from adaspec.data.encoding import prompt_ids, stop_token_id
    from adaspec.data.tasks import load_task
    from adaspec.decoding import AdaptiveGamma, FixedGamma
    from adaspec.decoding.serving import DTYPES, Served, Serving, parse_serving
    from adaspec.drafts import build_baseline, load_draft
    from adaspec.evaluation.cost import call_costs, tree_verify_seconds
    from adaspec.models.build import load_model

    layout = paths.of(cfg)
    require_artefact(layout.target_dir(), "target", "bench-real", layout)
    if args.no_trained:
        draft_folders = {}
        if not cfg.baseline:
            raise UserError("--no-trained leaves no draft to bench: keep the baselines (baseline=[prompt_lookup])")
    elif args.draft is None:
        require_artefact(layout.draft_dir(), "draft", "bench-real", layout, f" k={args.k}")
        draft_folders = {"trained": paths.final(layout.draft_dir())}
    else:
        draft_folders = named_drafts(args.draft)
        for folder in draft_folders.values():
            verify_weights(folder, f"the stage that made {folder}")
    target_folder = paths.final(layout.target_dir())
    tokenizer = AutoTokenizer.from_pretrained(str(target_folder))
    model = load_model(target_folder).eval()
    serving = parse_serving(args.serving, "--serving") if args.serving else Serving.of_target(cfg.decode)
    others = {parse_serving(name, "--servings") for name in args.servings} - {serving}
    target_only = {other.name: Served(copy.deepcopy(model), other) for other in sorted(others, key=str)}
    target = Served(model, serving)
    draft_dtype = args.draft_dtype or str(cfg.decode.draft_dtype)
    if draft_dtype not in DTYPES:
        raise UserError(f"--draft-dtype: expected one of {sorted(DTYPES)}, got {draft_dtype!r}")
    drafts = {}
    for name, folder in draft_folders.items():
        drafts[name] = load_draft(folder, target=model).eval()
        drafts[name].model.to(DTYPES[draft_dtype])
        if cfg.decode.draft_compile and not drafts[name].compile_steps():
            print(f"[adaspec] bench-real: decode.draft_compile: {name} (a {drafts[name].kind} draft) decodes eager")
    drafts |= {name: build_baseline(spec) for name, spec in cfg.baseline.items()}
    fmt = cfg.task.prompt_format
    examples = load_task(cfg.task)["test"][: args.prompts]
    prompts = [torch.tensor([prompt_ids(tokenizer, e.prompt, fmt)]) for e in examples]
    policies = {f"fixed-{g}": (lambda g=g: FixedGamma(g)) for g in args.gammas}
    adaptive = AdaptiveGamma(base=cfg.gamma, window=cfg.decode.adaptive_window)
    widest = max(args.gammas)
    if not args.no_adaptive:
        policies["adaptive"] = lambda: AdaptiveGamma(base=cfg.gamma, window=cfg.decode.adaptive_window)
        widest = max(widest, min(cfg.gamma + 2, adaptive.max_gamma))
    # every step width a run needs: one token, and gamma + 1 for each fixed gamma and the adaptive policy's range
    warm_widths = sorted({1, *(g + 1 for g in args.gammas), widest + 1})
    if target.serving.compile or any(s.serving.compile for s in target_only.values()):
        print(f"[adaspec] bench-real: compiling the step graphs first (widths {warm_widths}; about a minute each "
              f"on two cores, recorded as compile_seconds, excluded from every figure)")
    target.warm_up(warm_widths)
    for layers in {tuple(d.target_layers) for d in drafts.values() if d.target_layers}:  # EAGLE-3 heads
        target.warm_up([w for w in warm_widths if w > 1], feature_layers=list(layers))  # verifications
    for served in target_only.values():
        served.warm_up([1])
    for shape in trees.values():
        for layers in {tuple(d.target_layers) for d in drafts.values()}:
            target.warm_up([shape.nodes + 1], feature_layers=list(layers) or None, tree=True)
    for draft in drafts.values():  # a compiled head's steps (decode.draft_compile), before any is timed
        draft.warm_up([ids.shape[1] for ids in prompts])
    costs = call_costs(target, drafts, prompts[0], sorted(set(args.gammas)))
    costs |= {"target_verify_s": {int(g): v for g, v in costs["target_verify_s"].items()}}
    costs["tree_verify_s"] = {name: tree_verify_seconds(target, prompts[0], shape.nodes) for name, shape in trees.items()}
    payload: dict[str, Any] = {
        "name": args.name,
        "command": "python -m adaspec.commands.bench_real " + " ".join(argv),
        "machine": describe_machine(),
        # "draft": the first trained draft's folder (None without one); "draft_folders": every one by row name
        "target": str(target_folder), "draft": next((str(f) for f in draft_folders.values()), None),
        "draft_folders": {name: str(folder) for name, folder in draft_folders.items()},
        "serving": {"target": serving.name, "draft_dtype": draft_dtype, "target_only": [serving.name, *target_only]}
        | ({"draft_compile": True} if cfg.decode.draft_compile else {}),
        "compile_seconds": {name: {str(w): v for w, v in served.compile_seconds.items()}
                            for name, served in {serving.name: target, **target_only}.items() if served.widths},
        "target_parameters": sum(p.numel() for p in model.parameters()),
        "drafts": {name: draft.describe() for name, draft in drafts.items()},
        "n_prompts": len(prompts), "max_new_tokens": args.max_new_tokens,
        "costs": {**costs, "c": {name: s / costs["target_1_s"] for name, s in costs["draft_1_s"].items()}},
        "hf_assisted": {name: "run at every fixed gamma (confidence threshold off, constant schedule)"
                        if draft.hf_assisted_kwargs(1) is not None
                        else "not run: the draft has a reduced vocabulary, which HF assisted generation cannot map"
                        for name, draft in drafts.items()},
        "rows": [],
    }
    out = args.out / f"{args.name}.json"
    stop = stop_token_id(tokenizer, fmt)
    vllm = vllm_rows(target_folder, draft_folders, prompts, stop, args.max_new_tokens, args.vllm_gammas) \
        if args.vllm else {}
    for temperature in args.temperatures:
        payload["rows"] += run_temperature(target, drafts, prompts, stop, policies, temperature,
                                           args.max_new_tokens, costs, pad_id=tokenizer.pad_token_id,
                                           target_only=target_only, warm_widths=warm_widths, trees=trees,
                                           vllm_runs=vllm if temperature == 0 else None,
                                           draft_temperatures=args.draft_temperatures)
        write_json_atomically(out, payload, sort_keys=True)
    columns = ["temperature", "draft", "policy", "alpha", "alpha_95", "tau", "tokens_per_s", "target_only/tokens_per_s",
               "speedup_vs_target", "speedup_vs_target_95", "speedup_vs_same_serving", "expected_speedup",
               "share_of_expected", "greedy_mismatches", "speedup_vs_hf_assisted"]
    print(markdown_table(columns, [[r.get(c) for c in columns] for r in payload["rows"]], cell=_cell))
    c = ", ".join(f"{name} {value:.3f}" for name, value in payload["costs"]["c"].items())
    print(f"[adaspec] bench-real: c = {c}; fastest target-only: {payload['rows'][0]['fastest_target_only']}; "
          f"wrote {out}")
    return payload


if __name__ == "__main__":
    with reported_as_one_line():
        main()
