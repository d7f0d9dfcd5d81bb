"""`adaspec.commands.train` with the heap trimmed only once it has grown (README.md here): the trainer's FreeMemory
replaced by one that trims when the anonymous resident set exceeds (1 + growth) x its level after the last trim.

    python trim_run.py <growth> <train overrides...>      # 0: after every step (the trainer's own); 1000: never
"""

import runpy
import sys

import adaspec.training.trainer as trainer
from adaspec.callbacks.anonymous_memory import current_anonymous_mb
from adaspec.callbacks.free_memory import FreeMemory


class TrimWhenGrown(FreeMemory):
    growth = float(sys.argv[1])

    def __init__(self) -> None:
        super().__init__()
        self.after_trim_mb = None

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        now = current_anonymous_mb()
        if self.trim is not None and (self.after_trim_mb is None or now > self.after_trim_mb * (1 + self.growth)):
            self.trim(0)
            self.after_trim_mb = current_anonymous_mb()


trainer.FreeMemory = TrimWhenGrown
sys.argv = ["adaspec.commands.train", *sys.argv[2:]]
runpy.run_module("adaspec.commands.train", run_name="__main__")
