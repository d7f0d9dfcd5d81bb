"""An independent draft over the target's whole vocabulary as a plain Hugging Face folder: what transformers'
assisted generation (`target.generate(..., assistant_model=AutoModelForCausalLM.from_pretrained(DIR))`) and
vLLM's draft-model speculation (`--speculative-config '{"model": DIR, "num_speculative_tokens": 3}'`) load.

A draft over a reduced vocabulary (`draft_vocab.json`) has no such form: its output rows are a subset of the
target's tokens, and neither runtime maps draft ids back, so it is refused with the way to train one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from adaspec.drafts.model import ModelDraft
from adaspec.errors import UserError


def check_full_vocabulary(draft: ModelDraft, folder: Path, target_config: dict[str, Any]) -> None:
    if draft.vocab is not None:
        raise UserError(
            f"{folder} predicts {draft.vocab.size:,} of the target's {draft.vocab.target_size:,} tokens "
            f"(draft_vocab.json): transformers' assisted generation and vLLM's draft model need the whole "
            f"vocabulary; train the draft with model.draft_vocab_size=0, or export an EAGLE-3 head "
            f"(model.draft_kind=eagle3) in the speculators format"
        )
    draft_size, target_size = draft.model.config.vocab_size, target_config.get("vocab_size")
    if target_size is not None and draft_size != target_size:
        raise UserError(
            f"{folder} has {draft_size:,} token rows, its target {target_size:,}: assisted generation needs the "
            f"same vocabulary in both"
        )


def write_hf_folder(draft: ModelDraft, tokenizer, out: Path) -> None:
    """The model as loaded (in the export's dtype: `load_draft` casts it) and its tokenizer."""
    draft.model.save_pretrained(out)
    tokenizer.save_pretrained(out)
