"""Open what the commands share from disk: a prepared corpus and a trained model.

A trained model is a checkpoint (found from a run directory, or `<run>/checkpoints/latest|best`)
or a model folder written by `hornn_dist.export` (config.json, model.safetensors,
tokenizer.json): `resolve_trained`, `open_vocabulary` and `load_model` take either.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

from hornn_dist import checkpoint as ckpt
from hornn_dist.checkpoint import WEIGHTS, read_trainer_state
from hornn_dist.config import RunConfig, config_from_dict
from hornn_dist.data.config import DataConfig
from hornn_dist.data.pipeline import corpus_folder, default_workers, prepare_corpus
from hornn_dist.data.shards import MANIFEST, TOKENIZER, Corpus, open_corpus
from hornn_dist.data.vocab import Vocabulary
from hornn_dist.errors import CheckpointError, DataError, HornnError, described, naming_path
from hornn_dist.files import write_text
from hornn_dist.models import LayerPlan, build_model, plan_for

log = logging.getLogger(__name__)
WAIT_LOG_S = 30.0  # a waiting process says what it waits for this often
HEARTBEAT_S = 2.0  # the preparing process rewrites its heartbeat file this often
LONG_WAIT_S = 10.0  # a wait for the preparation longer than this is a warning, else INFO

# marks a model folder written by hornn_dist.export; checkpoints have config.toml, never this
EXPORTED_CONFIG = "config.json"
MODEL_ARG_HELP = ckpt.CHECKPOINT_ARG_HELP + ", or a model folder written by hornn_dist.export"


def open_prepared_corpus(
    cfg: DataConfig,
    accelerator: Any,
    splits: Iterable[str] | None = None,
    prepare: bool = True,
    progress: bool = False,
) -> Corpus:
    """Return the corpus of `cfg`, preparing its shards first if they are missing.

    One process prepares, with every core it may use (`prepare_or_wait`); the others wait on
    the file it writes while its heartbeat moves. prepare=False only opens a corpus prepared before
    (evaluate, generate: the config comes from a checkpoint, whose paths are not the user's to
    read from or write to). progress: draw preparation's bars (on the main process).

    The shards of `splits` (default: all) are checked against the manifest's sha256 before
    anything reads them, by each machine's main process first: it records what it checked,
    so its other processes, and later runs, read again only shards written since
    (`Corpus.verify_shards`; cost in docs/data.md, "What the shard check costs")."""
    if prepare:
        with naming_path(cfg.cache_dir, "data.cache_dir"):  # a full disk, a file in the way
            folder = prepare_or_wait(cfg, accelerator, progress)
    else:
        folder = corpus_folder(cfg)
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


def failure_marker(folder: Path) -> Path:
    """Return the file where the preparing process writes the one line of its failure."""
    return folder.with_name(f"{folder.name}.failed")


def heartbeat_file(folder: Path) -> Path:
    """Return the file the preparing process rewrites every HEARTBEAT_S seconds."""
    return folder.with_name(f"{folder.name}.heartbeat")


def prepare_or_wait(
    cfg: DataConfig, accelerator: Any, progress: bool = False, poll_s: float = 0.5
) -> Path:
    """Return the prepared folder of `cfg`: prepared by this process, or waited for.

    The preparing process is the run's first (data.cache_shared = true: every machine sees
    cache_dir) or each machine's first (false: a cache_dir of its own); it uses every core it
    may use. The others wait, with no collective (preparing may take longer than any
    collective timeout), for the folder's manifest.json (written last, the folder renamed
    into place when complete) with the heartbeat file gone (written before the others look,
    removed when the preparing process is done: an existing folder may still be refused,
    e.g. for a changed source text) or for the failure marker, logging what they wait for every
    30 s. Meanwhile a thread of the preparing process rewrites a heartbeat file beside the
    folder; a waiter that sees it still for data.prepare_timeout seconds (the process was
    stopped, died or its machine hangs) ends with one line. A failed preparation ends every
    process with the same one line: the preparing process writes it to the marker, the others
    raise it. The only collectives are at the start (all present: an earlier run's marker is
    gone before anyone looks) and after a failure (all present: everyone has read the line
    before the launcher stops the processes)."""
    bars = progress and accelerator.is_main_process
    if accelerator.num_processes == 1:
        return prepare_corpus(cfg, workers=default_workers(), progress=bars)
    folder = corpus_folder(cfg)
    marker = failure_marker(folder)
    prepares = (
        accelerator.is_main_process if cfg.cache_shared else accelerator.is_local_main_process
    )
    beat = heartbeat_file(folder)
    if prepares:
        marker.unlink(missing_ok=True)
        folder.parent.mkdir(parents=True, exist_ok=True)
        _write_line(beat, "0")  # there before the others look: they wait while it is
    accelerator.wait_for_everyone()
    if prepares:
        try:
            with _beating(beat):  # removed last, after a failure's marker is written
                try:
                    return prepare_corpus(cfg, workers=default_workers(), progress=bars)
                except Exception as err:
                    line = str(err) if isinstance(err, HornnError) else _unexpected(err, folder)
                    _write_line(marker, line)
                    raise
        except Exception:
            _barrier_quietly(accelerator)
            raise
    return _wait_for(folder, marker, accelerator, cfg, poll_s)


@contextmanager
def _beating(beat: Path) -> Iterator[None]:
    """Rewrite `beat` with a growing count every HEARTBEAT_S seconds from a thread while the
    block runs (a stopped or dead process stops it); remove it afterwards."""
    done = threading.Event()

    def beat_until_done() -> None:
        count = 0
        while True:
            count += 1
            _write_line(beat, str(count))
            if done.wait(HEARTBEAT_S):
                return

    thread = threading.Thread(target=beat_until_done, name="prepare-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
        beat.unlink(missing_ok=True)


def _unexpected(err: BaseException, folder: Path) -> str:
    return f"preparing {folder} failed on {socket.gethostname()} ({described(err)})"


def _write_line(path: Path, line: str) -> None:
    """Write one line to path at once (a reader sees all of it or no file)."""
    try:
        write_text(path, line + "\n")
    except OSError:  # the others then stop with the launcher; this process's error still shows
        pass


def _barrier_quietly(accelerator: Any) -> None:
    """Meet the others; a peer already gone must not replace the error being raised."""
    try:
        accelerator.wait_for_everyone()
    except RuntimeError:
        pass


def _read_beat(beat: Path) -> str | None:
    """Return the heartbeat file's content, None while there is none."""
    try:
        return beat.read_text(encoding="utf-8")
    except OSError:
        return None


