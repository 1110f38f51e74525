"""Export a trained model as a Hub model folder: `python -m hornn_dist.export RUN_OR_CHECKPOINT OUT_DIR`.

OUT_DIR gets config.json, model.safetensors, the corpus's tokenizer.json (checked against the
corpus's manifest first), a model card (README.md) with the test perplexity, scored here, and
the run's config, and checksums.json (size and sha256 of every file but the card, checked by
whatever loads the folder). It loads back with
`PretrainedLM.from_pretrained(OUT_DIR)` (hornn_dist.models.pretrained); `evaluate` and
`generate` take it as they take a checkpoint; `hf upload USER/NAME OUT_DIR` puts it on the Hub.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from hornn_dist.config import KEYS_HELP, RunConfig, tomllib
from hornn_dist.data.shards import TOKENIZER, Corpus
from hornn_dist.data.vocab import EOS, UNK
from hornn_dist.models.precision import resolve_mixed_precision
from hornn_dist.run import checkpoint as ckpt
from hornn_dist.run.loading import load_model_for, open_prepared_corpus
from hornn_dist.run.run_state import TrainerState
from hornn_dist.runtime import build_accelerator, run_cli, setup_logging, stop_signals_end
from hornn_dist.training.scoring import EvalResult, score_split
from hornn_dist.util.errors import ConfigError, naming_path
from hornn_dist.util.files import new_folder_beside, remove_stale_beside, write_bytes, write_json
from hornn_dist.util.writable import check_writable_folder

SPLIT = "test"  # the split whose perplexity the model card gives
SOURCE_LISTS = ("train", "valid", "test")  # the [data] keys that list files


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Return the parsed command line."""
    parser = argparse.ArgumentParser(
        epilog=KEYS_HELP, prog="hornn_dist.export", description=__doc__.splitlines()[0]
    )
    parser.add_argument("checkpoint", help=ckpt.CHECKPOINT_ARG_HELP)
    parser.add_argument("out_dir", help="the model folder to write (new, or an empty folder)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Write a checkpoint's model as a Hub model folder with its test perplexity; return the exit code."""
    args = parse_args(argv)
    out = Path(args.out_dir)
    if out.is_symlink():  # the folder is renamed into place: a link would be replaced
        raise ConfigError(
            f"{out} is a symbolic link (to {os.readlink(out)}); export into a new folder"
        )
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ConfigError(f"{out} exists and is not an empty folder; export into a new one")
    check_writable_folder(out.absolute().parent, "OUT_DIR")  # before scoring
    folder = ckpt.resolve_checkpoint(args.checkpoint)
    with stop_signals_end(f"exporting {folder}: nothing was written to {out}"):
        return export(folder, out)


def export(folder: Path, out: Path) -> int:
    """Score the checkpoint in `folder` and write its model folder at `out`; return 0."""
    cfg = ckpt.read_config(folder)
    accelerator = build_accelerator(
        resolve_mixed_precision(cfg.train.mixed_precision, cfg.model.arch).name
    )
    setup_logging(accelerator.is_main_process)
    corpus = open_prepared_corpus(cfg.data, accelerator, splits=[SPLIT], prepare=False)
    train = cfg.train
    model = load_model_for(folder, cfg, corpus, accelerator, train.eval_batch_size)
    result = score_split(model, corpus, SPLIT, accelerator, train.eval_batch_size, train.bptt)
    if accelerator.is_main_process:
        with naming_path(out.absolute().parent, "OUT_DIR"):  # a disk that fills meanwhile
            write_model_folder(model, cfg, corpus, result, folder, out)
        print(f"exported {folder} to {out} ({SPLIT} ppl {result.ppl:.2f})")
    return 0


def write_model_folder(
    model: Any, cfg: RunConfig, corpus: Corpus, result: EvalResult, checkpoint: Path, out: Path
) -> None:
    """Write `model` as a Hub model folder at `out`, whole or not at all (built beside it, then
    renamed)."""
    from hornn_dist.models.pretrained import TOKENIZER_CONFIG, PretrainedLM  # huggingface_hub

    shared, reduced = portable_config(cfg)
    hub = PretrainedLM(cfg.model, corpus.vocab_size)
    hub.load_state_dict(model.state_dict())
    step = TrainerState.read(checkpoint).step
    scores = {"tokens": result.tokens, "loss": result.loss, "ppl": result.ppl}
    config = {
        "model": dataclasses.asdict(cfg.model),
        "vocab_size": corpus.vocab_size,
        "vocab_hash": corpus.vocab_hash,
        "training": tomllib.loads(shared.to_toml()),
        # what identifies the data, where no local path does: evaluate finds the corpus by it
        "data": {
            "prepared": corpus.folder.name,
            "corpus_hash": corpus.content_hash,
            "vocab_hash": corpus.vocab_hash,
            "tokens": {
                split: corpus.manifest["splits"][split]["tokens"] for split in corpus.splits
            },
        },
        "checkpoint": {"step": step, SPLIT: scores},
    }
    card = {
        "title": out.resolve().name,
        "model_words": cfg.model.describe(),
        "parameters": f"{hub.num_parameters():,}",
        "vocab_size": f"{corpus.vocab_size:,}",
        "split": SPLIT,
        "ppl": f"{result.ppl:.2f}",
        "tokens": f"{result.tokens:,}",
        "loss": f"{result.loss:.4f}",
        "checkpoint": f"`{checkpoint.name}` (step {step}) of run `{shared.train.output_dir}`",
        "where": out.resolve().name,
        "config_toml": shared.to_toml(),
        "removed": removed_paths_note(reduced, corpus.folder.name),
    }
    tokenizer = corpus.vocab.read_checked()  # the bytes copied are the bytes checked
    out.parent.mkdir(parents=True, exist_ok=True)
    for stale in remove_stale_beside(out):
        print(f"note: removed a stale temporary export folder {stale} (its export was killed)",
              file=sys.stderr)  # fmt: skip
    tmp = new_folder_beside(out)
    try:
        write_bytes(tmp / TOKENIZER, tokenizer)
        write_json(tmp / TOKENIZER_CONFIG, tokenizer_settings(corpus))
        hub.save_pretrained(tmp, config=config, model_card_kwargs=card)  # and checksums.json
        os.replace(tmp, out)  # onto a missing or empty folder
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def portable_config(cfg: RunConfig) -> tuple[RunConfig, list[str]]:
    """Return the run's config with every local path (absolute, from ~, or climbing out with
    ..) reduced to its last part, and the keys so reduced: an export may be uploaded as is."""
    reduced: list[str] = []

    def local(key: str, value: str) -> str:
        parts = Path(value).parts
        if not (os.path.isabs(value) or value.startswith("~") or ".." in parts):
            return value
        if key not in reduced:
            reduced.append(key)
        return Path(value).name

    data = dataclasses.replace(
        cfg.data,
        path=local("data.path", cfg.data.path) if cfg.data.path else "",
        cache_dir=local("data.cache_dir", cfg.data.cache_dir),
        **{s: [local(f"data.{s}", v) for v in getattr(cfg.data, s)] for s in SOURCE_LISTS},
    )
    train = dataclasses.replace(
        cfg.train, output_dir=local("train.output_dir", cfg.train.output_dir)
    )
    return dataclasses.replace(cfg, data=data, train=train), reduced


def removed_paths_note(reduced: list[str], prepared: str) -> str:
    """Return the model card's line on the local paths the export left out."""
    keys = ", ".join(f"`{key}`" for key in reduced)
    cut = f"Local paths were reduced to their last part ({keys}); t" if reduced else "T"
    return (
        f"{cut}he corpus is named by its prepared folder `{prepared}`, its content and "
        'vocabulary hashes and its split sizes (config.json, "data").'
    )


def tokenizer_settings(corpus: Corpus) -> dict[str, str]:
    """Return tokenizer_config.json: the special words that `transformers`'
    `PreTrainedTokenizerFast.from_pretrained(OUT_DIR)` sets (tokenizer.json alone sets none)."""
    settings = {"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": UNK}
    if EOS in corpus.tokenizer().get_vocab():
        settings["eos_token"] = EOS
    return settings


def cli() -> None:
    """Console-script entry point (`hornn-export`): the same as `python -m hornn_dist.export`."""
    run_cli(main)


if __name__ == "__main__":
    cli()
