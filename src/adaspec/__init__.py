"""AdaSPEC: selective knowledge distillation of draft models for speculative decoding."""

import os

__version__ = "0.1.0"

# transformers >= 5 "kernelizes" every model it loads with kernels fetched from the Hugging Face Hub (the
# `kernels` package, a dependency of transformers; bitsandbytes' 8-bit load asks for one on a GPU). Nothing in
# this project reaches the Hub at run time, so every process that imports it turns them off before any load.
os.environ["USE_HUB_KERNELS"] = "NO"
