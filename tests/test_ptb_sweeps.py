"""The PTB sweeps of the paper's benchmark (configs/sweeps/ptb_*.toml) plan the paper's tables
(Table 2, Figure 4, Table 3 over seeds and lrs with matched baselines) and each PTB row's
config (configs/ptb/) over three seeds, and a run trains from a prepared PTB cache alone with
`datasets` unimportable (a GPU machine may have neither)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path

import pytest

from hornn_dist.config import RunConfig, load_config
from hornn_dist.data.pipeline import prepare_corpus
from hornn_dist.sweeps.params import MATCH_TOLERANCE, total_parameters
from hornn_dist.sweeps.sweep_file import PlannedRun, read_sweep

REPO = Path(__file__).resolve().parents[1]
SWEEPS = REPO / "configs" / "sweeps"
SEEDS = (1234, 1235, 1236)
POOLINGS = ("sum", "max", "fofe", "gated")
TABLE3 = ("rnn", *(f"hornn3-{p}" for p in POOLINGS), "lstm")
PTB_VOCAB = 10_000  # Mikolov's PTB: 9,998 words, <unk> and <eos>


def write_ptb_like(folder: Path, vocab: int = PTB_VOCAB) -> Path:
    """Write ptb.{train,valid,test}.txt whose train split has PTB's vocabulary size (words,
    `<unk>` and the `<eos>` the preset adds); return the folder."""
    folder.mkdir(parents=True, exist_ok=True)
    words = [f"w{i}" for i in range(vocab - 2)] + ["<unk>"]
    lines = [" ".join(words[i : i + 20]) for i in range(0, len(words), 20)]
    (folder / "ptb.train.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    for split in ("valid", "test"):
        (folder / f"ptb.{split}.txt").write_text("\n".join(lines[:40]) + "\n", encoding="utf-8")
    return folder


def plan_ptb_sweeps(folder: Path, files: Iterable[Path]) -> dict[str, dict[str, PlannedRun]]:
    """Return the runs of each sweep file by name (keyed by the file's stem), PTB pointed at a
    corpus of PTB's vocabulary size written into `folder` (prepared here in one process:
    match_params counts on it)."""
    ptb = write_ptb_like(folder / "ptb")
    sets = (f"data.path={ptb}", f"data.cache_dir={folder / 'cache'}")
    prepare_corpus(
        load_config(REPO / "configs" / "ptb_paper.toml", list(sets)).data, progress=False
    )
    return {file.stem: {run.name: run for run in read_sweep(file, sets).runs} for file in files}


@pytest.fixture(scope="module")
def plans(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, PlannedRun]]:
    """The runs of each PTB sweep by name (`plan_ptb_sweeps`)."""
    return plan_ptb_sweeps(
        tmp_path_factory.mktemp("ptb"),
        [
            SWEEPS / f"{s}.toml"
            for s in (
                "ptb_fair",
                "ptb_orders",
                "ptb_alpha",
                "ptb_table3_cpu",
                "ptb_chosen",
                "ptb_sizes",
            )
        ],
    )


def check_shipped_recipe(run: PlannedRun, lr: float = 0.5, hidden: int | None = 400) -> None:
    """Assert configs/ptb_paper.toml's recipe, with checkpoints at epoch ends only."""
    cfg = run.config
    assert (cfg.train.batch_size, cfg.train.bptt, cfg.train.epochs) == (20, 30, 30), run.name
    assert cfg.train.mixed_precision == "bf16" and cfg.train.checkpoint_every == 0, run.name
    assert (cfg.optim.lr, cfg.optim.clip_mode, cfg.optim.schedule) == (lr, "auto", "plateau")
    assert cfg.optim.halve_before_stop and cfg.optim.stop_improvement == 0.003, run.name
    assert cfg.data.preset == "ptb" and cfg.model.activation == "tanh", run.name
    if hidden is not None:
        assert cfg.model.hidden_size == cfg.model.embedding_size == hidden, run.name


