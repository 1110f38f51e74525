"""Runs per model and knob across the PTB sweep files (research/sweeps/ptb*.toml and
configs/sweeps/ptb*.toml): how much search each model of the PTB table had, seeds counted as
runs. Only trained runs count: a planned run counts where a record under research/records holds
its trainer_state.json (in a folder SWEEP/RUN, as research/tools/collect_runs.sh copies it).
Prints a markdown table.

    python research/records/2026-12-01-cpu-ptb-equal-knobs/knob_table.py  (matched runs count
    parameters on the prepared corpus: PTB at /work/shared/data/ptb)
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from hornn_dist.sweeps.sweep_file import read_sweep

REPO = Path(__file__).resolve().parents[3]


def kind(model) -> str:
    """Return the PTB table's row a model belongs to."""
    if model.arch != "hornn":
        return model.arch.upper() if model.arch == "lstm" else model.arch
    if model.order == 1:
        return "RNN"
    return f"HORNN-{model.order} {model.pooling}"


def scale(model) -> float:
    """Return the feedback's scale: c, times FOFE's alpha at order 1 (the scaled RNN)."""
    alpha = (
        model.alpha
        if (model.arch == "hornn" and model.order == 1 and model.pooling == "fofe")
        else 1.0
    )
    return round(model.feedback_scale * alpha, 4)


def trained_runs() -> set[tuple[str, str]]:
    """Return (sweep file stem, run name) of every run a record holds (its trainer_state.json
    in SWEEP/RUN, or SWEEP/runs/RUN)."""
    found = set()
    for state in (REPO / "research" / "records").rglob("trainer_state.json"):
        run = state.parent
        found.add((run.parent.name, run.name))
        if run.parent.name == "runs":
            found.add((run.parent.parent.name, run.name))
    return found


def main() -> None:
    trained = trained_runs()
    runs: dict[str, list] = defaultdict(list)
    files = [*(REPO / "research" / "sweeps").glob("ptb*.toml")]
    files += (REPO / "configs" / "sweeps").glob("ptb*.toml")
    for path in sorted(files, key=lambda p: p.name):
        for run in read_sweep(path, ("data.path=/work/shared/data/ptb",)).runs:
            if (path.stem, run.name) in trained:
                runs[kind(run.config.model)].append(run.config)
    knobs = {
        "feedback scale (c, or alpha at order 1)": lambda c: scale(c.model),
        "FOFE alpha": lambda c: (
            c.model.alpha if c.model.pooling == "fofe" and c.model.arch == "hornn" else None
        ),
        "weight decay": lambda c: c.optim.weight_decay,
        "dropout": lambda c: c.model.dropout,
        "weight drop": lambda c: c.model.weight_drop,
        "schedule": lambda c: (
            c.optim.schedule
            + (f" {c.optim.halve_after}" if c.optim.schedule == "fixed_then_halve" else "")
        ),
        "tied": lambda c: c.model.tie_weights,
        "lr": lambda c: c.optim.lr,
    }
    print("| model | runs | " + " | ".join(knobs) + " |")
    print("| --- | ---: | " + " | ".join("---" for _ in knobs) + " |")
    order = ["RNN", "LSTM", "HORNN-3 sum", "HORNN-3 max", "HORNN-3 fofe", "HORNN-3 gated"]
    for name in order + sorted(set(runs) - set(order)):
        configs = runs.get(name, [])
        cells = []
        for read in knobs.values():
            values = sorted({v for v in (read(c) for c in configs) if v is not None}, key=str)
            cells.append(", ".join(f"{v:g}" if isinstance(v, float) else str(v) for v in values))
        print(f"| {name} | {len(configs)} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
