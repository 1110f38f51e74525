"""Print this record's markdown tables from its runs' trainer_state.json and config.toml.

    python benchmarks/records/2026-11-27-cpu-converged/table.py

docs/reproduction.md ("Recipes") shows these tables; tests/test_recipe_record.py checks that
every row it prints is there.
"""

from __future__ import annotations

import json
from pathlib import Path

import tomllib

from hornn_dist.config import load_config
from hornn_dist.training.optim import resolve_clip

HERE = Path(__file__).resolve().parent
SCREEN = HERE.parent / "2026-11-27-cpu-recipe-search" / "h100_screen" / "runs"
MODELS = {"rnn": "RNN (order 1)", "hornn3-sum": "HORNN-3 `sum`", "hornn3-max": "HORNN-3 `max`",
          "hornn3-fofe": "HORNN-3 `fofe`", "hornn3-gated": "HORNN-3 `gated`", "lstm": "LSTM"}  # fmt: skip
# the converged runs under the shipped recipe (clip_mode auto), then the one that is not
SHIPPED = [("converged", name) for name in MODELS if name != "hornn3-sum"]
SHIPPED.insert(1, ("converged_sum05", "hornn3-sum"))
NOT_SHIPPED = [("converged", "hornn3-sum")]


def state(folder: Path) -> dict:
    """Return a run folder's trainer_state.json."""
    return json.loads((folder / "trainer_state.json").read_text())


def clip(folder: Path, resolved_now: bool = False) -> str:
    """Return the run's clip as "norm 1" from its config.toml. `auto` is shown as what it
    resolves to now (`resolved_now`: the runs since 893e777) or as norm 1, what it gave every
    model at the commits of the earlier runs that have it (commands.md)."""
    optim = tomllib.loads((folder / "config.toml").read_text())["optim"]
    if optim["clip_mode"] == "auto":
        if not resolved_now:
            return "norm 1 (auto)"
        cfg = load_config(folder / "config.toml")
        return f"norm {resolve_clip(cfg.model, cfg.optim).clip:g} (auto)"
    return f"{optim['clip_mode']} {optim['clip']:g}"


def converged_rows() -> list[str]:
    """One row per converged run: epochs, stop, best valid, test on best and last, x RNN."""
    rnn = state(HERE / "converged" / "runs" / "rnn")["test"]["ppl"]
    rows = []
    for group, name in SHIPPED + NOT_SHIPPED:
        folder = HERE / group / "runs" / name
        s = state(folder)
        best = min(v["ppl"] for v in s["valid_history"])
        shipped = "✓" if (group, name) in SHIPPED else ""
        if s["test"] is None:  # not finished: the stopping rule had not ended it yet
            tests = "not finished | – | – |"
        else:
            tests = f"{s['test']['ppl']:.2f} | {s['test_last']['ppl']:.2f} | {s['test']['ppl'] / rnn:.3f} |"
        rows.append(
            f"| {MODELS[name]} | {clip(folder)} | {shipped} | {s['epoch']} | {best:.2f} | " + tests
        )
    return rows


def patience_rows() -> list[str]:
    """Each converged run under patience 1 (where it first stopped, `patience1/`) and under
    patience 2 (the same run resumed): epochs, test ppl on the best checkpoint, x RNN."""
    runs = {"converged": HERE / "patience1" / "converged_runs",
            "converged_sum05": HERE / "patience1" / "converged_sum05_runs"}  # fmt: skip
    rnn1 = state(runs["converged"] / "rnn")["test"]["ppl"]
    rnn2 = state(HERE / "converged" / "runs" / "rnn")["test"]["ppl"]
    rows = []
    for group, name in SHIPPED + NOT_SHIPPED:
        before, after = state(runs[group] / name), state(HERE / group / "runs" / name)
        if before["test"] is None or after["test"] is None:
            continue  # not finished under one of the two
        cells = [MODELS[name], clip(HERE / group / "runs" / name)]
        for s, rnn in ((before, rnn1), (after, rnn2)):
            cells += [str(s["epoch"]), f"{s['test']['ppl']:.2f}", f"{s['test']['ppl'] / rnn:.3f}"]
        rows.append("| " + " | ".join(cells) + " |")
    return rows