def test_ptb_fair_plans_table3_the_matched_baselines_and_two_lrs(plans: dict) -> None:
    runs = plans["ptb_fair"]
    models = (*TABLE3, "rnn-matched", "lstm-matched")
    expected = {f"{m}-seed{s}--{r}" for m in models for s in SEEDS for r in ("lr05", "lr1")}
    assert set(runs) == expected and len(runs) == 48
    fofe = runs["hornn3-fofe-seed1234--lr05"].config
    target = total_parameters(fofe.model, PTB_VOCAB)
    for name, run in runs.items():
        model, seed, recipe = re.fullmatch(r"(.+)-seed(\d+)--(lr05|lr1)", name).groups()
        cfg = run.config.model
        assert run.config.train.seed == int(seed) and run.model == f"{model}-seed{seed}"
        matched = model.endswith("-matched")
        check_shipped_recipe(run, {"lr05": 0.5, "lr1": 1.0}[recipe], None if matched else 400)
        base = model.removesuffix("-matched")
        if base == "lstm":
            assert cfg.arch == "lstm"
        else:
            assert cfg.arch == "hornn"
            assert (cfg.order, cfg.pooling) == ((1, "sum") if base == "rnn" else (3, base[7:]))
            assert cfg.alpha == 0.6
        if (
            matched
        ):  # E follows H (configs/ptb_paper.toml ties them), the total within 2% of FOFE-3's
            assert run.matched_to == f"hornn3-fofe-seed{seed}--{recipe}"
            assert cfg.hidden_size == cfg.embedding_size != 400
            assert abs(total_parameters(cfg, PTB_VOCAB) / target - 1) <= MATCH_TOLERANCE
    rnn = runs["rnn-matched-seed1234--lr05"].config.model
    lstm = runs["lstm-matched-seed1234--lr05"].config.model
    # FOFE-3 has more parameters than the RNN at H 400 and fewer than the LSTM
    assert rnn.hidden_size > 400 > lstm.hidden_size


def test_ptb_table3_cpu_is_ptb_fairs_first_seed_in_fp32(plans: dict) -> None:
    cpu, fair = plans["ptb_table3_cpu"], plans["ptb_fair"]
    order = ("hornn3-fofe", "rnn", "hornn3-gated", "hornn3-max", "hornn3-sum", "lstm")
    assert list(cpu) == [f"{m}-seed1234" for m in order]  # every Table 3 row, FOFE first
    for name, run in cpu.items():
        gpu = fair[f"{name}--lr05"].config
        assert run.config.train.mixed_precision == "no", (
            name
        )  # the GPU run's bf16 is all that differs
        same = replace(
            gpu,
            train=replace(gpu.train, mixed_precision="no", output_dir=run.config.train.output_dir),
        )
        assert run.config == same, name


