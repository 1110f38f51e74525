"""Word-level vocabulary: text to words, counting, the id table, and its `tokenizer.json`.

The words of a text are what the saved `tokenizers` WordLevel tokenizer produces: the specials
`<unk>` and `<eos>` are matched first, then (optionally) lowercase, then every newline becomes
`<eos>` (when add_eos), then the text splits on whitespace, or (with a word pattern, as the
demo corpus has) the words are what the pattern matches and the text between them is dropped.
With a word pattern `split_words` runs the tokenizer's own normalizer and pre-tokenizer (one
regex engine, Oniguruma, for preparation and every later reading); without one it splits in
plain Python (a dict lookup over `str.split()` is several times faster than `encode_batch` on
long strings), and `check_tokenizer_reads` compares the two on a sample of every corpus.
"""

from __future__ import annotations

import array
import functools
import hashlib
import json
import os
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from hornn_dist.util.errors import DataError
from hornn_dist.util.files import write_text

UNK = "<unk>"
EOS = "<eos>"
SPECIALS = (UNK, EOS)  # ids 0 and 1
# Python's str.split() also splits on U+001C..U+001F; Rust's char::is_whitespace does not.
_PY_ONLY_SPACE = "[\x1c-\x1f]"


def word_regex(word_pattern: str) -> str:
    """Return the regex of one token: a special, else a word of `word_pattern`."""
    return f"{UNK}|{EOS}|(?:{word_pattern})"


def split_words(text: str, lowercase: bool, add_eos: bool, word_pattern: str = "") -> list[str]:
    """Return the words (tokens as strings) of a block of text, as the saved tokenizer splits it:
    on whitespace, or (with `word_pattern`) the words it matches, the text between dropped."""
    if "<" in text:
        text = text.replace(UNK, f" {UNK} ").replace(EOS, f" {EOS} ")
    if word_pattern:
        return _pattern_words(text, lowercase, add_eos, word_pattern)
    if lowercase:
        text = text.replace(
            "\u03a3", "\u03c3"
        ).lower()  # Rust lowercases capital sigma without context
    if add_eos:
        text = text.replace("\n", f" {EOS} ")
    return text.split()


# Chosen over Python's re with a timeout or a linear-time engine (google-re2: ASCII \w): one
# engine agrees with the tokenizer by construction, and its retry limit bounds backtracking
def _pattern_words(text: str, lowercase: bool, add_eos: bool, word_pattern: str) -> list[str]:
    """Return the words of `word_pattern` in text, cut by the saved tokenizer's own normalizer
    and pre-tokenizer, so that preparation and every later reading agree by construction.

    Oniguruma backtracks, but gives up on a search past its retry limit (a fraction of a
    second: docs/data.md, "One regex engine"), so no pattern hangs."""
    normalizer, pre_tokenizer = _reader(lowercase, add_eos, word_pattern)
    words: list[str] = []
    try:
        with _stderr_silenced():  # a panic prints lines of its own; ours is the one line below
            for piece in _pieces(text, PATTERN_PIECE_CHARS):
                split = pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(piece))
                words += [word for word, _ in split]
    except BaseException as err:  # pyo3's PanicException derives from BaseException only
        if type(err).__name__ != "PanicException":
            raise
        raise DataError(
            f"data.word_pattern {word_pattern!r} backtracks past the regex engine's retry limit "
            "on this text; write it without a repeat inside a repeat or alternatives that "
            "match the same text (e.g. a+ for (?:a+)+ or (?:a|aa)+)"
        ) from None
    return words


# The pre-tokenizer's time per word grows with the length of its input: pieces of 4K
# characters split 3x faster than 1 MB (docs/data.md, "One regex engine")
PATTERN_PIECE_CHARS = 1 << 12
_SPACE = re.compile(r"\s")


def _pieces(text: str, size: int) -> Iterator[str]:
    """Yield text in pieces of about `size` characters that end on whitespace, as a file's
    blocks end (`text_files.iter_blocks`)."""
    start, end_of_text = 0, len(text)
    while start < end_of_text:
        end = start + size
        if end < end_of_text:
            cut = max(text.rfind(space, start, end) for space in " \n\t\r")
            if cut < start:  # no whitespace in the window: up to the next one
                found = _SPACE.search(text, end)
                cut = found.start() if found else end_of_text - 1
            end = cut + 1
        yield text[start:end]
        start = end


@functools.lru_cache(maxsize=8)
def _reader(lowercase: bool, add_eos: bool, word_pattern: str) -> tuple[Any, Any]:
    tokenizer = make_tokenizer(list(SPECIALS), lowercase, add_eos, word_pattern)
    return tokenizer.normalizer, tokenizer.pre_tokenizer


