"""The `[data]` section of a run config: where text comes from and how it becomes token shards."""

from __future__ import annotations

import dataclasses
import functools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hornn_dist.util.errors import ConfigError

SOURCES = ("files", "hub")
PRESETS = ("", "ptb", "text8", "wikitext103", "demo")
CORPORA_DIR = Path(__file__).resolve().parent.parent / "corpora"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
MAX_CHUNK_BYTES = 1 << 30
MAX_NAME = 100  # the cache folder's name adds a hash; file systems allow 255 bytes a name
# Where each preset's corpus comes from when read from local files: what to download and what
# data.path (the {path}) must then hold; and the place the shipped configs and docs/data.md suggest.
PRESET_DOWNLOADS = {
    "ptb": "download Mikolov's http://www.fit.vutbr.cz/~imikolov/rnnlm/simple-examples.tgz, "
    "unpack it and put its data/ptb.train.txt, ptb.valid.txt, ptb.test.txt in the folder {path} "
    "(or set data.path to the unpacked simple-examples folder)",
    "text8": "download http://mattmahoney.net/dc/text8.zip to {path} "
    "(data.path may name text8.zip, the text8 file unzipped from it, or a folder holding either)",
    "wikitext103": "put wiki.train.tokens, wiki.valid.tokens, wiki.test.tokens of WikiText-103 "
    "(the original wikitext-103-v1.zip) in the folder {path}",
}
PRESET_LOCAL_PATHS = {
    "ptb": "data/ptb",
    "text8": "data/text8.zip",
    "wikitext103": "data/wikitext-103",
}

MIN_VOCAB = 4  # <unk>, <eos> and two words: fewer predicts nothing (pipeline refuses it)


