"""Serving the project's drafts with vLLM, to check them where users serve them and to time the engine users pick.

vLLM lives in a virtualenv of its own (`venv.py`: its CPU build pins another transformers), and `vllm_run.py`
runs inside it, reading token ids and writing outputs, timings and vLLM's speculative-decoding counters as JSON.
`counting.py` counts the project's own blocks the way vLLM counts its drafts, so that the two compare.
"""
