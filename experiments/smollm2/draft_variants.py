"""Which draft for the real target: initialisation (random, target_embedding, target_layers) and vocabulary
(reduced to 8,192 tokens or the full 49,152), each trained as the reference (stage 2: forward KL from the
top-64 teacher cache on the first 1000 GSM8K answers) for the same number of steps.

    python experiments/smollm2/draft_variants.py --models DIR --outputs ROOT [--steps 20]

ROOT must hold the target and its top-64 teacher cache (make demo-real's first steps, with task.n_train=1000
and distill.data=dataset); every variant gets its own ROOT/variants/<name> folder whose target links to it,
so variants never share a draft initialisation. Per variant: training tokens/s, the acceptance monitor's
alpha and tau at the end (greedy, gamma 5, 16 held-out prompts), the draft's parameters, and the cost
ratio c (median seconds of one cached single-token forward, draft over target, measured one after the
other in this process). Resumable (finished variants are read back). Writes
experiments/results/smollm2/draft_variants.json.
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

import torch
from transformers import AutoTokenizer

from adaspec import paths
from adaspec.data.encoding import prompt_ids
from adaspec.data.tasks import load_task
from adaspec.evaluation.cost import forward_seconds
from adaspec.models.build import load_model, n_params
from adaspec.models.vocab import load_draft
from adaspec.pipeline import run_stage
from adaspec.toolkit import checked_config, write_json_atomically

VARIANTS = {
    "target_embedding-8192": [],
    "random-8192": ["model.draft_init=random"],
    "target_layers2-8192": ["model.draft_init=target_layers", "model.draft.num_hidden_layers=2"],
    "target_embedding-full": ["model.draft_vocab_size=0"],
}
SHARED = Path(__file__).resolve().parents[3] / "shared" / "data"


def monitor_reading(log: Path) -> dict[str, float]:
    with open(log) as fh:
        rows = [r for r in csv.DictReader(fh) if r.get("monitor/alpha")]
    return {"alpha": float(rows[-1]["monitor/alpha"]), "tau": float(rows[-1]["monitor/tau"])}


def tokens_per_s(log: Path) -> float:
    with open(log) as fh:
        values = [float(r["train/tokens_per_s"]) for r in csv.DictReader(fh) if r.get("train/tokens_per_s")]
    return sorted(values)[len(values) // 2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", required=True, help="paths.models of make models")
    parser.add_argument("--outputs", type=Path, required=True, help="paths.root holding the target and cache")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--out", type=Path, default=Path("experiments/results/smollm2/draft_variants.json"))
    args = parser.parse_args()
    base = ["model=smollm2", "task=gsm8k", f"task.local_dir={SHARED / 'gsm8k'}", "task.n_train=1000",
            f"paths.models={args.models}", "distill.teacher=cache", "distill.cache_mode=topk",
            "stage=ref", f"stage.max_steps={args.steps}", "trainer.enable_progress_bar=false",
            "trainer.log_every_n_steps=1"]
    target = paths.target_dir(checked_config(*base, f"paths.root={args.outputs}"))
    results = {"steps": args.steps, "variants": {}}
    for name, extra in VARIANTS.items():
        root = args.outputs / "variants" / name
        cfg = checked_config(*base, *extra, f"paths.root={root}")
        link = paths.target_dir(cfg)
        if not link.exists():
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(target.resolve(), target_is_directory=True)
        run_stage(cfg)
        folder = paths.ref_dir(cfg)
        results["variants"][name] = {
            "overrides": extra,
            "parameters": n_params(load_model(paths.final(folder))),
            "train_tokens_per_s": tokens_per_s(folder / "logs" / "metrics.csv"),
            "train_seconds": json.loads((paths.final(folder) / "metrics.json").read_text())["train_seconds"],
            **monitor_reading(folder / "logs" / "metrics.csv"),
        }
        print(name, results["variants"][name], flush=True)
    torch.set_num_threads(2)
    cfg = checked_config(*base, f"paths.root={args.outputs}")
    target_model = load_model(paths.final(target)).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(paths.final(target)))
    prompt = torch.tensor([prompt_ids(tokenizer, load_task(cfg.task)["test"][0].prompt, "chat")])
    target_s = forward_seconds(target_model, prompt, 1)
    for name, extra in VARIANTS.items():
        draft = load_draft(paths.final(paths.ref_dir(checked_config(*base, *extra,
                                                                      f"paths.root={args.outputs / 'variants' / name}"))))
        draft_s = forward_seconds(draft.eval(), prompt, 1, vocab_map=getattr(draft, "draft_vocab", None))
        results["variants"][name].update({"draft_1_s": draft_s, "c": draft_s / target_s})
    results["target_1_s"] = target_s
    write_json_atomically(args.out, results, sort_keys=True)
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