@dataclass
class DataConfig:
    """Settings of the data pipeline; a `preset` fills in every key left at its default."""

    preset: str = ""  # "" | ptb | text8 | wikitext103 | demo
    source: str = "files"  # files | hub
    name: str = ""  # corpus name, first part of the cache folder name ("" = derived)
    path: str = ""  # preset: local directory (or file) of the corpus; "" = the hub
    train: list[str] = field(default_factory=list)  # files/globs; with source = "hub": data_files
    valid: list[str] = field(default_factory=list)  # validation files/globs
    test: list[str] = field(default_factory=list)  # test files/globs
    hub_id: str = ""  # dataset id, or a builder name such as "parquet" with data_files
    hub_config: str = ""  # hub dataset config name
    hub_revision: str = ""  # e.g. "refs/convert/parquet" for script-based datasets
    hub_data_dir: str = ""  # hub dataset sub-folder
    text_column: str = "text"  # column holding the text
    train_split: str = "train"  # hub split names; "" = no such split
    valid_split: str = "validation"  # hub split used for validation
    test_split: str = "test"  # hub split used for test
    min_count: int = 1  # words seen fewer times in train become <unk>
    max_vocab: int = 0  # 0 = unlimited, else >= 4: counts <unk> and <eos>
    lowercase: bool = False  # lowercase the text before splitting on whitespace
    # a word, as a regex of the tokenizer's engine (Oniguruma), which cuts the words of the
    # corpus and of every prompt alike; text between words is dropped ("" = split on whitespace)
    word_pattern: str = ""
    add_eos: bool = True  # <eos> at the end of every line
    errors: str = "strict"  # strict | replace (invalid UTF-8)
    heldout_chars: int = 0  # > 0: one text, the last heldout_chars characters held out (text8)
    valid_chars: int = 0  # first valid_chars of the held-out part are valid, the rest test
    shard_tokens: int = 100_000_000  # at most this many tokens per .bin file
    chunk_bytes: int = 1 << 20  # read size; does not change the tokens
    cache_dir: str = "data_cache"  # where prepared shards go (one folder per corpus + settings)
    # several machines: true = every machine sees `cache_dir`, the run's first process
    # prepares; false = each machine's first process prepares into its own `cache_dir`
    cache_shared: bool = True
    # several processes: seconds the waiting ones allow the preparing one's heartbeat
    # (rewritten every 2 s) to stand still before they stop with one line
    prepare_timeout: int = 600

    def __post_init__(self) -> None:
        # The keys the user set (in the TOML file or by --set), recorded by the config loader;
        # None for a DataConfig built in Python, where a key counts as set when off its default.
        self.user_keys: frozenset[str] | None = None

    def keys_set(self) -> frozenset[str]:
        """Return the keys the user set: as the loader recorded them, else those off their default."""
        if self.user_keys is not None:
            return self.user_keys
        defaults = DataConfig()
        return frozenset(
            f.name
            for f in dataclasses.fields(self)
            if getattr(self, f.name) != getattr(defaults, f.name)
        )

    def toml_table(self) -> dict[str, Any]:
        """Return the [data] table to write so that reading it back resolves the same corpus.

        Under a preset only the keys the user set are written (with the preset): the preset
        fills in the others on every read, as it did for this config.
        """
        values = dataclasses.asdict(self)
        if not self.preset:
            return values
        kept = self.keys_set() | {"preset"}
        return {key: value for key, value in values.items() if key in kept}

    def missing_heldout(self) -> list[str]:
        """Return the held-out splits ("valid", "test") the prepared corpus would lack (preset
        applied): a run validates on one and scores the other."""
        cfg = apply_preset(self)
        if cfg.heldout_chars:  # one text, its end cut into valid and test
            have = {"valid": cfg.valid_chars > 0, "test": cfg.valid_chars < cfg.heldout_chars}
        elif cfg.source == "hub":
            have = {"valid": bool(cfg.valid_split), "test": bool(cfg.test_split)}
        else:
            have = {"valid": bool(cfg.valid), "test": bool(cfg.test)}
        return [split for split in ("valid", "test") if not have[split]]

    def check_heldout(self) -> None:
        """Raise ConfigError (one line naming the keys that give them) where the corpus would
        lack a valid or test split, before anything is read or prepared."""
        missing = self.missing_heldout()
        if not missing:
            return
        cfg = apply_preset(self)
        lacks = " and ".join(f"no {split} split" for split in missing)
        if cfg.heldout_chars:
            raise ConfigError(
                f"data.heldout_chars = {cfg.heldout_chars} with data.valid_chars = "
                f"{cfg.valid_chars} leaves {lacks}, which a run validates and tests on: set "
                "data.valid_chars between 1 and data.heldout_chars - 1 (the held-out "
                "characters that validate; the rest test)"
            )
        keys = [
            f"data.{split}_split" if cfg.source == "hub" else f"data.{split}" for split in missing
        ]
        raise ConfigError(
            f"the corpus would have {lacks} ({' and '.join(keys)} empty), which a run validates "
            f"and tests on: name {'them' if len(keys) > 1 else 'it'} in {' and '.join(keys)}, "
            "or hold out the end of the train text: data.heldout_chars = N (its last N "
            "characters) with data.valid_chars = M (the first M of them validate, the rest test)"
        )

    def validate(self) -> None:
        """Raise ConfigError naming the first key whose value is out of range."""
        if self.preset not in PRESETS:
            raise ConfigError(
                f"data.preset must be one of {', '.join(PRESETS[1:])} or empty; got {self.preset!r}"
            )
        if self.source not in SOURCES:
            raise ConfigError(
                f"data.source must be one of {', '.join(SOURCES)}; got {self.source!r}"
            )
        if self.name and not _NAME.match(self.name):
            raise ConfigError(
                f"data.name must be letters, digits, '.', '_' or '-'; got {self.name!r}"
            )
        if len(self.name) > MAX_NAME:  # it names a folder, whose name the file system limits
            raise ConfigError(
                f"data.name must be at most {MAX_NAME} characters, got {len(self.name)}"
            )
        if self.min_count < 1:
            raise ConfigError(f"data.min_count must be >= 1, got {self.min_count}")
        if self.max_vocab < 0 or 0 < self.max_vocab < MIN_VOCAB:
            raise ConfigError(
                f"data.max_vocab must be 0 (unlimited) or >= {MIN_VOCAB} (<unk>, <eos> and the "
                f"two words a language model needs at least), got {self.max_vocab}"
            )
        if self.shard_tokens < 1:
            raise ConfigError(f"data.shard_tokens must be >= 1, got {self.shard_tokens}")
        if not 16 <= self.chunk_bytes <= MAX_CHUNK_BYTES:  # one read is held in memory at once
            raise ConfigError(
                f"data.chunk_bytes must be between 16 and {MAX_CHUNK_BYTES}, got {self.chunk_bytes}"
            )
        if self.errors not in ("strict", "replace"):
            raise ConfigError(f"data.errors must be 'strict' or 'replace', got {self.errors!r}")
        if self.heldout_chars < 0:
            raise ConfigError(
                f"data.heldout_chars must be >= 0 (0 = off), got {self.heldout_chars}"
            )
        if self.valid_chars < 0 or (self.heldout_chars and self.valid_chars > self.heldout_chars):
            raise ConfigError(
                f"data.valid_chars must be between 0 and data.heldout_chars = {self.heldout_chars}, got {self.valid_chars}"
            )
        if not self.cache_dir:
            raise ConfigError("data.cache_dir must not be empty")
        if not 5 <= self.prepare_timeout <= 7 * 86400:
            raise ConfigError(
                f"data.prepare_timeout must be between 5 and 604800 seconds, got {self.prepare_timeout}"
            )
        if self.word_pattern:
            check_word_pattern(self.word_pattern)
        if self.path and self.preset not in PRESET_DOWNLOADS:
            raise ConfigError(
                f"data.path is read by the {', '.join(PRESET_DOWNLOADS)} presets only, not by "
                f"data.preset = {self.preset!r}; name your own files in data.train, data.valid "
                "and data.test instead"
            )


