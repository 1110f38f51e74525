"""The `[data]` section of a run config: where text comes from and how it becomes token shards."""

from __future__ import annotations

from dataclasses import dataclass, field

from hornn_dist.errors import ConfigError

SOURCES = ("files", "hub")
PRESETS = ("", "ptb", "text8", "wikitext103", "demo")


@dataclass
class DataConfig:
    """Settings of the data pipeline; a `preset` fills in everything else for a known corpus."""

    preset: str = ""  # "" | ptb | text8 | wikitext103 | demo
    source: str = "files"  # files | hub
    name: str = ""  # corpus name used in the cache folder name
    path: str = ""  # preset: local directory or file of the corpus
    train: list[str] = field(default_factory=list)  # files/globs (source = "files")
    valid: list[str] = field(default_factory=list)
    test: list[str] = field(default_factory=list)
    hub_id: str = ""
    hub_config: str = ""
    hub_revision: str = ""
    text_column: str = "text"
    train_split: str = "train"
    valid_split: str = "validation"
    test_split: str = "test"
    min_count: int = 1
    max_vocab: int = 0  # 0 = unlimited
    lowercase: bool = False
    add_eos: bool = True
    errors: str = "strict"  # strict | replace (invalid UTF-8)
    shard_tokens: int = 100_000_000
    cache_dir: str = "data_cache"

    def validate(self) -> None:
        """Raise ConfigError naming the first key whose value is out of range."""
        if self.preset not in PRESETS:
            raise ConfigError(f"data.preset must be one of {', '.join(PRESETS[1:])} or empty; got {self.preset!r}")
        if self.source not in SOURCES:
            raise ConfigError(f"data.source must be one of {', '.join(SOURCES)}; got {self.source!r}")
        if self.min_count < 1:
            raise ConfigError(f"data.min_count must be >= 1, got {self.min_count}")
        if self.max_vocab < 0:
            raise ConfigError(f"data.max_vocab must be >= 0 (0 = unlimited), got {self.max_vocab}")
        if self.shard_tokens < 1:
            raise ConfigError(f"data.shard_tokens must be >= 1, got {self.shard_tokens}")
        if self.errors not in ("strict", "replace"):
            raise ConfigError(f"data.errors must be 'strict' or 'replace', got {self.errors!r}")
