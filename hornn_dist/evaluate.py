"""Evaluate a checkpoint: `python -m hornn_dist.evaluate CHECKPOINT_OR_RUN_DIR --split test`.

Prints which checkpoint it scores (a run directory: its newest, the last weights; the run's own
test score is of `RUN/checkpoints/best`), then the split's token count, mean loss and perplexity. Works under `accelerate launch` too:
each rank evaluates its streams and the sums are reduced.
"""

from __future__ import annotations

import argparse
import os

from hornn_dist.config import KEYS_HELP
from hornn_dist.models.precision import resolve_mixed_precision
from hornn_dist.run import checkpoint as ckpt
from hornn_dist.run.loading import (
    MODEL_ARG_HELP,
    is_exported,
    load_model_for,
    open_prepared_corpus,
    prepared_folder,
    resolve_trained,
)
from hornn_dist.runtime import build_accelerator, run_cli, setup_logging
from hornn_dist.training.scoring import score_split
from hornn_dist.util.errors import DataError


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Return the parsed command line."""
    parser = argparse.ArgumentParser(
        epilog=KEYS_HELP, prog="hornn_dist.evaluate", description=__doc__.splitlines()[0]
    )
    parser.add_argument("checkpoint", help=MODEL_ARG_HELP)
    parser.add_argument("--split", default="test", help="split to evaluate (default: test)")
    parser.add_argument(
        "--batch-size",
        type=at_least_one,
        default=None,
        help="evaluation streams, >= 1 (default: the run's train.eval_batch_size)",
    )
    parser.add_argument(
        "--bptt",
        type=at_least_one,
        default=None,
        help="window length, >= 1 (default: the run's train.bptt)",
    )
    parser.add_argument(
        "--cache-dir",
        default=None,
        help="the folder holding the prepared corpus (default: the run's data.cache_dir; an "
        "exported model's config keeps only its last part)",
    )
    return parser.parse_args(argv)


def at_least_one(text: str) -> int:
    """Return `text` as an int of at least 1 (argparse then names the option that got it)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is below 1 (leave it out for the run's own)")
    return value


def main(argv: list[str] | None = None) -> int:
    """Evaluate a checkpoint on one split and print tokens, loss and perplexity; return the exit code."""
    args = parse_args(argv)
    setup_logging(os.environ.get("RANK", "0") == "0")  # resolving `best` says what it picked
    folder, cfg = resolve_trained(args.checkpoint)
    what = "an exported model folder" if is_exported(folder) else ckpt.describe_checkpoint(folder)
    accelerator = build_accelerator(
        resolve_mixed_precision(cfg.train.mixed_precision, cfg.model.arch).name
    )
    setup_logging(accelerator.is_main_process)
    at = prepared_folder(folder, cfg, args.cache_dir)
    corpus = open_prepared_corpus(cfg.data, accelerator, [args.split], prepare=False, at=at)
    if args.split not in corpus.splits:
        raise DataError(
            f"split {args.split!r} not in the corpus; choose one of {', '.join(corpus.splits)}"
        )
    batch = cfg.train.eval_batch_size if args.batch_size is None else args.batch_size
    model = load_model_for(folder, cfg, corpus, accelerator, batch)
    result = score_split(
        model,
        corpus,
        args.split,
        accelerator,
        batch,
        cfg.train.bptt if args.bptt is None else args.bptt,
        batch_key="--batch-size",
        bptt_key="--bptt",
    )
    if accelerator.is_main_process:
        print(f"checkpoint {folder} ({what})")
        print(
            f"split {args.split}: tokens {result.tokens} loss {result.loss:.4f} ppl {result.ppl:.2f}"
        )
    return 0


def cli() -> None:
    """Console-script entry point (`hornn-evaluate`): the same as `python -m hornn_dist.evaluate`."""
    run_cli(main)


if __name__ == "__main__":
    cli()
