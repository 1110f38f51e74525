"""Each feedback path of trained runs, epoch by epoch: its gradient norm and its weights' size.

    python benchmarks/path_norms.py RUN [RUN ...] [--json OUT.json]

RUN is a run folder (train.output_dir) with its `tensorboard/` event files, `config.toml` and
checkpoints (or, in a record, its last `trainer_state.json`). For every `grad_norm/*` scalar the
trainer logged (the total and each layer's path n, ‖∂L/∂W_hn‖, and for gated pooling each gate's
W1n, W2n: docs/training.md), the median over each epoch's logged steps, before the clip. Where the
run's best checkpoint by validation is there, each path's weights too: the Frobenius norm of
W_hn and its spectral norm (largest singular value: the most a path can amplify a hidden state
it feeds back), the same of a fresh init under the run's config and seed (how far training moved
the path), and where the pool weighs path n by a fixed w_n (FOFE's α^n, eq. 5; 1 for sum, max
and the RNN) the path's gain as applied, w_n times its spectral norm. Prints a Markdown table
per run; `--json` writes the numbers with the command's commit and machine (common.run_meta).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import torch

from hornn_dist.config import load_config
from hornn_dist.run.run_layout import CONFIG_FILE, TENSORBOARD
from hornn_dist.run.run_state import STATE_FILE
from hornn_dist.training.dashboard import event_folders

from common import run_meta, write_json

GRAD_PREFIX = "grad_norm/"


def read_grad_norms(run: Path) -> dict[str, list[tuple[int, float]]]:
    """Return every `grad_norm/*` scalar of the run's TensorBoard files as tag -> [(step, value)]
    (all of them: TensorBoard's loader samples scalars unless told not to)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    folders = event_folders(run / TENSORBOARD)  # one per run start: the newest is the run's
    if not folders:
        raise SystemExit(f"path_norms.py: {run} has no {TENSORBOARD}/ (log.tensorboard = true)")
    acc = EventAccumulator(str(folders[-1]), size_guidance={"scalars": 0}).Reload()
    tags = [t for t in acc.Tags()["scalars"] if t.startswith(GRAD_PREFIX)]
    out: dict[str, list[tuple[int, float]]] = {}
    for tag in tags:  # a resumed run writes a step again: the last write wins
        out[tag[len(GRAD_PREFIX) :]] = sorted({e.step: e.value for e in acc.Scalars(tag)}.items())
    return out


def trainer_state(run: Path) -> tuple[dict[str, Any], Path | None]:
    """Return the run's last trainer state and its best checkpoint's folder (None where the
    folder keeps no checkpoints: a record's copy of a run)."""
    checkpoints = sorted((run / "checkpoints").glob("step_*"))
    path = checkpoints[-1] / STATE_FILE if checkpoints else run / STATE_FILE
    state = json.loads(path.read_text())
    best = run / "checkpoints" / state.get("best_checkpoint", "")
    return state, best if state.get("best_checkpoint") and best.is_dir() else None


def steps_per_epoch(state: dict[str, Any]) -> int:
    """Return the run's optimizer steps per epoch, from its epoch-end validations."""
    for entry in state.get("valid_history") or []:
        epoch = float(entry.get("epoch", 0))
        if epoch >= 1 and epoch == int(epoch):
            return round(entry["step"] / epoch)
    raise SystemExit("path_norms.py: the run has no epoch-end validation to size an epoch by")


def epoch_medians(norms: dict[str, list[tuple[int, float]]], per_epoch: int) -> list[dict]:
    """Return, per epoch (1-based), the median of each tag over that epoch's logged steps."""
    epochs: dict[int, dict[str, list[float]]] = {}
    for tag, points in norms.items():
        for step, value in points:
            epochs.setdefault((step - 1) // per_epoch + 1, {}).setdefault(tag, []).append(value)
    return [
        {"epoch": e, **{tag: statistics.median(v) for tag, v in sorted(epochs[e].items())}}
        for e in sorted(epochs)
    ]


def path_weights(best: Path) -> dict[str, dict[str, float]]:
    """Return each feedback path's (and gate's) Frobenius and spectral norm in checkpoint
    `best`'s weights and at a fresh init, and where the pool's weight is fixed, the gain as
    applied."""
    from safetensors.torch import load_file

    from hornn_dist.models.init import path_weights as pool_weights
    from hornn_dist.models.lm import build_model
    from hornn_dist.run.loading import evaluation_model

    cfg = load_config(best / CONFIG_FILE)
    weights = load_file(str(best / "model.safetensors"))
    vocab = weights["embedding.weight"].shape[0]
    model = evaluation_model(cfg, vocab, "cpu", weights)
    with torch.random.fork_rng(devices=[]):  # the trainer seeds, then builds the model
        torch.manual_seed(cfg.train.seed)
        fresh = build_model(cfg.model, vocab)
    fixed = cfg.model.arch == "rnn" or cfg.model.pooling in ("fofe", "sum", "max")
    pool = pool_weights(cfg.model) if fixed else None  # gated: r_n depends on the input
    init = fresh.feedback_path_slices()
    out = {}
    for key, parts in model.feedback_path_slices().items():
        norms = matrix_norms(parts)
        start = matrix_norms(init[key])
        out[key] = {
            **norms,
            "frobenius_init": start["frobenius"],
            "spectral_init": start["spectral"],
        }
        if pool is not None and "/path" in key:
            weight = pool[int(key.rpartition("/path")[2]) - 1]
            out[key] |= {"pool_weight": weight, "applied_spectral": weight * norms["spectral"]}
    return out


def matrix_norms(parts: list) -> dict[str, float]:
    """Return the Frobenius norm of the (param, index) blocks together and their largest
    spectral norm."""
    blocks = [param.detach()[index].double() for param, index in parts]
    return {
        "frobenius": float(torch.linalg.vector_norm(torch.cat([b.flatten() for b in blocks]))),
        "spectral": max(float(torch.linalg.matrix_norm(b, ord=2)) for b in blocks),
    }


def describe(run: Path) -> dict[str, Any]:
    """Return one run's per-epoch gradient norms, its best checkpoint's path weights and its
    validations."""
    state, best = trainer_state(run)
    per_epoch = steps_per_epoch(state)
    history = state.get("valid_history") or []
    return {
        "run": str(run),
        "steps_per_epoch": per_epoch,
        "best_checkpoint": state.get("best_checkpoint", ""),
        "epochs": epoch_medians(read_grad_norms(run), per_epoch),
        "valid_ppl": {round(float(v["epoch"]), 3): v["ppl"] for v in history if "ppl" in v},
        "weights": path_weights(best) if best is not None else {},
    }


def markdown(result: dict[str, Any]) -> str:
    """Return one run's tables: the gradient norms per epoch, then its paths' weights."""
    rows = result["epochs"]
    tags = sorted({t for r in rows for t in r if t != "epoch"}, key=lambda t: (t != "total", t))
    lines = [
        f"### {Path(result['run']).name}",
        "",
        "| epoch | valid ppl | " + " | ".join(tags) + " |",
        "| ---: | ---: | " + " | ".join("---:" for _ in tags) + " |",
    ]
    for row in rows:
        valid = result["valid_ppl"].get(float(row["epoch"]))
        cells = [f"{row[t]:.3f}" if t in row else "" for t in tags]
        ppl = f"{valid:.2f}" if valid is not None else ""
        lines.append(f"| {row['epoch']} | {ppl} | " + " | ".join(cells) + " |")
    if result["weights"]:
        lines += ["", f"Weights of {result['best_checkpoint']} (the best by validation):", ""]
        lines += [
            "| path | ‖W‖ Frobenius (init) | ‖W‖ spectral (init) | pool weight w_n | w_n · ‖W‖ spectral |",
            "| --- | ---: | ---: | ---: | ---: |",
        ]
        for key, norm in result["weights"].items():
            applied = [
                f"{norm[k]:.4g}" if k in norm else "" for k in ("pool_weight", "applied_spectral")
            ]
            lines.append(
                f"| {key} | {norm['frobenius']:.3f} ({norm['frobenius_init']:.3f}) | "
                f"{norm['spectral']:.3f} ({norm['spectral_init']:.3f}) | {' | '.join(applied)} |"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Print each run's tables; return the exit code."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="run folders")
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    args = parser.parse_args(argv)
    results = [describe(Path(run)) for run in args.runs]
    print("\n".join(markdown(r) for r in results), end="")
    if args.json is not None:
        meta = run_meta("path_norms.py", argv, torch.device("cpu"), args)
        write_json(args.json, meta, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
