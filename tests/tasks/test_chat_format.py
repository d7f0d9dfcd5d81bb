"""task.prompt_format=chat: prompts wrapped in the tokenizer's chat template, loss only on the answer and
the end-of-turn token, the same prompt ids in training and evaluation, and the end-of-turn token as the
stop token. The tokenizer is a tiny byte-level BPE with SmolLM2's special tokens and chat template."""

from __future__ import annotations

import pytest

from adaspec.data.encoding import IGNORE, encode_example, prompt_ids, stop_token_id
from adaspec.data.prompts import code_prompt, code_target, math_prompt, math_target
from adaspec.errors import UserError
from tests.models.tiny_gguf import chat_tokenizer

QUESTION = "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May."
ANSWER = "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n#### 72"
EXAMPLES = {
    "gsm8k": (math_prompt(QUESTION), math_target(ANSWER)),
    "mbpp": (
        code_prompt("Write a function to add one.", ["assert add_one(1) == 2"]),
        code_target("def add_one(x):\r\n    return x + 1\r\n"),
    ),
}


@pytest.fixture(scope="module")
def tokenizer():
    return chat_tokenizer()


@pytest.mark.parametrize("task", sorted(EXAMPLES))
def test_chat_examples_carry_loss_only_on_the_answer_and_the_end_of_turn_token(tokenizer, task):
    prompt, target = EXAMPLES[task]
    e = encode_example(tokenizer, prompt, target, max_length=512, prompt_format="chat")

    start = next(i for i, label in enumerate(e.labels) if label != IGNORE)
    assert all(label == IGNORE for label in e.labels[:start])  # no prompt or template token carries loss
    assert e.labels[start:] == e.input_ids[start:]
    # what carries loss is exactly the answer and the template's end-of-turn token
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert e.labels[-1] == im_end and e.labels.count(im_end) == 1
    assert tokenizer.decode(e.labels[start:]) == target + "<|im_end|>"
    assert tokenizer.convert_tokens_to_ids("<|im_start|>") not in e.labels[start:]
    # what precedes it is the rendered template: system turn, the prompt as the user turn, assistant header
    rendered = tokenizer.decode(e.input_ids[:start])
    assert rendered.startswith("<|im_start|>system\n")
    assert rendered.endswith(f"<|im_start|>user\n{prompt.rstrip()}<|im_end|>\n<|im_start|>assistant\n")


def test_evaluation_reads_the_same_prompt_ids_as_training(tokenizer):
    prompt, target = EXAMPLES["gsm8k"]
    e = encode_example(tokenizer, prompt, target, max_length=512, prompt_format="chat")
    ids = prompt_ids(tokenizer, prompt, "chat")
    assert (
        e.input_ids[: len(ids)] == ids and e.labels[len(ids)] != IGNORE and e.labels[len(ids) - 1] == IGNORE
    )


def test_the_chat_stop_token_is_the_end_of_turn_token_even_when_eos_is_another(tokenizer):
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert stop_token_id(tokenizer, "chat") == im_end
    other = chat_tokenizer()
    other.eos_token = "<|endoftext|>"
    assert stop_token_id(other, "chat") == im_end
    assert stop_token_id(other, "plain") == other.convert_tokens_to_ids("<|endoftext|>")
    e = encode_example(other, *EXAMPLES["mbpp"], max_length=512, prompt_format="chat")
    assert e.input_ids[-1] == im_end


def test_plain_prompts_are_the_text_and_end_with_eos(tokenizer):
    prompt, target = EXAMPLES["gsm8k"]
    e = encode_example(tokenizer, prompt, target, max_length=512)
    plain_prompt = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    assert prompt_ids(tokenizer, prompt) == plain_prompt
    assert e.input_ids == plain_prompt + tokenizer(target, add_special_tokens=False)["input_ids"] + [
        tokenizer.eos_token_id
    ]
    assert e.labels[: len(plain_prompt)] == [IGNORE] * len(plain_prompt)
    assert tokenizer.convert_tokens_to_ids("<|im_start|>") not in e.input_ids


def test_truncation_keeps_the_prompt_masked(tokenizer):
    prompt, target = EXAMPLES["gsm8k"]
    n_prompt = len(prompt_ids(tokenizer, prompt, "chat"))
    e = encode_example(tokenizer, prompt, target, max_length=n_prompt + 3, prompt_format="chat")
    assert len(e.input_ids) == n_prompt + 3 and e.labels[:n_prompt] == [IGNORE] * n_prompt


def test_chat_without_a_template_or_an_unknown_format_is_one_line_naming_the_key(tokenizer):
    bare = chat_tokenizer()
    bare.chat_template = None
    with pytest.raises(UserError, match="task.prompt_format=chat needs a tokenizer with a chat template"):
        prompt_ids(bare, "hi", "chat")
    with pytest.raises(UserError, match="task.prompt_format='markdown' is invalid"):
        encode_example(tokenizer, "hi", "there", 64, prompt_format="markdown")
    unended = chat_tokenizer()
    unended.chat_template = "{% for m in messages %}{{ m['content'] }}\n{% endfor %}"
    with pytest.raises(UserError, match="not with a special token"):
        stop_token_id(unended, "chat")