def synthetic_rows() -> list[str]:
    """One row per model of the generated-text sweep (H 64, shipped recipe, to the stopping
    rule): epochs, best valid, test on best and last, x RNN; "not finished" where it is not."""
    folder = HERE / "synthetic" / "runs"
    rnn = state(folder / "rnn")["test"]["ppl"]
    rows = []
    for name, label in MODELS.items():
        s = state(folder / name)
        best = min(v["ppl"] for v in s["valid_history"])
        if s["test"] is None:
            tests = "not finished | – | – |"
        else:
            tests = f"{s['test']['ppl']:.2f} | {s['test_last']['ppl']:.2f} | {s['test']['ppl'] / rnn:.3f} |"
        rows.append(
            f"| {label} | {clip(folder / name, resolved_now=True)} | {s['epoch']} | {best:.2f} | "
            + tests
        )
    return rows


def curve_rows(epochs: int = 7) -> list[str]:
    """Validation ppl at epochs 1..7: the RNN and LSTM under the shipped recipe against the
    recipe each trained best under before (the 2026-11-27 H100 screen: norm 0.25 / value 5)."""
    pairs = [
        ("RNN (order 1)", HERE / "converged" / "runs" / "rnn", SCREEN / "rnn-sn025"),
        ("LSTM", HERE / "converged" / "runs" / "lstm", SCREEN / "lstm-v5"),
    ]
    rows = []
    for label, ours, before in pairs:
        for folder, recipe in ((ours, clip(ours) + " (shipped)"), (before, clip(before))):
            ppl = [v["ppl"] for v in state(folder)["valid_history"]][:epochs]
            rows.append(f"| {label} | {recipe} | " + " | ".join(f"{p:.2f}" for p in ppl) + " |")
    return rows


def screen_rows() -> list[str]:
    """Two-epoch screens of sum-3 and the RNN: validation ppl per epoch and test ppl."""
    rows = []
    for group in ("sum_screen", "sum_screen2"):
        for folder in sorted((HERE / group / "runs").iterdir()):
            s = state(folder)
            cfg = tomllib.loads((folder / "config.toml").read_text())
            model = "RNN (order 1)" if cfg["model"]["order"] == 1 else "HORNN-3 `sum`"
            change = [f"lr {cfg['optim']['lr']:g}"] if cfg["optim"]["lr"] != 0.5 else []
            if cfg["model"]["activation"] != "tanh":
                change.append(cfg["model"]["activation"])
            if cfg["model"]["recurrent_init"] != "scaled":
                change.append(f"init {cfg['model']['recurrent_init']}")
            ppl = [f"{v['ppl']:.2f}" for v in s["valid_history"]]
            rows.append(
                f"| {model} | {clip(folder)} | {', '.join(change)} | "
                + " | ".join(ppl)
                + f" | {s['test']['ppl']:.2f} |"
            )
    return rows


def h400_rows() -> list[str]:
    """The 600-step H 400 checks of this record: validation ppl at step 600."""
    rows = []
    for folder in sorted((HERE / "h400" / "runs").iterdir()):
        s = state(folder)
        rows.append(f"| {folder.name} | {clip(folder)} | {s['valid_history'][-1]['ppl']:.2f} |")
    return rows


def halve_below_rows() -> list[str]:
    """Each model of the shipped recipe, seed 1234, under §4's plateau rule (`SHIPPED`) and
    under `optim.halve_below` 0.003 (`halve_below/`): epochs, best valid, test, x RNN."""
    return rule_rows(shipped_runs(), HERE / "halve_below" / "runs")


def halve_before_stop_rows() -> list[str]:
    """The same comparison for `optim.halve_before_stop` (`halve_before_stop/`)."""
    return rule_rows(shipped_runs(), HERE / "halve_before_stop" / "runs")


def shipped_runs() -> dict[str, Path]:
    """Each model's run folder under the shipped recipe, seed 1234 (`SHIPPED`)."""
    return {name: HERE / group / "runs" / name for group, name in SHIPPED}


def finished_state(folder: Path) -> dict | None:
    """Return a run's trainer state when the stopping rule ended it; None when it is absent or
    not finished."""
    if not folder.is_dir():
        return None
    s = state(folder)
    return s if s["test"] is not None else None


def run_cells(s: dict, rnn_test: float) -> list[str]:
    """A finished run's epochs, best valid ppl, test ppl and test ppl over the RNN's."""
    best = min(v["ppl"] for v in s["valid_history"])
    return [
        str(s["epoch"]),
        f"{best:.2f}",
        f"{s['test']['ppl']:.2f}",
        f"{s['test']['ppl'] / rnn_test:.3f}",
    ]


