"""The byte-level BPE tokenizer shared by the target, reference and draft of from-scratch models."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

EOS = "<|endoftext|>"
PAD = "<|pad|>"
DOTTED_NAME = re.compile(r"\b[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+\b")


def frequent_dotted_names(texts: Iterable[str], n: int) -> list[str]:
    """The `n` most frequent dotted names (`re.sub`, `math.sqrt`, `os.path.join`) in `texts`; ties in
    order of first appearance, so the result is deterministic."""
    if n <= 0:
        return []
    counts = Counter(name for text in texts for name in DOTTED_NAME.findall(text))
    return [name for name, _ in counts.most_common(n)]


def train_bpe_tokenizer(
    texts: Iterable[str], vocab_size: int, added_tokens: Sequence[str] = ()
) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE on `texts`; deterministic for the same texts and vocab size.

    `added_tokens` (task.domain.api_vocab_size: API names) are then added as whole tokens, each bare and
    with a leading space: the byte-level pre-tokenizer attaches the space before a word to the word, and a
    bare token alone would split " math.sqrt" into a lone " " and "math.sqrt". Added tokens are matched in
    the raw text before BPE, also inside longer words ("cmath.sqrt" -> "c" + "math.sqrt"); decoding gives
    the text back unchanged.
    """
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS, PAD],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    if added_tokens:
        tok.add_tokens([AddedToken(t) for name in added_tokens for t in (name, " " + name)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, pad_token=PAD, clean_up_tokenization_spaces=False)


def padded_vocab_size(tokenizer: PreTrainedTokenizerFast, multiple: int = 64) -> int:
    """Embedding rows for a model using `tokenizer`: its length rounded up for efficient matmuls."""
    return -(-len(tokenizer) // multiple) * multiple