def _wait_for(folder: Path, marker: Path, accelerator: Any, cfg: DataConfig, poll_s: float) -> Path:
    """Wait until folder is prepared (return it), its preparation failed, or the preparing
    process's heartbeat stood still for data.prepare_timeout seconds (raise DataError)."""
    rank = accelerator.process_index
    who = (
        "rank 0"
        if cfg.cache_shared
        else f"this machine's first process (rank {rank - accelerator.local_process_index})"
    )
    beat = heartbeat_file(folder)
    started = time.monotonic()
    next_log = started + LONG_WAIT_S  # a short wait (the usual start) says nothing
    last_beat, moved = _read_beat(beat), started  # by this clock: another machine's may differ
    while True:
        # a complete folder is not enough (an earlier run's may be refused): the heartbeat must
        # be gone too, and is looked at before the marker, which is written before it goes
        settled = not beat.exists()
        if marker.is_file():
            line = marker.read_text(encoding="utf-8").strip()
            _barrier_quietly(accelerator)
            raise DataError(line)
        if settled and (folder / MANIFEST).is_file():
            break
        now = time.monotonic()
        current = _read_beat(beat)
        if current != last_beat:
            last_beat, moved = current, now
        elif now - moved > cfg.prepare_timeout:
            # no barrier: the preparing process would never reach it
            raise DataError(
                f"rank {rank}: {who} preparing {folder} shows no sign of life: its heartbeat "
                f"{beat} has not moved for {now - moved:.0f} s (data.prepare_timeout = "
                f"{cfg.prepare_timeout}); it was stopped, died or its machine hangs: see its "
                "log and run again (the preparation restarts), or raise data.prepare_timeout"
            )
        if now >= next_log:
            log.warning(
                "rank %d: waiting for %s to prepare %s (%.0f s so far; its heartbeat moved "
                "%.0f s ago, data.prepare_timeout = %d s)",
                rank,
                who,
                folder,
                now - started,
                now - moved,
                cfg.prepare_timeout,
            )
            next_log = now + WAIT_LOG_S
        time.sleep(poll_s)
    waited = time.monotonic() - started
    level = logging.WARNING if waited >= LONG_WAIT_S else logging.INFO
    log.log(level, "rank %d: %s is prepared; waited %.1f s", rank, folder, waited)
    return folder


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
        folder = Path(path)
        return folder, config_from_dict(read_exported(folder)["training"])
    folder = ckpt.resolve_checkpoint(path)
    return folder, ckpt.read_config(folder)


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
    trained = read_exported(folder) if exported else read_trainer_state(folder)
    if trained.get("vocab_hash") != corpus.vocab_hash:
        raise CheckpointError(
            f"{folder} was trained with vocabulary {trained.get('vocab_hash')} but the data has "
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
    path = folder / WEIGHTS
    try:
        weights = load_file(str(path))
        model = evaluation_model(cfg, corpus.vocab_size, device, weights, plan)
    except Exception as err:  # a checkpoint of an older version has no checksums to verify
        raise CheckpointError(
            f"{path} is not a valid weights file ({type(err).__name__}); {_others(folder)}"
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
    bad = [name for name, t in weights.items() if t.is_floating_point() and not t.isfinite().all()]
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
