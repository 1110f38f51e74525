"""Words and vocabulary: Python splitting equals the saved tokenizer; counts, min_count, max_vocab."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from hornn_dist.data import vocab
from hornn_dist.data.config import DEMO_WORDS

TRICKY = (
    "The CAT sat\n on the\tmat <unk> a<eos>b <UNK>\n"
    "ΟΔΟΣ Σ café\u00a0naïve\u2028жук\x1cdog\x1f日本 İstanbul STRASSE\r\n"
    "\n  trailing  spaces  \n"
)


@pytest.mark.parametrize("lowercase", [False, True])
@pytest.mark.parametrize("add_eos", [False, True])
@pytest.mark.parametrize("pattern", ["", DEMO_WORDS, r"[A-Za-z]+|[0-9]+|[.,!?;:]"])
def test_split_words_equals_saved_tokenizer(
    tmp_path, lowercase: bool, add_eos: bool, pattern: str
) -> None:
    from tokenizers import Tokenizer

    text = TRICKY + "God's word: 'tis “Behold”, 3 times!\n"
    words = vocab.split_words(text, lowercase, add_eos, pattern)
    itos = vocab.build_vocab(Counter(words[::2]), min_count=1)
    vocab.save_tokenizer(itos, tmp_path / "tokenizer.json", lowercase, add_eos, pattern)
    tokenizer = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    stoi = {w: i for i, w in enumerate(itos)}
    ours = vocab.encode_words(words, stoi, vocab.token_dtype(len(itos))).tolist()
    assert ours == tokenizer.encode(text).ids
    assert len(vocab.split_words("a\nb", lowercase, add_eos, pattern)) == (3 if add_eos else 2)
    if pattern == DEMO_WORDS and lowercase:  # the demo's cut: letters and 's, the rest dropped
        assert vocab.split_words("God's word: 3!", lowercase, add_eos, pattern) == [
            "god", "'s", "word"
        ]  # fmt: skip
    assert vocab.load_itos(tmp_path / "tokenizer.json") == itos


def test_specials_have_ids_0_and_1_and_order_matches_wordlevel_trainer() -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    lines = ["b a c a b d e e e f g", "z y x a b", "q q r r s"] * 3 + ["rare words once", "x"]
    counts = vocab.count_words([line + "\n" for line in lines], lowercase=False, add_eos=False)
    for min_count in (1, 3):
        itos = vocab.build_vocab(counts, min_count)
        tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
        tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
        trainer = trainers.WordLevelTrainer(
            vocab_size=10**9, min_frequency=min_count, special_tokens=["<unk>", "<eos>"]
        )
        tok.train_from_iterator(lines, trainer)
        theirs = sorted(tok.get_vocab().items(), key=lambda kv: kv[1])
        assert itos[:2] == ["<unk>", "<eos>"]
        assert itos == [w for w, _ in theirs]


def test_min_count_gives_exactly_the_expected_vocabulary() -> None:
    counts = Counter({"a": 5, "b": 3, "c": 3, "d": 2, "e": 1, "<eos>": 9})
    assert vocab.build_vocab(counts, 3) == ["<unk>", "<eos>", "a", "b", "c"]
    assert vocab.build_vocab(counts, 1) == ["<unk>", "<eos>", "a", "b", "c", "d", "e"]
    assert vocab.build_vocab(counts, 1, max_vocab=4) == ["<unk>", "<eos>", "a", "b"]


def test_dtype_and_hash() -> None:
    assert vocab.token_dtype(65_536) == np.uint16 and vocab.token_dtype(65_537) == np.uint32
    assert vocab.vocab_hash(["<unk>", "<eos>", "a"]) != vocab.vocab_hash(["<unk>", "<eos>", "b"])
    ids = vocab.encode_words(
        ["a", "zz", "<eos>"], {"<unk>": 0, "<eos>": 1, "a": 2}, np.dtype(np.uint32)
    )
    assert ids.dtype == np.uint32 and ids.tolist() == [2, 0, 1]


@pytest.mark.parametrize(
    ("pattern", "says"), [("[a-z", "is not a regex"), ("[a-z]*", "empty word")]
)
def test_a_bad_word_pattern_is_one_line(pattern: str, says: str) -> None:
    from hornn_dist.config import load_config
    from hornn_dist.util.errors import ConfigError

    with pytest.raises(ConfigError, match=says) as err:
        load_config(None, [f'data.word_pattern="{pattern}"'])
    assert "data.word_pattern" in str(err.value) and "\n" not in str(err.value)
