"""The entry points, one module per command; the library lives below them (adaspec.*).

Two command-line styles, one per kind of command:
- one config, Hydra's command line (`key=value` overrides, `--multirun`, `--cfg job`): train, evaluate,
  answers, cache, diagnose;
- several configs or none, argparse flags for the command's own settings and `key=value` Hydra overrides
  for every config it composes: paper, bench, bench_real, gpu_check, models.
"""
