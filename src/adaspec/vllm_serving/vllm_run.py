"""Decode token ids with vLLM, one request at a time: run by the vLLM virtualenv's Python (`venv.py`), so it imports
vLLM and the standard library only.

    python vllm_run.py REQUEST.json RESULT.json

REQUEST: {"target": folder, "draft": a speculators export folder or null, "gamma": 5, "dtype": "float32",
"compile": false, "prompts": [[ids]], "max_new_tokens": 128, "stop_token_id": id, "max_model_len": 2048}.
RESULT: {"vllm": version, "outputs": [[ids]], "seconds": [per prompt], "spec": null or vLLM's counters over the
timed requests: {"drafts", "draft_tokens", "accepted", "accepted_per_position": [...]}}. Greedy; the first prompt
is decoded once untimed first (and its counters left out).
"""

import json
import sys
import time

COUNTERS = {"vllm:spec_decode_num_drafts": "drafts", "vllm:spec_decode_num_draft_tokens": "draft_tokens",
            "vllm:spec_decode_num_accepted_tokens": "accepted"}
PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos"


def counters(llm) -> dict:
    found = {}
    for metric in llm.get_metrics():
        if metric.name in COUNTERS:
            found[COUNTERS[metric.name]] = int(metric.value)
        elif metric.name == PER_POSITION:
            found["accepted_per_position"] = [int(v) for v in metric.values]
    return found


def main() -> None:
    with open(sys.argv[1]) as fh:
        request = json.load(fh)
    # after the request is read: a bad request fails before vLLM's slow import
    import vllm
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    extra = {}
    if request["draft"]:
        extra["speculative_config"] = {"method": "eagle3", "model": request["draft"],
                                       "num_speculative_tokens": request["gamma"]}
    llm = LLM(model=request["target"], dtype=request["dtype"], max_model_len=request["max_model_len"], seed=0,
              enforce_eager=not request["compile"], disable_log_stats=False, **extra)
    params = SamplingParams(temperature=0.0, max_tokens=request["max_new_tokens"], ignore_eos=True,
                            stop_token_ids=[request["stop_token_id"]])

    def generate(ids):
        return llm.generate([TokensPrompt(prompt_token_ids=ids)], params, use_tqdm=False)[0].outputs[0].token_ids

    generate(request["prompts"][0])  # warm-up: kernels, allocator, graphs
    before = counters(llm)
    outputs, seconds = [], []
    for ids in request["prompts"]:
        started = time.perf_counter()
        outputs.append(list(generate(ids)))
        seconds.append(time.perf_counter() - started)
    after = counters(llm)
    spec = None
    if request["draft"]:
        spec = {key: after[key] - before.get(key, 0) for key in COUNTERS.values()}
        previous = before.get("accepted_per_position") or [0] * len(after["accepted_per_position"])
        spec["accepted_per_position"] = [a - b for a, b in zip(after["accepted_per_position"], previous, strict=True)]
    with open(sys.argv[2], "w") as fh:
        json.dump({"vllm": vllm.__version__, "outputs": outputs, "seconds": seconds, "spec": spec}, fh)


if __name__ == "__main__":
    main()
