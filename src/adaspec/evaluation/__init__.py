"""Evaluation: task scores (GSM8K exact match, MBPP pass@1 in a sandbox) and the speculative-decoding
benchmark of trained drafts (`adaspec.evaluation.run`, entry point `python -m adaspec.commands.evaluate`)."""
