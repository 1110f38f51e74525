"""Open what the commands share from disk: a prepared corpus and a trained model.

A trained model is a checkpoint (found from a run directory, or `<run>/checkpoints/latest|best`)
or a model folder written by `hornn_dist.export` (config.json, model.safetensors,
tokenizer.json): `resolve_trained`, `open_vocabulary` and `load_model` take either.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

from hornn_dist.config import RunConfig, config_from_dict
from hornn_dist.data.config import DataConfig
from hornn_dist.data.pipeline import corpus_folder
from hornn_dist.data.prepare_wait import prepare_or_wait
from hornn_dist.data.shards import MANIFEST, TOKENIZER, Corpus, open_corpus
from hornn_dist.data.vocab import Vocabulary
from hornn_dist.models import LayerPlan, build_model, plan_for
from hornn_dist.run import checkpoint as ckpt
from hornn_dist.run.checkpoint import WEIGHTS
from hornn_dist.run.run_layout import CONFIG_FILE
from hornn_dist.run.run_state import TrainerState
from hornn_dist.util.errors import CheckpointError, DataError, described, naming_path

log = logging.getLogger(__name__)

# marks a model folder written by hornn_dist.export; checkpoints have config.toml, never this
EXPORTED_CONFIG = "config.json"
MODEL_ARG_HELP = ckpt.CHECKPOINT_ARG_HELP + ", or a model folder written by hornn_dist.export"


def open_prepared_corpus(
    cfg: DataConfig,
    accelerator: Any,
    splits: Iterable[str] | None = None,
    prepare: bool = True,
    progress: bool | str = False,
    at: Path | None = None,
) -> Corpus:
    """Return the corpus of `cfg`, preparing its shards first if they are missing.

    One process prepares, with every core it may use (`prepare_or_wait`); the others wait on
    the file it writes while its heartbeat moves. prepare=False only opens a corpus prepared before
    (evaluate, generate: the config comes from a checkpoint, whose paths are not the user's to
    read from or write to). progress: draw preparation's bars (on the main process).
    at: the prepared folder when known (`prepared_folder`), else the one `cfg` names.

    The shards of `splits` (default: all) are checked against the manifest's sha256 before
    anything reads them, by each machine's main process first: it records what it checked,
    so its other processes, and later runs, read again only shards written since
    (`Corpus.verify_shards`; cost in docs/data.md, "What the shard check costs")."""
    if prepare:
        with naming_path(cfg.cache_dir, "data.cache_dir"):  # a full disk, a file in the way
            folder = prepare_or_wait(cfg, accelerator, progress)
    else:
        folder = at or corpus_folder(cfg)
        if not (folder / MANIFEST).is_file():
            relative = (
                ""
                if os.path.isabs(cfg.cache_dir)
                else (
                    f", or run this command from the folder the run was trained in (its "
                    f"data.cache_dir = {cfg.cache_dir!r} is relative)"
                )
            )
            raise DataError(
                f"the run's prepared corpus is not at {folder}; prepare it there from the run's "
                f"own config (`python -m hornn_dist.prepare RUN_DIR/config.toml`){relative}"
            )
    with accelerator.local_main_process_first():
        try:
            corpus = open_corpus(folder)
            corpus.verify_shards(splits)
            damage = None
        except DataError as e:  # raised past the barrier: the others find it too, no hang
            damage = e
    if damage is not None:
        raise damage
    return corpus


def is_exported(folder: Path) -> bool:
    """Return True for a model folder written by hornn_dist.export."""
    return (folder / EXPORTED_CONFIG).is_file()


def read_exported(folder: Path) -> dict[str, Any]:
    """Return the config.json of an exported model folder, checked against the folder's
    checksums.json and for the keys the commands read."""
    from hornn_dist.models.pretrained import REEXPORT, verify_model_folder  # huggingface_hub

    verify_model_folder(folder, (EXPORTED_CONFIG,))
    path = folder / EXPORTED_CONFIG
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
        missing = [
            key for key in ("model", "vocab_size", "vocab_hash", "training") if key not in meta
        ]
    except (OSError, ValueError, TypeError) as err:
        raise CheckpointError(f"cannot read {path} ({err}); {REEXPORT}") from None
    if missing:
        raise CheckpointError(f"{path} has no {', '.join(missing)}; {REEXPORT}")
    return meta


def resolve_trained(path: str | Path) -> tuple[Path, RunConfig]:
    """Return the folder of a trained model and its run's config: an exported model folder,
    else the checkpoint that `checkpoint.resolve_checkpoint` finds."""
    if is_exported(Path(path)):
        from hornn_dist.models.pretrained import verify_model_folder  # huggingface_hub

        folder = Path(path)
        verify_model_folder(folder, (EXPORTED_CONFIG, WEIGHTS))  # a damaged download: first
        return folder, config_from_dict(read_exported(folder)["training"])
    folder = ckpt.resolve_checkpoint(path)
    return folder, ckpt.read_config(folder)


def prepared_folder(folder: Path, cfg: RunConfig, cache_dir: str | None = None) -> Path:
    """Return the prepared corpus of a trained model: in `cache_dir` (default: the run's
    data.cache_dir), the folder an export names (its config keeps no local path to rebuild
    the name from), else the one the run's config names."""
    data = cfg.data if cache_dir is None else replace(cfg.data, cache_dir=cache_dir)
    prepared = (
        read_exported(folder).get("data", {}).get("prepared") if is_exported(folder) else None
    )
    return Path(data.cache_dir) / prepared if prepared else corpus_folder(data)