def test_ptb_orders_and_alpha_plan_table2_and_figure4(plans: dict) -> None:
    orders = plans["ptb_orders"]
    cells = {f"hornn{n}-{p}" for n in (2, 3, 4) for p in POOLINGS}
    assert set(orders) == cells | {"rnn", "lstm"}
    for name, run in orders.items():
        check_shipped_recipe(run)
        assert run.config.train.seed == 1234
        if name in cells:
            assert (run.config.model.order, run.config.model.pooling) == (int(name[5]), name[7:])
    alpha = plans["ptb_alpha"]
    alphas = (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
    assert list(alpha) == [f"fofe3-alpha{a}" for a in alphas]
    for run, a in zip(alpha.values(), alphas, strict=True):
        check_shipped_recipe(run)
        cfg = run.config.model
        assert (cfg.pooling, cfg.order, cfg.alpha, run.config.train.seed) == ("fofe", 3, a, 1234)


@pytest.mark.integration
def test_training_from_a_prepared_ptb_cache_needs_no_datasets(tmp_path: Path) -> None:
    folder = write_ptb_like(tmp_path / "ptb", vocab=60)
    cache, out = tmp_path / "cache", tmp_path / "run"
    sets = [
        f"data.path={folder}",
        f"data.cache_dir={cache}",
        "model.hidden_size=8",
        "model.embedding_size=8",
        "train.max_steps=2",
        "train.batch_size=2",
        "train.eval_batch_size=2",
        "train.bptt=5",
        f"train.output_dir={out}",
        "log.tensorboard=false",
    ]
    args = ["configs/ptb.toml", *(a for s in sets for a in ("--set", s))]
    prepare = [sys.executable, "-m", "hornn_dist.prepare", *args, "--quiet"]
    subprocess.run(prepare, cwd=REPO, check=True, capture_output=True, timeout=120)
    shutil.rmtree(folder)  # as on the GPU machine: the shards travel, the text need not
    # the GPU image has no `datasets`: an import of it anywhere in the trainer fails this run
    poisoned = (
        "import sys; sys.modules['datasets'] = None; "
        "from hornn_dist.train import cli; sys.argv[0] = 'hornn_dist.train'; cli()"
    )
    proc = subprocess.run(
        [sys.executable, "-c", poisoned, *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "already prepared" in proc.stderr and "test: " in proc.stderr
    assert "reached train.max_steps = 2" in proc.stderr


def check_same_recipe(config: RunConfig, best: RunConfig, where: object) -> None:
    """Assert that `config` trains `best`'s model, optimiser and batches (its seed and folders
    aside); an LSTM's pooling, which torch.nn's LSTM ignores, is not compared."""
    model = config.model
    if model.arch != "hornn":
        model = replace(model, pooling=best.model.pooling)
    assert model == best.model, where
    assert config.optim == best.optim, where
    for key in ("batch_size", "bptt", "epochs", "eval_batch_size", "mixed_precision"):
        assert getattr(config.train, key) == getattr(best.train, key), (key, where)


def test_ptb_chosen_trains_each_of_its_recipes_over_three_seeds(plans: dict) -> None:
    """ptb_chosen.toml: each PTB table row's recipe (15 groups: six models without dropout,
    six with it, the RNN and the LSTM at equal parameters with dropout, the RNN without) at
    seeds 1234-1236, the three runs of a group the same recipe but for the seed."""
    groups: dict[str, list[PlannedRun]] = {}
    for run in plans["ptb_chosen"].values():
        groups.setdefault(run.name.rpartition("-seed")[0], []).append(run)
    assert len(groups) == 15 and len(plans["ptb_chosen"]) == 45
    for name, runs in groups.items():
        assert [r.config.train.seed for r in runs] == list(SEEDS), name
        for run in runs[1:]:
            check_same_recipe(run.config, runs[0].config, run.name)
        assert runs[0].config.data.preset == "ptb", name


def test_each_ptb_row_config_trains_its_ptb_chosen_group(plans: dict) -> None:
    """configs/ptb/ROW.toml is one PTB table row a user runs as is: each group of ptb_chosen.toml
    starts from one of them and trains its recipe, and each writes to runs/ptb_rows/ROW."""
    rows = sorted((REPO / "configs" / "ptb").glob("*.toml"))
    groups: dict[Path, list[PlannedRun]] = {}
    for run in plans["ptb_chosen"].values():
        groups.setdefault(run.base, []).append(run)
    assert set(groups) == {row.resolve() for row in rows} and len(rows) == 15
    for row in rows:
        config = load_config(row)
        assert config.train.output_dir == f"runs/ptb_rows/{row.stem}", row.name
        for run in groups[row.resolve()]:
            check_same_recipe(run.config, config, run.name)


def test_ptb_sizes_trains_each_unsized_row_at_h200_and_h1024(plans: dict) -> None:
    """ptb_sizes.toml: every PTB row but the two sized ones, its recipe whole at H = E = 200 (3
    epochs) and 1024 (1 epoch), each run named ROW--hSIZE."""
    rows = sorted(
        row for row in (REPO / "configs" / "ptb").glob("*.toml") if "sized" not in row.stem
    )
    runs = plans["ptb_sizes"]
    assert len(rows) == 12 and len(runs) == 24
    for row in rows:
        config = load_config(row)
        for size, epochs in ((200, 3), (1024, 1)):
            run = runs[f"{row.stem}--h{size}"]
            assert run.config.model.hidden_size == run.config.model.embedding_size == size
            assert run.config.train.epochs == epochs and run.config.data.preset == "ptb"
            model = replace(config.model, hidden_size=size, embedding_size=size)
            train = replace(config.train, epochs=epochs)
            check_same_recipe(run.config, replace(config, model=model, train=train), run.name)


def test_adaptive_quality_pairs_each_row_with_its_adaptive_softmax() -> None:
    """adaptive_quality.toml: on PTB and the bundled corpus, each of three PTB rows as shipped and
    with the adaptive softmax (untied), and the two tied rows with it tied, nothing else changed."""
    runs = {run.name: run for run in read_sweep(SWEEPS / "adaptive_quality.toml", ()).runs}
    assert len(runs) == 16
    for corpus in ("ptb", "kjv"):
        for row in ("rnn", "gated3", "lstm_dropout"):
            full, adaptive = runs[f"{corpus}.{row}"].config, runs[f"{corpus}.{row}+adaptive"].config
            shipped = load_config(REPO / "configs" / "ptb" / f"{row}.toml")
            assert full.model == shipped.model and full.optim == shipped.optim, row
            assert adaptive.model.output_layer == "adaptive" and not adaptive.model.tie_weights
            untied = replace(
                adaptive.model, output_layer="plain", tie_weights=full.model.tie_weights
            )
            assert untied == full.model and adaptive.optim == full.optim, row
            assert full.data == adaptive.data and full.train.epochs == adaptive.train.epochs == 3
            if full.model.tie_weights:
                tied = runs[f"{corpus}.{row}+adaptive_tied"].config
                assert tied.model == replace(full.model, output_layer="adaptive"), row
                assert (tied.optim, tied.data) == (full.optim, full.data), row
                assert tied.train.epochs == 3