@contextmanager
def _stderr_silenced() -> Iterator[None]:
    """Send file descriptor 2 to the null device while the block runs."""
    saved = os.dup(2)
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(null)


def check_tokenizer_reads(
    path: Path, sample: str, itos: list[str], lowercase: bool, add_eos: bool, word_pattern: str = ""
) -> None:
    """Raise DataError unless the tokenizer saved at `path` encodes `sample` to the ids that
    preparation (`split_words`, the id table `itos`) gives it."""
    from tokenizers import Tokenizer  # lazy

    encoding = Tokenizer.from_file(str(path)).encode(sample)
    words = split_words(sample, lowercase, add_eos, word_pattern)
    stoi = {w: i for i, w in enumerate(itos)}
    ours = encode_words(words, stoi, token_dtype(len(itos))).tolist()
    if ours == encoding.ids:
        return
    at = next(
        (i for i, (a, b) in enumerate(zip(ours, encoding.ids, strict=False)) if a != b),
        min(len(ours), len(encoding.ids)),
    )
    here = repr(words[at]) if at < len(words) else "the end"
    there = repr(encoding.tokens[at]) if at < len(encoding.tokens) else "the end"
    raise DataError(
        f"{path} reads the text otherwise than preparation: word {at + 1} of a sample of the "
        f"train text is {here} for preparation but {there} for the tokenizer; set "
        "data.word_pattern (then the tokenizer's own regex engine cuts the words for both), "
        'e.g. "\\S+" for words between whitespace'
    )


def count_words(
    blocks: Iterable[str], lowercase: bool, add_eos: bool, word_pattern: str = ""
) -> Counter[str]:
    """Return how often each word occurs in the blocks."""
    counts: Counter[str] = Counter()
    for block in blocks:
        counts.update(split_words(block, lowercase, add_eos, word_pattern))
    return counts


def build_vocab(counts: Counter[str], min_count: int, max_vocab: int = 0) -> list[str]:
    """Return the id-to-word table: specials, then words seen >= min_count times by count, ties alphabetical.

    max_vocab > 0 caps the table's length (specials included). The order is the one
    `tokenizers.trainers.WordLevelTrainer` gives.
    """
    words = [(-c, w) for w, c in counts.items() if c >= min_count and w not in SPECIALS]
    words.sort()
    if max_vocab:
        words = words[: max_vocab - len(SPECIALS)]
    return [*SPECIALS, *(w for _, w in words)]


def vocab_hash(itos: list[str]) -> str:
    """Return the sha256 (hex) of the id-to-word table."""
    return hashlib.sha256("\n".join(itos).encode("utf-8")).hexdigest()


def token_dtype(vocab_size: int) -> np.dtype:
    """Return the smallest unsigned dtype (uint16 or uint32) that holds every id."""
    return np.dtype(np.uint16) if vocab_size <= 1 << 16 else np.dtype(np.uint32)


def encode_words(words: list[str], stoi: dict[str, int], dtype: np.dtype) -> np.ndarray:
    """Return the ids of the words (<unk> = 0 for unknown ones) as an array of dtype."""
    get = stoi.get
    ids = array.array("H" if dtype.itemsize == 2 else "I", [get(w, 0) for w in words])
    return np.frombuffer(ids, dtype=dtype)


def make_tokenizer(itos: list[str], lowercase: bool, add_eos: bool, word_pattern: str = "") -> Any:
    """Return a `tokenizers.Tokenizer` (WordLevel; whitespace split, or the words of
    `word_pattern`) that encodes like `split_words`."""
    from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers  # lazy

    tokenizer = Tokenizer(models.WordLevel(vocab={w: i for i, w in enumerate(itos)}, unk_token=UNK))
    steps = [normalizers.Replace(Regex(_PY_ONLY_SPACE), " ")]
    if lowercase:
        steps.append(normalizers.Lowercase())
    if add_eos:
        steps.append(normalizers.Replace("\n", f" {EOS} "))
    tokenizer.normalizer = normalizers.Sequence(steps)
    if word_pattern:  # invert: the pattern matches the words, the rest is dropped
        tokenizer.pre_tokenizer = pre_tokenizers.Split(
            Regex(word_regex(word_pattern)), behavior="removed", invert=True
        )
    else:
        tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.add_special_tokens(list(SPECIALS))
    return tokenizer


def save_tokenizer(
    itos: list[str], path: Path, lowercase: bool, add_eos: bool, word_pattern: str = ""
) -> None:
    """Write the tokenizer of the table to path (tokenizer.json), atomically."""
    write_text(path, make_tokenizer(itos, lowercase, add_eos, word_pattern).to_str(pretty=True))