def open_vocabulary(folder: Path, cfg: RunConfig, accelerator: Any) -> Corpus | Vocabulary:
    """Return what encodes and decodes a trained model's words: an exported folder's own
    tokenizer.json, else the run's prepared corpus (no shard read)."""
    if not is_exported(folder):
        return open_prepared_corpus(cfg.data, accelerator, splits=(), prepare=False)
    meta = read_exported(folder)
    from hornn_dist.models.pretrained import REEXPORT, verify_model_folder  # huggingface_hub

    verify_model_folder(folder, (TOKENIZER,))
    return Vocabulary(
        folder / TOKENIZER,
        meta["vocab_size"],
        meta["vocab_hash"],
        f"the vocabulary of {folder / EXPORTED_CONFIG}",
        REEXPORT,
    )


def load_model(
    folder: Path,
    cfg: RunConfig,
    corpus: Corpus | Vocabulary,
    device: torch.device | str,
    *,
    mixed_precision: str | None = None,
    batch: int | None = None,
) -> torch.nn.Module:
    """Return the trained model of `folder` (a checkpoint or an exported model folder) on
    `device` in eval mode, after checking its vocabulary.

    Its HORNN layers run as planned (and logged) for `device`, `batch` streams and the
    `mixed_precision` the caller runs the model under; None: the run's evaluation
    (train.eval_batch_size, train.mixed_precision). Where the run's engine cannot run there
    (triton on a CPU), the fused engine runs, with a warning."""
    exported = is_exported(folder)
    if exported:
        trained = read_exported(folder)["vocab_hash"]
    else:
        trained = TrainerState.read(folder).vocab_hash
    if trained != corpus.vocab_hash:
        raise CheckpointError(
            f"{folder} was trained with vocabulary {trained} but the data has "
            f"{corpus.vocab_hash}; point data.cache_dir at the shards used for training"
        )
    plan = _evaluation_plan(cfg, device, mixed_precision, batch)
    if cfg.model.arch == "hornn":
        streams = cfg.train.eval_batch_size if batch is None else batch
        log.info("HORNN layers of %s for %d streams: %s", folder, streams, plan.describe())
    if exported:
        from hornn_dist.models.pretrained import REEXPORT, PretrainedLM  # huggingface_hub

        try:
            model = PretrainedLM.from_pretrained(folder, plan=plan)
        except CheckpointError:  # a file that does not match checksums.json, named
            raise
        except Exception as err:  # safetensors, a missing file, a weight of the wrong shape
            raise CheckpointError(
                f"cannot load the model in {folder} ({described(err)}); " + REEXPORT
            ) from None
        _check_finite(model.state_dict(), f"model folder {folder}")
        return model.to(device).eval()
    problem = ckpt.problem_with(folder, deep=True, only=(WEIGHTS,))  # no optimizer state read
    if problem is not None:
        raise CheckpointError(f"checkpoint {folder} is damaged: {problem}; {_others(folder)}")
    ckpt.check_model_record(folder, cfg)
    path = folder / WEIGHTS
    try:
        weights = load_file(str(path))
    except Exception as err:  # safetensors raises many types: written invalid, checksums too
        raise CheckpointError(
            f"{path} is not a valid weights file ({type(err).__name__}); {_others(folder)}"
        ) from None
    try:
        model = evaluation_model(cfg, corpus.vocab_size, device, weights, plan)
    except RuntimeError as err:  # load_state_dict: missing keys, another shape
        lines = [line.strip() for line in str(err).splitlines()]
        detail = next((line for line in lines if "size mismatch" in line or "key(s)" in line), "")
        raise CheckpointError(
            f"{path} does not fit the model {folder / CONFIG_FILE} describes "
            f"({(detail or described(err))[:200]}): was the config edited after the save? "
            f"{_others(folder).capitalize()}"
        ) from None
    _check_finite(weights, f"checkpoint {folder}")
    return model