# The bundled demo corpus is cut as hornn_dist/corpora/make_demo.py cut the King James text:
# lowercase runs of letters, and a possessive 's on its own (punctuation and digits dropped).
DEMO_WORDS = r"[a-z]+|'s\b"


# Text with letters, digits, punctuation, spaces and non-ASCII (NFD too) for the check below
_PROBE = "The cat's 42 dogs, cab b_x-y. (naïve) cafe\u0301 ΣΑΣ 日本 x\u00b2 $\n\t<eos> <unk> a1"


@functools.lru_cache(maxsize=8)
def check_word_pattern(pattern: str) -> None:
    """Raise ConfigError unless `pattern` is a regex of the tokenizer's engine (Oniguruma, which
    cuts the words in preparation and later) that matches no empty word in a probe text."""
    from tokenizers import Regex, normalizers, pre_tokenizers  # lazy

    try:
        regex = Regex(pattern)
    except Exception as err:  # tokenizers raises a bare Exception for a bad pattern
        raise ConfigError(
            f'data.word_pattern {pattern!r} is not a regex ({err}); e.g. "[a-z]+" for runs '
            'of letters, or "" to split on whitespace'
        ) from None
    # every match, empty ones too, becomes a mark; the pre-tokenizer keeps non-empty ones only
    try:
        marks = normalizers.Replace(regex, "\x00").normalize_str(_PROBE).count("\x00")
        split = pre_tokenizers.Split(regex, behavior="removed", invert=True)
        words = split.pre_tokenize_str(_PROBE)
    except BaseException as err:  # pyo3's PanicException (the engine's retry limit)
        if type(err).__name__ != "PanicException":
            raise
        raise ConfigError(
            f"data.word_pattern {pattern!r} backtracks past the regex engine's retry limit on "
            "a short text; write it without a repeat inside a repeat (e.g. a+ for (?:a+)+)"
        ) from None
    if marks > len(words):
        raise ConfigError(
            f"data.word_pattern {pattern!r} matches empty words (a word needs at least one "
            'character: no lookaround or \\b on its own, + rather than *, e.g. "[a-z]+")'
        )


