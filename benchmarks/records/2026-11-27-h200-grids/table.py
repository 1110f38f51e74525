"""Print this record's markdown tables from its runs' trainer_state.json and config.toml.

    python benchmarks/records/2026-11-27-h200-grids/table.py

README "Results" and docs/reproduction.md show these tables; tests/test_h200_record.py checks
that every row printed here is there.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from hornn_dist.config import load_config
from hornn_dist.training.optim import resolve_clip

HERE = Path(__file__).resolve().parent
SEEDS = (1234, 1235, 1236, 1237, 1238)  # 1234 is demo_orders' run, the others demo_seeds'
MODELS = {"rnn": "RNN (order 1)", "hornn3-sum": "HORNN-3 `sum`", "hornn3-max": "HORNN-3 `max`",
          "hornn3-fofe": "HORNN-3 `fofe`", "hornn3-gated": "HORNN-3 `gated`", "lstm": "LSTM"}  # fmt: skip
POOLINGS = {"sum": "HORNN `sum`", "max": "HORNN `max`", "fofe": "HORNN `fofe`", "gated": "HORNN `gated`"}  # fmt: skip


def state(folder: Path) -> dict:
    """Return a run folder's trainer_state.json."""
    return json.loads((folder / "trainer_state.json").read_text())


def test_ppl(folder: Path) -> float:
    """Return the run's test ppl on its best checkpoint by validation."""
    return state(folder)["test"]["ppl"]


def best_valid(folder: Path) -> float:
    """Return the run's best validation ppl."""
    return min(v["ppl"] for v in state(folder)["valid_history"])


def clip(folder: Path) -> str:
    """Return the clip the run trained under, as "norm 1 (auto)" or "norm 1"."""
    cfg = load_config(folder / "config.toml")
    resolved = resolve_clip(cfg.model, cfg.optim)
    return f"norm {resolved.clip:g}" + (" (auto)" if cfg.optim.clip_mode == "auto" else "")


def seed_runs(name: str) -> list[Path]:
    """Return the shipped-recipe run folders of model `name`, seeds 1234..1238 in order."""
    runs = [HERE / "demo_orders" / "runs" / name]
    return runs + [HERE / "demo_seeds" / "runs" / f"{name}-seed{s}" for s in SEEDS[1:]]


def mean_sd(values: list[float]) -> str:
    """Return "mean ± sd" (sample sd) with two decimals."""
    return f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f}"


def seeds_rows() -> list[str]:
    """One row per model under the shipped recipe: test ppl per seed, mean ± sd, the mean over
    the RNN's mean, the mean best validation ppl and the range of epochs the rule stopped at."""
    rnn = statistics.mean(test_ppl(f) for f in seed_runs("rnn"))
    rows = []
    for name, label in MODELS.items():
        runs = seed_runs(name)
        tests = [test_ppl(f) for f in runs]
        epochs = [state(f)["epoch"] for f in runs]
        rows.append(
            f"| {label} | {clip(runs[0])} | "
            + " | ".join(f"{t:.2f}" for t in tests)
            + f" | {mean_sd(tests)} | {statistics.mean(tests) / rnn:.3f} | "
            + f"{mean_sd([best_valid(f) for f in runs])} | {min(epochs)}–{max(epochs)} |"
        )
    return rows


def recipe_rows() -> list[str]:
    """The two recipe questions over seeds 1234-1236: best validation and test ppl, mean ± sd,
    beside the shipped recipe's runs of the same model and seeds."""
    questions = [("hornn3-sum", "norm1", "clip norm 1 (shipped: 0.5)"),
                 ("hornn3-fofe", "alpha0.3", "α 0.3 (shipped: 0.6)")]  # fmt: skip
    rows = []
    for name, tag, change in questions:
        tried = [HERE / "recipe_seeds" / "runs" / f"{name}-{tag}-seed{s}" for s in SEEDS[:3]]
        shipped = seed_runs(name)[:3]
        cells = [MODELS[name], change]
        for runs in (tried, shipped):
            cells += [mean_sd([best_valid(f) for f in runs]), mean_sd([test_ppl(f) for f in runs])]
        rows.append("| " + " | ".join(cells) + " |")
    return rows


def orders_rows() -> list[str]:
    """Table 2: test ppl (× the RNN's) of each pooling at orders 2-4, the RNN at order 1."""
    runs = HERE / "demo_orders" / "runs"
    rnn = test_ppl(runs / "rnn")
    rows = [f"| RNN | {rnn:.2f} | | | |"]
    for pooling, label in POOLINGS.items():
        cells = [label, ""]
        for order in (2, 3, 4):
            ppl = test_ppl(runs / f"hornn{order}-{pooling}")
            cells.append(f"{ppl:.2f} ({ppl / rnn:.3f})")
        rows.append("| " + " | ".join(cells).replace("|  |", "| |") + " |")
    lstm = test_ppl(runs / "lstm")
    rows.append(f"| LSTM | {lstm:.2f} ({lstm / rnn:.3f}) | | | |")
    return rows


def alpha_rows() -> list[str]:
    """Figure 4: FOFE HORNN-3 by α: epochs, best validation ppl, test ppl, × the RNN's."""
    rnn = test_ppl(HERE / "gpu_reference" / "runs" / "rnn")
    rows = []
    for folder in sorted((HERE / "demo_alpha" / "runs").iterdir()):
        alpha = load_config(folder / "config.toml").model.alpha
        ppl = test_ppl(folder)
        rows.append(
            f"| {alpha:g} | {state(folder)['epoch']} | {best_valid(folder):.2f} | {ppl:.2f} | "
            f"{ppl / rnn:.3f} |"
        )
    return rows


def dropout_rows() -> list[str]:
    """FOFE HORNN-3 and the LSTM without and with dropout 0.2, 15 epochs each."""
    rows = []
    for folder in sorted((HERE / "demo_dropout" / "runs").iterdir()):
        cfg = load_config(folder / "config.toml")
        s = state(folder)
        label = "LSTM" if cfg.model.arch == "lstm" else "HORNN-3 `fofe`"
        rows.append(
            f"| {label} | {cfg.model.dropout:g} | {s['epoch']} | {best_valid(folder):.2f} | "
            f"{s['test']['ppl']:.2f} | {s['test_last']['ppl']:.2f} |"
        )
    return rows


def main() -> None:
    """Print every table."""
    seeds = " | ".join(f"seed {s}" for s in SEEDS)
    print(f"| model | clip | {seeds} | mean ± sd | × RNN | best valid ppl | epochs |")
    print("| --- | --- |" + " ---: |" * (len(SEEDS) + 4))
    print("\n".join(seeds_rows()))
    print(
        "\n| model | tried | best valid ppl | test ppl | shipped: best valid ppl | shipped: test ppl |"
    )
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    print("\n".join(recipe_rows()))
    print("\n| model | order 1 | order 2 | order 3 | order 4 |")
    print("| --- | ---: | ---: | ---: | ---: |")
    print("\n".join(orders_rows()))
    print("\n| α | epochs | best valid ppl | test ppl | × RNN |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    print("\n".join(alpha_rows()))
    print("\n| model | dropout | epochs | best valid ppl | test ppl (best) | test ppl (last) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    print("\n".join(dropout_rows()))


if __name__ == "__main__":
    main()
