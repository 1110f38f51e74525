"""Print the markdown tables of this record from its runs' trainer_state.json and config.toml.

    python benchmarks/records/2026-11-27-cpu-recipe-search/table.py

Each run folder holds the last checkpoint's trainer_state.json (valid_history: validation
perplexity at each epoch end) and the run's config.toml; `init` comes from RINIT in
h100_screen/command.sh (the run name's p = paper, s = scaled), see README.md.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import tomllib

from hornn_dist.config import OptimConfig
from hornn_dist.models import ModelConfig
from hornn_dist.models.init import path_weights, recurrent_std
from hornn_dist.training.optim import resolve_clip

HERE = Path(__file__).resolve().parent
MODELS = {"rnn": "RNN (order 1)", "sum": "HORNN-3 sum", "max": "HORNN-3 max",
          "fofe": "HORNN-3 fofe", "gated": "HORNN-3 gated", "lstm": "LSTM"}  # fmt: skip


def read_run(folder: Path) -> dict:
    """Return a run's model, init, clip, per-epoch validation ppl and stop reason."""
    state = json.loads((folder / "trainer_state.json").read_text())
    cfg = tomllib.loads((folder / "config.toml").read_text())
    model, recipe = folder.name.split("-", 1)
    mcfg = ModelConfig(
        **{k: v for k, v in cfg["model"].items() if k in ModelConfig.__annotations__}
    )
    if "recurrent_init" in cfg["model"]:  # a run of this branch: the shipped rule
        std = recurrent_std(mcfg)
    elif recipe.startswith("s") and mcfg.arch == "hornn":  # h100_screen's RINIT=scaled: uncapped
        std = 1 / math.sqrt(mcfg.hidden_size * sum(w * w for w in path_weights(mcfg)))
    else:
        std = mcfg.init_std
    optim = resolve_clip(mcfg, OptimConfig(**cfg["optim"]))
    clip = f"{optim.clip_mode} {optim.clip:g}"
    shipped = replace_model(mcfg)
    auto = resolve_clip(shipped, OptimConfig())  # what the shipped defaults resolve to
    shipped_init = math.isclose(std, recurrent_std(shipped))
    shipped_clip = (optim.clip_mode, optim.clip) == (auto.clip_mode, auto.clip)
    ppl = [round(v["ppl"], 2) for v in state["valid_history"] if float(v["epoch"]).is_integer()]
    return {"model": model, "std": std, "clip": clip, "ppl": ppl, "init_ok": shipped_init,
            "clip_ok": shipped_clip,
            "stop": state.get("stop_reason", ""), "hw": state.get("hardware", "")}  # fmt: skip


def replace_model(cfg: ModelConfig) -> ModelConfig:
    """Return cfg under the shipped defaults' init rule (recurrent_init = "scaled")."""
    from dataclasses import replace

    return replace(cfg, recurrent_init=ModelConfig().recurrent_init)


def table(runs_dir: Path) -> str:
    """Return one markdown row per run: validation ppl at each epoch end and the best."""
    runs = [read_run(f) for f in sorted(runs_dir.iterdir()) if (f / "trainer_state.json").exists()]
    order = list(MODELS)
    runs.sort(key=lambda r: (order.index(r["model"]), -r["std"], r["clip"]))
    epochs = max(len(r["ppl"]) for r in runs)
    head = "| model | feedback std | clip | shipped init | shipped clip | " + " | ".join(
        f"ep {i + 1}" for i in range(epochs)
    )
    lines = [head + " | best |", "| --- | ---: | --- | --- | --- |" + " ---: |" * (epochs + 1)]
    for r in runs:
        cells = [f"{p:.2f}" for p in r["ppl"]] + [""] * (epochs - len(r["ppl"]))
        best = f"**{min(r['ppl']):.2f}**" if r["ppl"] else ""
        marks = " | ".join("✓" if r[k] else "" for k in ("init_ok", "clip_ok"))
        row = f"| {MODELS[r['model']]} | {r['std']:.4f} | {r['clip']} | {marks} | "
        lines.append(row + " | ".join(cells) + f" | {best} |")
    return "\n".join(lines)


def cpu_table(runs_dir: Path) -> str:
    """Return one row per CPU run: its recipe line, steps, validations and test, from its log
    and trainer_state.json (the clip as the run resolved it: "auto" changed during the search)."""
    lines = [
        "| run | H | recipe (start-up log) | steps | validation ppl (step) | largest logged train ppl | test ppl | ended |",
        "| --- | ---: | --- | ---: | --- | ---: | ---: | --- |",
    ]
    for folder in sorted(f for f in runs_dir.iterdir() if (f / "trainer_state.json").exists()):
        state = json.loads((folder / "trainer_state.json").read_text())
        cfg = tomllib.loads((folder / "config.toml").read_text())
        log = (folder / "train.log").read_text()
        recipe = re.search(r"recipe: (.*?) \| activation \S+ \| (clip [^,]*),", log)
        train = [float(x) for x in re.findall(r"step \d+: loss [\d.]+, ppl ([\d.e+]+)", log)]
        valid = ", ".join(f"{v['ppl']:.2f} ({v['step']})" for v in state["valid_history"])
        test = state.get("test") or {}
        lines.append(
            f"| {folder.name} | {cfg['model']['hidden_size']} | {recipe.group(1)}; {recipe.group(2)} "
            f"| {state['step']} | {valid or '–'} | {max(train):.4g} | "
            f"{format(test['ppl'], '.2f') if test else '–'} | {state.get('stop_reason', '')} |"
        )
    return "\n".join(lines)


def paired_losses(a: Path, b: Path) -> str:
    """Return the training loss of two runs at each step both logged (same seed, same data)."""
    pattern = r"step (\d+): loss ([\d.]+),"
    la, lb = (dict(re.findall(pattern, (f / "train.log").read_text())) for f in (a, b))
    steps = sorted(set(la) & set(lb), key=int)
    lines = [f"| step | {a.name} | {b.name} | difference |", "| ---: | ---: | ---: | ---: |"]
    for st in steps:
        lines.append(f"| {st} | {la[st]} | {lb[st]} | {float(lb[st]) - float(la[st]):+.4f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(f"## h100_screen\n\n{table(HERE / 'h100_screen' / 'runs')}\n")
    if (HERE / "cpu" / "runs").is_dir():
        print(f"## cpu\n\n{cpu_table(HERE / 'cpu' / 'runs')}\n")
        runs = HERE / "cpu" / "runs"
        print(
            f"## demo: value 5 against norm 1\n\n{paired_losses(runs / 'demo-value5', runs / 'demo-norm1')}"
        )