def itos_of(vocab: dict[str, int], path: Path) -> list[str]:
    """Return the id-to-word table of a word -> id map read from `path` (its tokenizer.json).

    Raise DataError naming the file when the ids are not exactly 0 .. len - 1.
    """
    itos = [""] * len(vocab)
    for word, i in vocab.items():
        if not isinstance(i, int) or not 0 <= i < len(itos) or itos[i]:
            raise DataError(
                f"{path}: word {word!r} has id {i!r}, outside 0..{len(itos) - 1} or taken twice; "
                "HINT: delete the folder and re-run prepare"
            )
        itos[i] = word
    return itos


def load_itos(path: Path, hint: str = "HINT: delete the folder and re-run prepare") -> list[str]:
    """Return the id-to-word table stored in a tokenizer.json (no `tokenizers` import needed)."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise DataError(f"{path}: cannot read the vocabulary ({e.strerror}); {hint}") from None
    return itos_in(data, path, hint)


def itos_in(data: bytes, path: Path, hint: str) -> list[str]:
    """Return the id-to-word table of the bytes of a tokenizer.json read from `path`."""
    try:
        vocab = json.loads(data)["model"]["vocab"]
        return itos_of(vocab, path)
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise DataError(f"{path}: cannot read the vocabulary ({e}); {hint}") from None


class Vocabulary:
    """A saved tokenizer.json, checked against the size and sha256 expected of its id table (a
    prepared corpus's manifest, an exported model's config.json), and against the sha256 of the
    whole file where one was recorded (a manifest's `tokenizer_sha256`): encodes text as the
    corpus was read, decodes ids to words. Each file is read once, on first use.

    `expected` names what it must match in errors ("the shards' vocabulary"), `hint` the fix.
    """

    def __init__(
        self,
        path: Path,
        size: int,
        digest: str,
        expected: str,
        hint: str,
        file_sha256: str | None = None,
    ) -> None:
        self.path = path
        self.vocab_size = size
        self.vocab_hash = digest
        self.file_sha256 = file_sha256
        self._expected = expected
        self._hint = hint
        self._tokenizer: Any = None
        self._itos: list[str] | None = None

    def _check(self, itos: list[str]) -> list[str]:
        if len(itos) != self.vocab_size:
            differs = f"{len(itos)} words, expected {self.vocab_size}"
        elif (digest := vocab_hash(itos)) != self.vocab_hash:
            differs = (
                f"as many words ({len(itos)}) but other words or ids: sha256 of the id table "
                f"{digest[:16]}, expected {self.vocab_hash[:16]}"
            )
        else:
            return itos
        raise DataError(f"{self.path} does not match {self._expected} ({differs}); {self._hint}")

    def read_checked(self) -> bytes:
        """Return the bytes of tokenizer.json once checked: its id table against the expected
        size and hash, the whole file against its recorded sha256 (when one was recorded)."""
        try:
            data = self.path.read_bytes()
        except OSError as e:
            raise DataError(
                f"{self.path}: cannot read the vocabulary ({e.strerror}); {self._hint}"
            ) from None
        itos = self._check(itos_in(data, self.path, self._hint))  # names what differs
        if self.file_sha256 and hashlib.sha256(data).hexdigest() != self.file_sha256:
            raise DataError(
                f"{self.path} does not match the sha256 recorded for it with {self._expected} "
                f"(the file was changed or damaged); {self._hint}"
            )
        self._itos = itos
        return data

    def tokenizer(self) -> Any:
        """Return the `tokenizers.Tokenizer` (loaded once, checked)."""
        if self._tokenizer is None:
            from tokenizers import Tokenizer  # lazy

            data = self.read_checked()
            try:
                tokenizer = Tokenizer.from_str(data.decode("utf-8"))
            except Exception as e:  # tokenizers raises a bare Exception for a malformed file
                raise DataError(f"{self.path}: unreadable tokenizer ({e}); {self._hint}") from None
            self._check(itos_of(tokenizer.get_vocab(with_added_tokens=False), self.path))
            self._tokenizer = tokenizer
        return self._tokenizer

    def itos(self) -> list[str]:
        """Return the id-to-word table (read from tokenizer.json, checked)."""
        if self._itos is None:
            self.read_checked()
        assert self._itos is not None
        return self._itos

    def encode(self, text: str) -> list[int]:
        """Return the ids of text as the saved tokenizer encodes it (each newline is <eos> when add_eos)."""
        return self.tokenizer().encode(text).ids

    def decode(self, ids: Any) -> str:
        """Return the words of ids joined by spaces, each <eos> as a line end."""
        itos = self.itos()
        out: list[str] = []
        line: list[str] = []
        for i in np.asarray(ids, dtype=np.int64).ravel().tolist():
            word = itos[i]
            if word == EOS:
                out.append(" ".join(line) + "\n")
                line = []
            else:
                line.append(word)
        out.append(" ".join(line))
        return "".join(out)
