"""Does training in the same process slow the target's one-token step the evaluation measures afterwards? The
step's and a 5-token verification's median (adaspec.evaluation.cost.call_costs) twice, 8 steps of the capacity
experiment's h128 reference in this process (stage.tag=probe, a folder of its own), then twice again.

    .venv/bin/python experiments/smollm2/inprocess_timing.py      (after experiments/smollm2/capacity.sh 0)
"""
import json
import time

import torch

from adaspec.decoding.serving import Served, Serving
from adaspec.evaluation.cost import call_costs
from adaspec.models.build import load_model
from adaspec.paper.plan import Step
from adaspec.paper.runner import compose_step
from adaspec.pipeline import run_stage

torch.set_num_threads(2)
target_dir = "outputs/capacity-real/gsm8k/smollm2/seed0/target/final"
prompt = torch.randint(0, 1000, (1, 120), generator=torch.Generator().manual_seed(0))

def step_ms():
    model = load_model(target_dir).eval()
    served = Served(model, Serving())
    c = call_costs(served, {}, prompt, [4])
    return round(c["target_1_s"] * 1000, 1), round(c["target_verify_s"]["4"] * 1000, 1)

out = {"before": [step_ms() for _ in range(2)], "threads_before": torch.get_num_threads()}
t0 = time.perf_counter()
cfg = compose_step(Step("train", ("paper=smollm2_gsm8k_capacity", "stage=ref", "seed=0", "stage.tag=probe",
                                  "stage.max_steps=8", "overwrite=true")), [])
run_stage(cfg)
out["train_s"] = round(time.perf_counter() - t0, 1)
out["threads_after"] = torch.get_num_threads()
out["after"] = [step_ms() for _ in range(2)]
print(json.dumps(out))
