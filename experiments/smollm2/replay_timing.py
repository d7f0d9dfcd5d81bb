"""Head replay, memoised (this code) against the earlier per-block proposals, on make demo-real's AdaSPEC head:
the same blocks at gammas 1, 2, 3, 5, 8 on 3 test prompts, timed. ROOT: demo-real's paths.root (the committed
figure used outputs/demo-real-bf16, the run timed for experiments/results/smollm2/demo-real-eagle3/).

    .venv/bin/python experiments/smollm2/replay_timing.py OUT.json [ROOT=outputs]
"""
import json
import sys
import time

import torch
from transformers import AutoTokenizer

from adaspec.data.encoding import prompt_ids, stop_token_id
from adaspec.data.tasks import load_task
from adaspec.decoding import FixedGamma, target_generate
from adaspec.drafts import load_draft
from adaspec.evaluation.replay import replay
from adaspec.models.build import load_model
from adaspec.toolkit import checked_config

torch.set_num_threads(2)
root = f"{sys.argv[2] if len(sys.argv) > 2 else 'outputs'}/gsm8k/smollm2/seed0"
target_dir, head_dir = f"{root}/target/final", f"{root}/draft-k0.4-eagle3-target-answers/final"
cfg = checked_config("model=smollm2", "task=gsm8k", "task.local_dir=../shared/data/gsm8k")
tok = AutoTokenizer.from_pretrained(target_dir)
target = load_model(target_dir).eval()
draft = load_draft(head_dir, target=target).eval()
width = draft.verify_width(target.config.vocab_size)
examples = load_task(cfg.task)["test"][:3]
eos = stop_token_id(tok, "chat")
gammas = [1, 2, 3, 5, 8]

def old_blocks(prompt, tokens):
    context = torch.cat([prompt[0], torch.tensor(tokens, dtype=prompt.dtype)])
    session = draft.start(prompt, width)
    session.read_target(draft.features(context[:-1].view(1, -1))[0])
    def block(position, gamma):
        length = prompt.shape[1] + position
        session.cache.crop(length)
        proposals = session.propose(context[:length], gamma, 0.0, None)[0].tolist()
        n = 0
        while n < len(proposals) and position + n < len(tokens) and proposals[n] == tokens[position + n]:
            n += 1
        return len(proposals), n
    return block

rows = []
with torch.inference_mode():
    for e in examples:
        ids = torch.tensor([prompt_ids(tok, e.prompt, "chat")])
        ref = target_generate(target, ids, max_new_tokens=128, eos_token_id=eos)
        for name, make in (("per-block (before)", old_blocks), ("memoised (now)", lambda p, t: draft.greedy_blocks(p, t, width))):
            t0 = time.perf_counter()
            blocks = make(ids, ref.tokens)
            out = [replay(ref.tokens, blocks, policy=FixedGamma(g), prompt_len=ids.shape[1], max_new_tokens=128, eos_token_id=eos).blocks for g in gammas]
            rows.append({"variant": name, "seconds": time.perf_counter() - t0, "tokens": len(ref.tokens), "blocks": [[(b.proposed, b.accepted) for b in o] for o in out]})
for i in range(0, len(rows), 2):
    assert rows[i]["blocks"] == rows[i + 1]["blocks"], "replays differ"
summary = {v: sum(r["seconds"] for r in rows if r["variant"] == v) for v in ("per-block (before)", "memoised (now)")}
result = {"prompts": len(examples), "gammas": gammas, "head": head_dir, "seconds": summary,
          "per_prompt": [{k: r[k] for k in ("variant", "seconds", "tokens")} for r in rows],
          "identical_blocks": True, "speedup": summary["per-block (before)"] / summary["memoised (now)"]}
print(json.dumps(result, indent=1))
json.dump(result, open(sys.argv[1], "w"), indent=1)
