"""`serve`: token ids decoded by vLLM (`vllm_run.py` in its virtualenv), as the project's `GenerationResult`s."""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path

from adaspec.decoding.stats import GenerationResult
from adaspec.errors import UserError
from adaspec.vllm_serving.venv import vllm_environment, vllm_python

RUNNER = Path(__file__).resolve().parent / "vllm_run.py"


def serve(target: Path, prompts: list[list[int]], *, max_new_tokens: int, stop_token_id: int,
          dtype: str = "float32", draft: Path | None = None, gamma: int = 3, compile: bool = False
          ) -> tuple[list[GenerationResult], dict | None, str]:
    """Greedy outputs of `target` served by vLLM (with the speculators export `draft`, gamma tokens per draft),
    one request at a time after one untimed warm-up: (a result per prompt with its wall time, vLLM's
    speculative-decoding counters or None, vLLM's version)."""
    python = vllm_python()
    request = {"target": str(Path(target).resolve()), "draft": None if draft is None else str(Path(draft).resolve()),
               "gamma": gamma, "dtype": dtype, "compile": compile, "prompts": prompts,
               "max_new_tokens": max_new_tokens, "stop_token_id": stop_token_id,
               "max_model_len": max(map(len, prompts)) + max_new_tokens + gamma + 8}
    with tempfile.TemporaryDirectory(prefix="adaspec-vllm-") as tmp:
        request_file, result_file = Path(tmp) / "request.json", Path(tmp) / "result.json"
        request_file.write_text(json.dumps(request))
        run = subprocess.run([str(python), str(RUNNER), str(request_file), str(result_file)], env=vllm_environment(),
                             capture_output=True, text=True)
        if run.returncode != 0:
            log = Path(tempfile.gettempdir()) / "adaspec-vllm-last.log"
            log.write_text(run.stderr)
            last = (run.stderr.strip() or "no output").splitlines()[-1]
            raise UserError(f"vLLM could not serve {target}{'' if draft is None else f' with {draft}'}: {last} "
                            f"(its whole log: {log})")
        result = json.loads(result_file.read_text())
    outputs = [GenerationResult(tokens=tokens, target_calls=0, wall_time_s=seconds)
               for tokens, seconds in zip(result["outputs"], result["seconds"], strict=True)]
    return outputs, result["spec"], result["vllm"]