def _ptb(cfg: DataConfig) -> dict[str, Any]:
    values: dict[str, Any] = {"name": "ptb", "min_count": 1, "add_eos": True}
    if cfg.path:
        folder = Path(cfg.path)
        if not (folder / "ptb.train.txt").exists() and (folder / "data" / "ptb.train.txt").exists():
            folder = folder / "data"  # Mikolov's simple-examples/ layout
        values.update(
            source="files",
            **{s: [str(folder / f"ptb.{s}.txt")] for s in ("train", "valid", "test")},
        )
    else:
        values.update(
            source="hub",
            hub_id="ptb-text-only/ptb_text_only",
            hub_revision="refs/convert/parquet",
            hub_data_dir="penn_treebank",
            text_column="sentence",
        )
    return values


def _text8(cfg: DataConfig) -> dict[str, Any]:
    values: dict[str, Any] = {
        "name": "text8",
        "min_count": 10,
        "add_eos": False,
        "heldout_chars": 1_000_000,
        "valid_chars": 500_000,
    }
    if cfg.path:
        path = Path(cfg.path)
        if path.is_dir():
            found = [path / n for n in ("text8", "text8.zip") if (path / n).exists()]
            path = found[0] if found else path / "text8"
        values.update(source="files", train=[str(path)])
    else:
        values.update(source="hub", hub_id="afmck/text8", text_column="text")
    return values


def _wikitext103(cfg: DataConfig) -> dict[str, Any]:
    values: dict[str, Any] = {"name": "wikitext103", "min_count": 1, "add_eos": True}
    if cfg.path:
        folder = Path(cfg.path)
        values.update(
            source="files",
            **{s: [str(folder / f"wiki.{s}.tokens")] for s in ("train", "valid", "test")},
        )
    else:
        values.update(
            source="hub",
            hub_id="Salesforce/wikitext",
            hub_config="wikitext-103-v1",
            text_column="text",
        )
    return values


def _demo(cfg: DataConfig) -> dict[str, Any]:
    files = {s: [str(CORPORA_DIR / f"demo.{s}.txt.gz")] for s in ("train", "valid", "test")}
    return {
        "name": "demo",
        "source": "files",
        "min_count": 2,
        "add_eos": True,
        "lowercase": True,  # the corpus is lowercase: prompts read as it was
        "word_pattern": DEMO_WORDS,
        **files,
    }


_PRESETS = {"ptb": _ptb, "text8": _text8, "wikitext103": _wikitext103, "demo": _demo}


def preset_hub_id(preset: str) -> str:
    """Return the hub dataset a preset reads when data.path is empty ("" if it has none)."""
    return _PRESETS[preset](DataConfig(preset=preset)).get("hub_id", "") if preset else ""


def apply_preset(cfg: DataConfig) -> DataConfig:
    """Return a copy of cfg with its preset's values in every key the user did not set."""
    cfg.validate()
    if not cfg.preset:
        return dataclasses.replace(cfg)
    values = _PRESETS[cfg.preset](cfg)
    chosen = cfg.keys_set()
    ignored = [
        f"data.{key}" for key in ("train", "valid", "test") if key in values and key in chosen
    ]
    if cfg.path and ignored:  # the preset would read the user's files, not data.path's
        named = ", ".join(ignored)
        raise ConfigError(
            f"data.path = {cfg.path!r} would be ignored: the {cfg.preset} preset reads its files "
            f"from data.path only where {named} is not set; keep data.path or {named}, not both"
        )
    changes = {k: v for k, v in values.items() if k not in chosen}
    resolved = dataclasses.replace(cfg, **changes)
    resolved.validate()
    return resolved
