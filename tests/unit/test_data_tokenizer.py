"""The byte-level BPE: exactly the vocabulary asked for, deterministic, lossless; given tokenizers checked."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from fixtures.samples import TRAIN, VALID, stories

pytest.importorskip("tokenizers")

from parallax.data.tokenizer import EOT, load_tokenizer, train_tokenizer  # noqa: E402
from parallax.errors import ParallaxError  # noqa: E402


# The package's 500 stories yield 5,384 distinct BPE tokens, so they fill a vocabulary of 4,096
# (the model's 10,000 needs more text: the padding test fills it), while their first 200 yield
# only 3,915, too few for 4,096.
VOCAB = 4_096


@pytest.fixture(scope="module")
def corpus() -> list[str]:
    return stories(TRAIN) + stories(VALID)


@pytest.fixture(scope="module")
def tokenizer(corpus):
    return train_tokenizer(corpus, VOCAB)


def test_trained_tokenizer_has_exactly_the_vocabulary_with_eot_first(tokenizer):
    assert tokenizer.get_vocab_size(with_added_tokens=True) == VOCAB
    assert tokenizer.token_to_id(EOT) == 0
    ids = sorted(tokenizer.get_vocab(with_added_tokens=True).values())
    assert ids == list(range(VOCAB))


def test_training_is_deterministic_across_processes(corpus, tokenizer, tmp_path):
    assert train_tokenizer(corpus, VOCAB).to_str() == tokenizer.to_str()
    # Another process has other hash-map seeds and thread timings: still the same merges.
    (tmp_path / "corpus.json").write_text(json.dumps(corpus))
    script = (
        "import json, sys; from parallax.data.tokenizer import train_tokenizer; "
        f"print(train_tokenizer(json.load(open({str(tmp_path / 'corpus.json')!r})), {VOCAB}).to_str())"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert out.strip() == tokenizer.to_str()


def test_round_trip_is_lossless(tokenizer, corpus):
    texts = [
        corpus[0],
        corpus[-1],
        "  leading spaces,\ttabs\nand\n\n\nnewlines  ",
        "Ünïcödé — “quotes”, emoji 🐉🦄, CJK 小さな物語, and a \x00 byte",
    ]
    for text in texts:
        ids = tokenizer.encode(text, add_special_tokens=False).ids
        assert tokenizer.decode(ids, skip_special_tokens=False) == text
    # The separator is one token, not spelled out in bytes.
    assert tokenizer.encode(f"The end.{EOT}Once", add_special_tokens=False).ids.count(0) == 1


def test_a_too_small_corpus_cannot_make_the_vocabulary(corpus):
    with pytest.raises(ParallaxError, match=r"yields only 3,915 distinct BPE tokens, not 4,096: give more text"):
        train_tokenizer(corpus[:200], VOCAB)


def test_padding_fills_the_vocabulary_with_reserved_tokens_that_never_occur(corpus):
    from parallax.data.tokenizer import check_tokenizer, reserved_tokens

    small = corpus[:200]
    tokenizer = train_tokenizer(small, 10_000, pad=True)
    check_tokenizer(tokenizer, 10_000, "padded")  # exactly 10,000 contiguous ids, <|endoftext|> 0
    reserved = reserved_tokens(tokenizer)
    assert reserved == 10_000 - 3_915 and tokenizer.get_vocab_size(with_added_tokens=True) == 10_000
    assert tokenizer.token_to_id("<|reserved_0|>") == 10_000 - reserved
    ids = {i for text in small for i in tokenizer.encode(text, add_special_tokens=False).ids}
    assert max(ids) < 10_000 - reserved  # the text never produces one
    assert train_tokenizer(small, 10_000, pad=True).to_str() == tokenizer.to_str()  # deterministic


def test_given_tokenizer_must_match_the_model_vocabulary(tokenizer, tmp_path):
    path = tmp_path / "tokenizer.json"
    tokenizer.save(str(path))
    assert load_tokenizer(path, VOCAB).to_str() == tokenizer.to_str()
    with pytest.raises(ParallaxError, match=r"has 4,096 tokens but the model's vocabulary is 32,000"):
        load_tokenizer(path, 32_000)
    with pytest.raises(ParallaxError, match="no such file"):
        load_tokenizer(tmp_path / "missing.json", VOCAB)
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ParallaxError, match="not a Hugging Face tokenizer.json"):
        load_tokenizer(tmp_path / "bad.json", VOCAB)


def test_given_tokenizer_without_eot_is_refused(corpus, tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    plain = Tokenizer(models.BPE())
    plain.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    plain.train_from_iterator(corpus[:300], trainers.BpeTrainer(
        vocab_size=600, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    path = tmp_path / "plain.json"
    plain.save(str(path))
    size = json.loads(path.read_text())["model"]["vocab"].__len__()
    with pytest.raises(ParallaxError, match=r"has no <\|endoftext\|> token"):
        load_tokenizer(path, size)
