"""Trained drafts written where users serve drafts (`python -m adaspec.export`, `make export`).

- an EAGLE-3 head (`model.draft_kind=eagle3`) in vllm-project/speculators' format, which vLLM loads
  (`adaspec.export.speculators_format`);
- an independent draft over the target's whole vocabulary as a plain Hugging Face folder, for
  transformers' assisted generation and vLLM's draft model (`adaspec.export.hf_folder`).

The artefact's weights are checked against its `meta.json` first, and the export carries the provenance
(`adaspec_export.json`: the artefact's stage, config fingerprint, weight hashes and upstream artefacts; and
`adaspec_config.yaml`: the resolved config it was trained with), so an exported draft never claims a config
it was not trained with. The folder is written to a temporary sibling and renamed into place.
"""