def _others(folder: Path) -> str:
    """Return what to do instead of reading a checkpoint that cannot be read: its run's other
    checkpoints (the newest three), or train again."""
    run = ckpt.list_checkpoints(folder.parent.parent, warn=False)
    others = [c.name for c in run if c.name != folder.name][-3:]
    if not others:
        return "its run has no other checkpoint: train again"
    names = ", ".join(reversed(others))
    return f"pass another checkpoint of its run ({names} in {folder.parent}), or train again"


def _check_finite(weights: dict[str, torch.Tensor], what: str) -> None:
    """Raise CheckpointError naming `what` when a weight is NaN or infinite (sampling from it
    fails in torch.multinomial; scoring it gives ppl nan)."""
    bad = ckpt.nonfinite_tensors(weights)
    if bad:
        raise CheckpointError(
            f"{what} holds NaN or infinite weights ({len(bad)} of {len(weights)} tensors, e.g. "
            f"{bad[0]}): its run diverged before this save; use an earlier checkpoint"
        )


def load_model_for(
    folder: Path, cfg: RunConfig, corpus: Corpus | Vocabulary, accelerator: Any, batch: int
) -> torch.nn.Module:
    """Return `load_model`'s model as `accelerator` runs it: on its device, its HORNN layers
    planned for its mixed precision and `batch` streams in all (shared by its processes)."""
    return load_model(
        folder,
        cfg,
        corpus,
        accelerator.device,
        mixed_precision=accelerator.mixed_precision,
        batch=max(1, batch // accelerator.num_processes),
    )


def evaluation_model(
    cfg: RunConfig,
    vocab_size: int,
    device: torch.device | str,
    weights: dict[str, torch.Tensor],
    plan: LayerPlan | None = None,
) -> torch.nn.Module:
    """Return the model of `cfg` holding `weights` on `device` in eval mode, as `evaluate`
    runs it (`load_model`; `plan` default: the run's evaluation); the caller's random
    generator is left where it was."""
    with torch.random.fork_rng(devices=[]):  # built on the CPU: its init draws from the CPU's
        model = build_model(cfg.model, vocab_size, plan or _evaluation_plan(cfg, device))
    model.load_state_dict(weights)
    return model.to(device).eval()


def _evaluation_plan(
    cfg: RunConfig,
    device: torch.device | str,
    mixed_precision: str | None = None,
    batch: int | None = None,
) -> LayerPlan:
    """Return how an evaluated model's HORNN layers run: planned for `device`, `batch` streams
    and `mixed_precision` (None: the run's evaluation batch and mixed precision); fused where
    the run's engine cannot run there."""
    return plan_for(
        cfg.model,
        device,
        cfg.train.eval_batch_size if batch is None else batch,
        cfg.train.mixed_precision if mixed_precision is None else mixed_precision,
        strict=False,
    )
