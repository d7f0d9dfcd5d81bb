"""task.domain.api_vocab_size: the most frequent dotted names become whole tokens of the trained BPE."""

from __future__ import annotations

from transformers import AutoTokenizer

from adaspec.data.tokenizer import frequent_dotted_names, train_bpe_tokenizer


def test_frequent_dotted_names_counts_and_orders():
    code = [
        "import re\nx = re.sub('a', 'b', s)\ny = re.sub('c', 'd', x)\n",
        "import math, os\nr = math.sqrt(n) + math.sqrt(m)\np = os.path.join(a, b)\nz = re.sub(p, q, r)\n",
        "v = 3.5 + obj.attr\n",
    ]
    assert frequent_dotted_names(code, 2) == ["re.sub", "math.sqrt"]
    assert frequent_dotted_names(code, 10) == ["re.sub", "math.sqrt", "os.path.join", "obj.attr"]
    assert frequent_dotted_names(code, 0) == []


def test_api_names_become_single_tokens(mbpp_splits, mbpp_tokenizer, tmp_path):
    code = [e.target for e in mbpp_splits["train"]]
    names = frequent_dotted_names(code, 64)
    assert len(names) == 64 and "re.sub" in names and "math.sqrt" in names
    tok = mbpp_tokenizer
    for name in ("re.sub", "math.sqrt", names[-1]):
        for text in (name, " " + name):  # bare and after a space
            assert tok.tokenize(text) == [tok.convert_ids_to_tokens(tok.convert_tokens_to_ids(text))] == [text]
    line = "    return math.sqrt(x) + re.sub(p, '', s)"
    assert " math.sqrt" in tok.tokenize(line) and " re.sub" in tok.tokenize(line)
    # a whole token in the vocabulary, beyond the trained BPE; decoding gives every training text back
    assert 400 < len(tok) <= 400 + 2 * 64
    plain = train_bpe_tokenizer([e.prompt + e.target for e in mbpp_splits["train"]], 400)
    assert len(plain) <= 400 and len(plain.tokenize(line)) > len(tok.tokenize(line))
    assert all(tok.decode(tok(t, add_special_tokens=False)["input_ids"]) == t for t in code)
    # the saved tokenizer (what stage 1 writes) carries them
    tok.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(str(tmp_path))
    assert loaded.tokenize(line) == tok.tokenize(line) and len(loaded) == len(tok)
