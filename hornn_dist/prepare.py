"""Command line: prepare a run's corpus (vocabulary + token shards) from its TOML config.

    python -m hornn_dist.prepare configs/text8.toml [--set data.key=value ...] [--workers N] [--verify]

Only the `[data]` section is read. Running it again with the same settings is a no-op.
"""

from __future__ import annotations

import argparse
import os

from hornn_dist.config import KEYS_HELP, add_set_option, load_config
from hornn_dist.data.config import DataConfig
from hornn_dist.runtime import run_cli, setup_logging
from hornn_dist.util.errors import ConfigError, naming_path


def with_data_section(overrides: list[str]) -> list[str]:
    """Return the --set overrides with `data.` before each key that names no section."""
    return [o if "." in o.partition("=")[0] else f"data.{o}" for o in overrides]


def load_data_section(path: str, overrides: list[str]) -> DataConfig:
    """Return the `[data]` settings of a run config; overrides without a section go to `data`."""
    return load_config(path, with_data_section(overrides)).data


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Return the parsed command line, each --set key with its section (default `data`)."""
    parser = argparse.ArgumentParser(
        epilog=KEYS_HELP, prog="hornn_dist.prepare", description=__doc__.splitlines()[0]
    )
    parser.add_argument("config", help="the run's TOML file (its [data] section is used)")
    add_set_option(
        parser,
        "override a key, e.g. --set data.min_count=5 (value in TOML syntax; the section defaults to data)",
        metavar="KEY=VALUE",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        help="processes for reading and encoding local files (default: the cores this "
        "process may use)",
    )
    parser.add_argument(
        "--verify",
        action="store_true",
        help="when already prepared, also check every shard's sha256",
    )
    parser.add_argument(
        "--quiet",
        action="store_true",
        help="no progress (without it: as log.progress says, by default a bar on a terminal and "
        "a log line every 30 s when the output is redirected)",
    )
    args = parser.parse_args(argv)
    args.overrides = with_data_section(args.overrides)
    return args


def main(argv: list[str] | None = None) -> int:
    """Prepare the config's corpus and print its folder and sizes; return the exit code."""
    args = parse_args(argv)
    setup_logging(True)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    run = load_config(args.config, args.overrides)
    cfg = run.data
    cfg.check_heldout()  # the run needs a valid and a test split: refused before any work
    # the trainer's own decision (log.progress "auto": a bar on a terminal, else log lines)
    progress = False if args.quiet else run.log.prepare_progress()
    from hornn_dist.data.pipeline import default_workers, prepare_corpus
    from hornn_dist.data.shards import open_corpus

    workers = default_workers() if args.workers is None else args.workers
    if workers < 1:
        raise ConfigError(f"--workers must be >= 1 (default: the cores here), got {workers}")
    with naming_path(cfg.cache_dir, "data.cache_dir"):  # a full disk, a file in the way
        folder = prepare_corpus(cfg, workers=workers, progress=progress, verify=args.verify)
    corpus = open_corpus(folder, check=False)
    print(f"{folder}")
    for split in corpus.splits:
        info = corpus.manifest["splits"][split]
        print(
            f"  {split:5s} {info['tokens']:>14,} tokens  {len(info['shards'])} shard(s)  <unk> {info['unk_tokens'] / info['tokens']:.2%}"
        )
    print(
        f"  vocab {corpus.vocab_size:,} ({corpus.manifest['dtype']})  sha256 {corpus.vocab_hash[:16]}"
    )
    return 0


def cli() -> None:
    """Console-script entry point (`hornn-prepare`): the same as `python -m hornn_dist.prepare`."""
    run_cli(main)


if __name__ == "__main__":
    cli()