def synthetic_halve_before_stop_rows() -> list[str]:
    """The generated-text runs (`synthetic/`) and the same under `optim.halve_before_stop`
    (`synthetic_halve_before_stop/`)."""
    before = {name: HERE / "synthetic" / "runs" / name for name in MODELS}
    return rule_rows(before, HERE / "synthetic_halve_before_stop" / "runs")


def two_seed_rows() -> list[str]:
    """Each model under `optim.halve_before_stop` with seed 1234 (`halve_before_stop/`) and
    1235 (`seed1235/`, the models it holds trained to their stop): epochs, best valid, test
    and x RNN per seed, and the mean ratio."""
    seeds = {1234: HERE / "halve_before_stop" / "runs", 1235: HERE / "seed1235" / "runs"}
    rnn = {seed: state(runs / "rnn")["test"]["ppl"] for seed, runs in seeds.items()}
    rows = []
    for name, label in MODELS.items():
        cells, ratios = [label], []
        for seed, runs in seeds.items():
            s = finished_state(runs / name)
            if s is None:
                break
            ratios.append(s["test"]["ppl"] / rnn[seed])
            cells += run_cells(s, rnn[seed])
        else:
            rows.append("| " + " | ".join([*cells, f"{sum(ratios) / len(ratios):.3f}"]) + " |")
    return rows


def rule_rows(before: dict[str, Path], after_runs: Path) -> list[str]:
    """One row per model of `before` (name -> run folder) that `after_runs` holds trained to
    its stop: its clip, then epochs, best valid, test and x RNN under each rule."""
    before_rnn = state(before["rnn"])["test"]["ppl"]
    after_rnn = state(after_runs / "rnn")["test"]["ppl"]
    rows = []
    for name, folder in before.items():
        after = finished_state(after_runs / name)
        if after is None:
            continue  # not trained to its stop under the new rule
        cells = [MODELS[name], clip(folder, resolved_now=folder.parent.parent.name != "converged")]
        cells += run_cells(state(folder), before_rnn) + run_cells(after, after_rnn)
        rows.append("| " + " | ".join(cells) + " |")
    return rows


def main() -> None:
    """Print every table."""
    print(
        "| model | clip | shipped | epochs | best valid ppl | test ppl (best) | test ppl (last) | × RNN |"
    )
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |")
    print("\n".join(converged_rows()))
    print(
        "\n| model | clip | epochs (1) | test ppl (1) | × RNN (1) | epochs (2) | test ppl (2) | × RNN (2) |"
    )
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    print("\n".join(patience_rows()))
    print(
        "\n| model | clip | epochs | best valid ppl | test ppl (best) | test ppl (last) | × RNN |"
    )
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    print("\n".join(synthetic_rows()))
    print("\n| model | clip | ep 1 | ep 2 | ep 3 | ep 4 | ep 5 | ep 6 | ep 7 |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    print("\n".join(curve_rows()))
    print("\n| model | clip | changed | valid ep 1 | valid ep 2 | test ppl |")
    print("| --- | --- | --- | ---: | ---: | ---: |")
    print("\n".join(screen_rows()))
    print(
        "\n| model | clip | epochs (§4) | best valid (§4) | test ppl (§4) | × RNN (§4) "
        "| epochs (halve_below) | best valid (halve_below) | test ppl (halve_below) | × RNN (halve_below) |"
    )
    print("| --- | --- |" + " ---: |" * 8)
    print("\n".join(halve_below_rows()))
    for rows in (halve_before_stop_rows, synthetic_halve_before_stop_rows):
        if (HERE / rows.__name__.removesuffix("_rows") / "runs").is_dir():
            print(
                "\n| model | clip | epochs (before) | best valid (before) | test ppl (before) "
                "| × RNN (before) | epochs (halve_before_stop) | best valid (halve_before_stop) "
                "| test ppl (halve_before_stop) | × RNN (halve_before_stop) |"
            )
            print("| --- | --- |" + " ---: |" * 8)
            print("\n".join(rows()))
    if (HERE / "seed1235" / "runs").is_dir():
        print(
            "\n| model | epochs (1234) | best valid (1234) | test ppl (1234) | × RNN (1234) "
            "| epochs (1235) | best valid (1235) | test ppl (1235) | × RNN (1235) | × RNN (mean) |"
        )
        print("| --- |" + " ---: |" * 9)
        print("\n".join(two_seed_rows()))
    print("\n| run | clip | valid ppl at step 600 |")
    print("| --- | --- | ---: |")
    print("\n".join(h400_rows()))


if __name__ == "__main__":
    main()
