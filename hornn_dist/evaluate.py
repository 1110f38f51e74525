"""Evaluate a checkpoint: `python -m hornn_dist.evaluate CHECKPOINT_OR_RUN_DIR --split test`.

Prints which checkpoint it scores (a run directory: its newest, the last weights; the run's own
test score is of `RUN/checkpoints/best`), then the split's token count, mean loss and perplexity. Works under `accelerate launch` too:
each rank evaluates its streams and the sums are reduced.
"""

from __future__ import annotations

import argparse
import os

from hornn_dist import checkpoint as ckpt
from hornn_dist.config import KEYS_HELP
from hornn_dist.errors import DataError
from hornn_dist.loading import (
    MODEL_ARG_HELP,
    is_exported,
    load_model_for,
    open_prepared_corpus,
    resolve_trained,
)
from hornn_dist.models.precision import resolve_mixed_precision
from hornn_dist.runtime import build_accelerator, run_cli, setup_logging
from hornn_dist.training.scoring import score_split


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Return the parsed command line."""
    parser = argparse.ArgumentParser(
        epilog=KEYS_HELP, prog="hornn_dist.evaluate", description=__doc__.splitlines()[0]
    )
    parser.add_argument("checkpoint", help=MODEL_ARG_HELP)
    parser.add_argument("--split", default="test", help="split to evaluate (default: test)")
    parser.add_argument(
        "--batch-size",
        type=int,
        default=0,
        help="evaluation streams (default: the run's train.eval_batch_size)",
    )
    parser.add_argument(
        "--bptt", type=int, default=0, help="window length (default: the run's train.bptt)"
    )
    return parser.parse_args(argv)


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
    corpus = open_prepared_corpus(cfg.data, accelerator, splits=[args.split], prepare=False)
    if args.split not in corpus.splits:
        raise DataError(
            f"split {args.split!r} not in the corpus; choose one of {', '.join(corpus.splits)}"
        )
    batch = args.batch_size or cfg.train.eval_batch_size
    model = load_model_for(folder, cfg, corpus, accelerator, batch)
    result = score_split(
        model,
        corpus,
        args.split,
        accelerator,
        batch,
        args.bptt or cfg.train.bptt,
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
